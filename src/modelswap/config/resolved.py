"""The resolved configuration: what the rest of modelswap consumes.

Every value here is final: macros are expanded, commands are split into argv, ports are
allocated, defaults are applied. Instances are immutable snapshots; mappings are read-only views
(excluded from hashing, so the dataclasses stay hashable).
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from modelswap.policy import PolicySet


@dataclass(frozen=True, slots=True)
class Timeouts:
    """Upstream request timeouts in seconds; ``total=None`` means no ceiling, ``connect`` or
    ``first_byte`` 0 no limit (llama-swap's 0)."""

    connect: float = 10.0
    first_byte: float = 600.0
    idle_between_chunks: float = 300.0
    total: float | None = None
    # llama-swap's connection settings; None keeps aiohttp's behaviour
    keepalive: float | None = None  # TCP keep-alive idle/interval seconds (0: none)
    tls_handshake: float | None = None  # added to connect for an https upstream
    idle_conn: float | None = None  # an idle pooled connection's lifetime (0: no limit)
    # llama-swap's disableKeepAlives (a model's): a new connection per request
    disable_keep_alives: bool = False

    @property
    def pooled(self) -> tuple[float | None, float | None, bool] | None:
        """The connection-pool settings, when any differs from the shared session's."""
        if self.keepalive is None and self.idle_conn is None and not self.disable_keep_alives:
            return None
        return self.keepalive, self.idle_conn, self.disable_keep_alives


@dataclass(frozen=True, slots=True)
class Filters:
    """Edits to a JSON request body: drop ``strip_params``, add ``default_params`` when absent,
    force ``set_params``. Values are any JSON value."""

    strip_params: tuple[str, ...] = ()
    set_params: Mapping[str, object] = field(default_factory=dict, hash=False)
    default_params: Mapping[str, object] = field(default_factory=dict, hash=False)

    def __bool__(self) -> bool:
        return bool(self.strip_params or self.set_params or self.default_params)


NO_FILTERS = Filters()


@dataclass(frozen=True, slots=True)
class DnsDiscovery:
    """Where a peer pool's members are found: every A/AAAA address of ``name`` (asked of
    ``nameserver``, an ``(ip, port)``, or of the system resolver when None) is a member at
    ``scheme://address:port``; ``name`` is resolved again every ``interval`` seconds."""

    name: str
    port: int
    interval: float = 10.0
    scheme: str = "http"
    nameserver: tuple[str, int] | None = None


@dataclass(frozen=True, slots=True)
class Peer:
    """Another gateway whose models are served through this one. ``api_key`` is sent to the
    peer and nowhere else; ``models`` is the static list (empty with ``discover``). With
    ``dns``, the peer is a pool: each address the name resolves to is a member peer (its own
    ``/v1/models``, its own breaker), and ``proxy`` only describes where they are found."""

    id: str
    proxy: str
    api_key: str | None = field(default=None, repr=False)
    models: tuple[str, ...] = ()
    discover: bool = False
    discover_interval: float = 60.0
    timeouts: Timeouts = Timeouts()
    breaker_failures: int = 3
    breaker_cooldown: float = 30.0
    filters: Filters = NO_FILTERS
    dns: DnsDiscovery | None = None
    pool: str | None = None  # a pool member: the id of the pool it belongs to


SCOPES = ("inference", "read", "admin")
PRIORITY_CLASSES = ("interactive", "batch")  # the first is served first


@dataclass(frozen=True, slots=True)
class Quota:
    """What one client may use (``apiKeys[].quota``); each 0 means no limit."""

    concurrency: int = 0
    requests_per_minute: int = 0
    tokens_per_minute: int = 0
    tokens_per_day: int = 0

    def __bool__(self) -> bool:
        return bool(
            self.concurrency
            or self.requests_per_minute
            or self.tokens_per_minute
            or self.tokens_per_day
        )


@dataclass(frozen=True, slots=True)
class KeyDefaults:
    """``keyDefaults``: the quota, class and weight of a key that gives none, and of the
    anonymous client when no keys are configured."""

    quota: Quota = Quota()
    priority: str = "interactive"
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class ApiKey:
    """A client key. ``secret`` never appears in repr, logs or exports; ``models`` holds glob
    patterns over model ids and aliases (empty = every model)."""

    name: str
    secret: str = field(repr=False)
    scopes: frozenset[str]
    models: tuple[str, ...] = ()
    quota: Quota = Quota()
    priority: str = "interactive"  # a PRIORITY_CLASSES member
    weight: float = 1.0

    def allows(self, model: ModelConfig) -> bool:
        return self.allows_names((model.id, *model.aliases))

    def allows_names(self, names: tuple[str, ...]) -> bool:
        """Whether any of ``names`` (one model's names) matches this key's patterns."""
        if not self.models:
            return True
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.models for name in names)


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    """llama-swap's ``security.cors``, resolved: ``origins`` lowercased (a request's ``Origin``
    is matched whatever its case, and echoed as it came); ``any_origin`` for ``*``;
    ``allowed_headers`` empty: a preflight gets back the headers it asked for."""

    origins: frozenset[str] = frozenset()
    any_origin: bool = False
    allow_credentials: bool = False
    allow_private_network: bool = False
    allowed_methods: tuple[str, ...] = ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
    allowed_headers: tuple[str, ...] = ()
    exposed_headers: tuple[str, ...] = ()
    max_age: int = 86400


@dataclass(frozen=True, slots=True)
class Security:
    allow_unauthenticated_network: bool = False
    cors_origins: tuple[str, ...] = ()
    cors: CorsPolicy | None = None  # llama-swap's security.cors (instead of cors_origins)


@dataclass(frozen=True, slots=True)
class Limits:
    header_timeout: float = 10.0
    max_header_bytes: int = 16384
    max_headers: int = 100
    max_connections: int = 1024
    max_connections_per_client: int = 64  # per IPv4 address or IPv6 /64
    fast_lane: bool = True  # the common inference request on http/server/fast_lane.py


@dataclass(frozen=True, slots=True)
class Group:
    name: str
    members: tuple[str, ...]
    swap: bool = True
    exclusive: bool = True
    persistent: bool = False


@dataclass(frozen=True, slots=True)
class Scheduling:
    """How models share the machine (groups, budgets) and how requests wait."""

    groups: tuple[Group, ...] = ()
    resources: Mapping[str, int] = field(default_factory=dict, hash=False)  # name -> bytes
    queue_limit: int = 1000
    max_queue_wait: float = 60.0
    drain_timeout: float = 600.0
    max_in_flight: int = 0  # 0: no limit
    # llama-swap's globalConcurrencyLimit: model-routed requests at once, one more gets 429
    global_concurrency_limit: int = 0  # 0: no limit
    state_dir: str = "~/.local/state/modelswap"
    preload: tuple[str, ...] = ()
    # llama-swap's profiles: name -> {pin name -> model id or None}; the active one's models
    # are kept loaded and its pin names served
    profiles: Mapping[str, Mapping[str, str | None]] = field(default_factory=dict, hash=False)
    profile_descriptions: Mapping[str, str] = field(default_factory=dict, hash=False)
    profile: str | None = None  # active at startup (hooks.onStartup.profile)
    # llama-swap's matrix: the sets of model ids that may run together, and eviction costs
    matrix: tuple[frozenset[str], ...] | None = None
    evict_costs: Mapping[str, float] = field(default_factory=dict, hash=False)
    default_model: str | None = None
    default_after: float = 300.0


SelectorStrategy = Literal["warm", "pin", "spillover"]


@dataclass(frozen=True, slots=True)
class Selector:
    """A virtual model id resolved per request to one of ``targets`` (model ids, aliases or
    peer models) by ``strategy`` (``routing/selector_choice.py``)."""

    id: str
    targets: tuple[str, ...]
    strategy: SelectorStrategy = "warm"
    reservations: int = 1  # spillover: requests in flight per target before the next
    name: str | None = None
    description: str | None = None
    unlisted: bool = False


@dataclass(frozen=True, slots=True)
class Observability:
    metrics_enabled: bool = True
    scrape_backends: bool = False
    activity_enabled: bool = True
    activity_path: str | None = None  # None: <stateDir>/activity.sqlite3
    capture: bool = False
    capture_bytes: int = 16384
    max_age_days: float = 30.0
    max_rows: int = 100_000
    performance: bool = True  # GET /api/performance samples while serving
    performance_every: float = 5.0
    # request headers naming a request's session (llama-swap's ui.activity.session_id)
    session_headers: tuple[str, ...] = ("X-Session-ID", "X-Litellm-Session-Id")


@dataclass(frozen=True, slots=True)
class Capabilities:
    """A model's declared capabilities (llama-swap's ``capabilities``). None: not written, so
    what the backend reported when it was last ready may fill it; ``disable_auto``: nothing
    is filled (the listing is exactly what is written)."""

    inputs: tuple[str, ...] | None = None
    outputs: tuple[str, ...] | None = None
    tools: bool | None = None
    reranker: bool | None = None
    context: int | None = None
    disable_auto: bool = False


@dataclass(frozen=True, slots=True)
class PromptCacheSettings:
    """The prompt cache kept across a swap (top-level ``promptCache``; issue 30): whether a
    model's is on unless it says (``enabled``), the bytes its files may take in all, and the
    most seconds a stop may spend saving and a start restoring."""

    enabled: bool = False
    disk_budget: int = 20 * 1024**3
    save_seconds: float = 10.0
    restore_seconds: float = 10.0


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """One configured model, fully resolved.

    ``cmd_stop`` may contain the literal argument text ``${PID}``, which the supervisor replaces
    with the backend's process id at stop time. ``port`` is ``None`` when the model does not use
    ``${PORT}``. ``check_endpoint`` is ``None`` when health checks are disabled.
    """

    id: str
    cmd: tuple[str, ...]
    cmd_stop: tuple[str, ...] | None
    proxy: str
    port: int | None
    aliases: tuple[str, ...]
    use_model_name: str | None
    env: Mapping[str, str] = field(hash=False)
    check_endpoint: str | None
    ttl: float
    unlisted: bool
    name: str | None
    description: str | None
    backend: str
    timeouts: Timeouts
    start_timeout: float
    silence_timeout: float
    failure_backoff: float
    allow_remote_backend: bool = False
    upstream_api_key: str | None = field(default=None, repr=False)
    uses: Mapping[str, int] = field(default_factory=dict, hash=False)  # resource -> bytes
    evict_cost: float = 1.0
    priority: int = 0
    # Seconds a stopping server gets after SIGTERM (or cmdStop) before SIGKILL; None: the
    # gateway's default (llama-swap's unloadTimeout).
    stop_grace: float | None = None
    concurrency_limit: int = 0  # 0: no limit
    sleep_mode: bool = False
    filters: Filters = NO_FILTERS
    alias_filters: Mapping[str, Filters] = field(default_factory=dict, hash=False)
    fallback: tuple[str, ...] = ()  # targets tried when this one fails before a byte
    # Any JSON data, shown in /v1/models as meta.llamaswap (llama-swap's `metadata`).
    metadata: Mapping[str, object] = field(default_factory=dict, hash=False)
    # While it starts, a chat stream gets its progress as reasoning_content (sendLoadingState).
    send_loading_state: bool = False
    # Declared capabilities (llama-swap's), listed in /v1/models (what the backend reported
    # when last ready fills the keys not written).
    capabilities: Capabilities = Capabilities()
    # While a swap to this model waits for others to drain and stop, read its weight files
    # into the page cache (routing/local.py decides, supervisor/prefetch.py reads).
    prefetch: bool = True
    # Save llama.cpp's slots before a stop and restore them after the next start (promptCache;
    # supervisor/promptcache.py).
    prompt_cache: bool = False

    def filters_for(self, name: str) -> tuple[Filters, ...]:
        """The filter layers for a request naming ``name``: the model's, then those given for
        that name (an alias, or the model's own id) in ``alias_filters``."""
        layers = (self.filters, self.alias_filters.get(name, NO_FILTERS))
        return tuple(layer for layer in layers if layer)

    @property
    def upstream_name(self) -> str:
        """The model name sent to the backend: ``use_model_name`` if set, else the id."""
        return self.use_model_name if self.use_model_name is not None else self.id

    def upstream_name_for(self, name: str) -> str:
        """The model name sent to the backend for a request that named ``name`` (the id or an
        alias): ``use_model_name`` if set, else the name the client sent, as llama-swap does."""
        return self.use_model_name if self.use_model_name is not None else name


@dataclass(frozen=True, slots=True)
class KeyMapping:
    """How one key of a llama-swap configuration was read.

    ``source`` is the key path in the file; ``target`` the modelswap key path it was read as, or
    ``None`` when nothing is set (ignored, or built in). ``kind``: ``same`` (both spell it alike),
    ``rewritten`` (renamed or converted), ``ignored`` (not implemented) or ``differs`` (read, but
    llama-swap would behave otherwise). The last two are warnings, logged once per load.
    """

    source: str
    target: str | None
    note: str
    kind: str = "same"

    @property
    def warning(self) -> bool:
        return self.kind in ("ignored", "differs")


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration. ``models`` keeps the file's order."""

    models: Mapping[str, ModelConfig] = field(hash=False)
    listen_host: str
    listen_port: int
    start_port: int
    start_timeout: float
    log_level: str
    max_request_body_bytes: int
    source: str
    max_upload_body_bytes: int = 32 * 1024 * 1024
    api_keys: tuple[ApiKey, ...] = ()
    key_defaults: KeyDefaults = KeyDefaults()
    security: Security = field(default_factory=Security)
    limits: Limits = field(default_factory=Limits)
    scheduling: Scheduling = field(default_factory=Scheduling)
    observability: Observability = field(default_factory=Observability)
    peers: Mapping[str, Peer] = field(default_factory=dict, hash=False)
    # Every secret value the config holds (keys, ${env.*} values, key files), for redaction.
    secrets: frozenset[str] = field(default=frozenset(), repr=False)
    # How each llama-swap key of the file was read (``modelswap check --explain``).
    compat: tuple[KeyMapping, ...] = ()
    # The file (or --listen) names the listen address; else it is the default, 127.0.0.1:8080.
    listen_given: bool = False
    # llama-swap's logToStdout (None: the gateway logs to stderr) and logTimeFormat ("": ours)
    log_to_stdout: str | None = None
    log_time_format: str = ""
    # /upstream/<model>/<path> paths (globs) that never start a model (upstream.ignorePaths)
    upstream_ignore_paths: tuple[str, ...] = ()
    # GET /v1/models has a row per alias too (llama-swap's includeAliasesInList).
    include_aliases_in_list: bool = False
    # One keeper started ahead of the next backend start (supervisor/spare.py).
    spare_keeper: bool = True
    selectors: Mapping[str, Selector] = field(default_factory=dict, hash=False)
    # The Swap Policy Language's programs (config/policies.py); None: none configured.
    policies: PolicySet | None = field(default=None, hash=False)
    # The prompt cache across a swap: its budget and ceilings (each model says if it is on).
    prompt_cache: PromptCacheSettings = PromptCacheSettings()

    def resolve(self, name: str) -> ModelConfig | None:
        """The model whose id is ``name``, else the model with alias ``name``, else ``None``."""
        model = self.models.get(name)
        if model is not None:
            return model
        for candidate in self.models.values():
            if name in candidate.aliases:
                return candidate
        return None

    def names(self) -> list[str]:
        """Every name a client may use: model ids, then aliases (for did-you-mean)."""
        ids = list(self.models)
        aliases = [alias for model in self.models.values() for alias in model.aliases]
        return ids + aliases
