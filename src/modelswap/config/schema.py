"""The raw configuration: exactly what the YAML file holds, validated for shape and type only.

These pydantic models are the source of the JSON schema (:func:`config_json_schema`). Semantic
rules (macros, ports, aliases, URLs) are checked by ``load.py``, which turns these into the
resolved dataclasses the rest of modelswap consumes. Keys are camelCase, as in llama-swap.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from pydantic.fields import ComputedFieldInfo, FieldInfo
from pydantic_core import PydanticCustomError

from modelswap.config.schema_cache import RawPromptCache
from modelswap.config.schema_compat import accept_llamaswap
from modelswap.config.schema_sched import (
    RawActivity,
    RawGroup,
    RawHooks,
    RawMatrix,
    RawMetrics,
    RawPerformance,
    RawProfile,
    RawSelector,
    RawUpstream,
    Size,
)

DEFAULT_LISTEN = "127.0.0.1:8080"
DEFAULT_PROXY = "http://127.0.0.1:${PORT}"
DEFAULT_CHECK_ENDPOINT = "/health"
NO_CHECK_ENDPOINT = "none"
DEFAULT_MAX_BODY = 32 * 1024 * 1024
SCHEMA_TITLE = "modelswap configuration"

LogLevel = Literal["debug", "info", "warn", "error"]
Backend = Literal["auto", "llamacpp", "vllm", "sglang", "ollama", "generic"]

SHAPE_ERROR = "modelswap_shape"
"""Error type raised by the shape validators below; ``ctx["sub"]`` extends the error's loc."""


def type_name(value: object) -> str:
    """The YAML name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _shape_error(expected: str, value: object, *sub: str | int) -> PydanticCustomError:
    message = f"expected {expected}, got {type_name(value)}"
    return PydanticCustomError(SHAPE_ERROR, message, {"sub": sub})


def _check_scalar(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise _shape_error("a string or a number", value)
    return value


def _check_macro_value(value: object) -> object:
    if not isinstance(value, str | int | float):  # bool is an int
        raise _shape_error("a string, a number or a boolean", value)
    return value


def _check_command(value: object) -> object:
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _shape_error("a string or a list of strings", value)
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise _shape_error("a string", item, index)
    return value


def _check_env(value: object) -> object:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise _shape_error('a "KEY=VALUE" string', item, index)
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _shape_error("a variable name", key, str(key))
            if isinstance(item, bool) or not isinstance(item, str | int | float):
                raise _shape_error("a string or a number", item, key)
        return value
    raise _shape_error('a list of "KEY=VALUE" strings or a mapping', value)


def _check_json(value: object, *sub: str | int) -> object:
    """Any JSON value (for filter params): null, booleans, numbers, strings, lists, mappings."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise _shape_error("a finite number", value, *sub)
        return value
    if isinstance(value, list):
        for index, item in enumerate(value):
            _check_json(item, *sub, index)
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise _shape_error("a string key", key, *sub, str(key))
            _check_json(item, *sub, key)
        return value
    raise _shape_error("a JSON value", value, *sub)


JsonParam = Annotated[Any, BeforeValidator(_check_json)]
Scalar = Annotated[str | int | float, BeforeValidator(_check_scalar)]
MacroValue = Annotated[bool | int | float | str, BeforeValidator(_check_macro_value)]
Command = Annotated[str | list[str], BeforeValidator(_check_command)]
Env = Annotated[list[str] | dict[str, Scalar], BeforeValidator(_check_env)]


def _field_title(name: str, info: FieldInfo | ComputedFieldInfo) -> str:
    """Titles in the JSON schema are the YAML keys, not generated prose."""
    alias = info.alias if isinstance(info, FieldInfo) else None
    return alias or name


_MODEL_CONFIG = ConfigDict(
    extra="forbid",
    populate_by_name=False,
    strict=True,
    allow_inf_nan=False,
    frozen=True,
    field_title_generator=_field_title,
)


class RawTimeouts(BaseModel):
    """Upstream (modelswap -> backend) timeouts for one model, in seconds."""

    model_config = ConfigDict(**_MODEL_CONFIG, title="Timeouts")

    connect: float = Field(
        10.0,
        ge=0,
        description="Seconds to wait for the TCP connection to the backend (0: no limit).",
    )
    first_byte: float = Field(
        600.0,
        ge=0,
        alias="firstByte",
        description="Seconds to wait for the first byte of the backend's response (llama-swap's "
        "responseHeader; 0: no limit).",
    )
    idle_between_chunks: float = Field(
        300.0,
        gt=0,
        alias="idleBetweenChunks",
        description="Seconds a streaming response may stay silent between two chunks.",
    )
    total: float | None = Field(
        None, gt=0, description="Ceiling in seconds for a whole request; null means no ceiling."
    )
    # llama-swap's connection timeouts (its config.example.yaml); null: aiohttp's behaviour.
    keepalive: float | None = Field(
        None,
        ge=0,
        description="TCP keep-alive: seconds idle before the first probe, and between probes "
        "(0: no keep-alive probes).",
    )
    tls_handshake: float | None = Field(
        None,
        ge=0,
        alias="tlsHandshake",
        description="Seconds the TLS handshake to an https proxy or peer may take, beyond "
        "connect (0: no separate allowance).",
    )
    idle_conn: float | None = Field(
        None,
        ge=0,
        alias="idleConn",
        description="Seconds an idle connection to the backend is kept for reuse (0: no limit).",
    )


class RawFilters(BaseModel):
    """Edits to JSON request bodies sent to a model (never to `model` itself)."""

    model_config = ConfigDict(**_MODEL_CONFIG, title="Filters")

    strip_params: list[str] = Field(
        default_factory=list,
        alias="stripParams",
        description="Keys dropped from the request body (e.g. to keep server-side defaults).",
    )
    set_params: dict[str, JsonParam] = Field(
        default_factory=dict,
        alias="setParams",
        description="Keys forced to these values, whatever the client sent.",
    )
    default_params: dict[str, JsonParam] = Field(
        default_factory=dict,
        alias="defaultParams",
        description="Keys set to these values when the client did not send them.",
    )
    policy: str = Field(
        "",
        description="llama-swap's Swap Policy Language: a program run after the filters and "
        "hooks.on_request (default/set/remove/apply/deny ... when ...).",
    )


class RawBreaker(BaseModel):
    """When a peer counts as down, and when it is tried again."""

    model_config = ConfigDict(**_MODEL_CONFIG, title="Breaker")

    failures: int = Field(
        3, ge=1, description="Consecutive failures (refused, timed out, 5xx) that open it."
    )
    cooldown: float = Field(
        30.0, gt=0, description="Seconds it stays open before one probe request is let through."
    )


class RawDnsDiscovery(BaseModel):
    """A pool of peers found in DNS: every A/AAAA address of `dns` is a peer at `port`."""

    model_config = ConfigDict(**_MODEL_CONFIG, title="DNS discovery")

    dns: str = Field(
        description="Name whose A/AAAA records are the peers, e.g. the headless Service "
        "modelswap-headless.<namespace>.svc.cluster.local."
    )
    port: int = Field(ge=1, le=65535, description="Port every peer listens on.")
    interval: float = Field(10.0, gt=0, description="Seconds between two resolutions of the name.")
    scheme: Literal["http", "https"] = Field("http", description="How the peers are spoken to.")
    nameserver: str | None = Field(
        None,
        description="Ask this DNS server (IP[:port], default port 53) instead of the system "
        "resolver; the name is then taken as absolute (no search domains).",
    )


class RawPeer(BaseModel):
    """Another modelswap (or any OpenAI-compatible server) whose models are served through
    this one; modelswap does not start or stop it."""

    model_config = ConfigDict(**_MODEL_CONFIG, title="Peer")

    proxy: str | None = Field(
        None,
        description="Base URL of the peer, e.g. http://10.0.0.2:8080 (required unless "
        "discover.dns finds the peers).",
    )
    api_key: str | None = Field(
        None, alias="apiKey", description="Key sent to the peer (never the client's key)."
    )
    api_key_env: str | None = Field(
        None, alias="apiKeyEnv", description="Environment variable holding the peer's key."
    )
    models: list[str] = Field(
        default_factory=list, description="Model names the peer serves (or discover: true)."
    )
    discover: bool | RawDnsDiscovery = Field(
        False,
        description="true: read the peer's /v1/models instead of a list; {dns, port}: a pool, "
        "one peer per address the name resolves to, each read the same way.",
    )
    discover_interval: float = Field(
        60.0,
        gt=0,
        alias="discoverInterval",
        description="Seconds between two reads of the peer's /v1/models.",
    )
    timeouts: RawTimeouts = Field(
        default_factory=RawTimeouts, description="Timeouts of requests sent to the peer."
    )
    breaker: RawBreaker = Field(
        default_factory=RawBreaker, description="Circuit breaker: fail fast while it is down."
    )
    filters: RawFilters = Field(
        default_factory=RawFilters, description="Request body edits for this peer's models."
    )


Modality = Literal["text", "audio", "image"]


class RawCapabilities(BaseModel):
    """What a model takes and can do, as llama-swap declares it (GET /v1/models lists it in
    llama-swap's shape). A key written wins; a key left out is filled from what the backend
    reported when it was last ready, unless disableAuto."""

    model_config = ConfigDict(**_MODEL_CONFIG, title="Capabilities")

    in_: list[Modality] | None = Field(
        None, alias="in", description="Input modalities: text, audio, image."
    )
    out: list[Modality] | None = Field(None, description="Output modalities: text, audio, image.")
    tools: bool | None = Field(
        None,
        description="The model calls tools: listed as function_calling, with tools and "
        "tool_choice among supported_parameters (a listing only: it enables nothing).",
    )
    reranker: bool | None = Field(None, description="The model reranks documents.")
    context: int | None = Field(
        None, ge=0, description="Tokens of context one request may use (listed as context_window)."
    )
    disable_auto: bool = Field(
        False,
        alias="disableAuto",
        description="List exactly what is written here: nothing from what the backend "
        "reported when it was last ready.",
    )


# The names the list form of ``capabilities`` took, and the mapping keys each one is now.
_LIST_CAPABILITIES: dict[str, tuple[tuple[str, str], ...]] = {
    "chat": (("in", "text"), ("out", "text")),
    "completion": (("in", "text"), ("out", "text")),
    "vision": (("in", "text"), ("in", "image"), ("out", "text")),
    "tools": (("tools", "true"),),
    "function_calling": (("tools", "true"),),
    "rerank": (("reranker", "true"),),
    "reranker": (("reranker", "true"),),
    "audio_transcriptions": (("in", "audio"), ("out", "text")),
    "transcription": (("in", "audio"), ("out", "text")),
    "audio_speech": (("in", "text"), ("out", "audio")),
    "speech": (("in", "text"), ("out", "audio")),
    "image_generation": (("in", "text"), ("out", "image")),
}


def _capabilities_mapping(names: list[object]) -> str:
    """The mapping a list of capability names is written as now, in YAML's flow style."""
    keys: dict[str, list[str]] = {}
    for name in names:
        for key, value in _LIST_CAPABILITIES.get(str(name).lower(), ()):
            values = keys.setdefault(key, [])
            if value not in values:
                values.append(value)
    if not keys:
        return "a mapping, e.g. {in: [text, image], out: [text], tools: true}"
    parts = [
        f"{key}: [{', '.join(values)}]" if key in ("in", "out") else f"{key}: true"
        for key, values in keys.items()
    ]
    return "{" + ", ".join(parts) + "}"


def _check_capabilities(value: object) -> object:
    """The list of names modelswap once took is refused with the mapping it is now (issue 41)."""
    if isinstance(value, list):
        mapping = _capabilities_mapping(value)
        message = f"expected a mapping, got a list (the old form); write it as {mapping}"
        raise PydanticCustomError(SHAPE_ERROR, message, {"sub": ()})
    return value


class RawModel(BaseModel):
    """One model: the command that serves it and how to reach it."""

    model_config = ConfigDict(**_MODEL_CONFIG, title="Model")

    cmd: Command = Field(
        description=(
            "Command that starts the server: a shell-like string (split like a POSIX shell; "
            "'\\' line continuations and '#' comment lines allowed) or a list of arguments."
        )
    )
    cmd_stop: Command | None = Field(
        None,
        alias="cmdStop",
        description="Command that stops the server instead of SIGTERM; ${PID} is its process id.",
    )
    proxy: str = Field(
        DEFAULT_PROXY,
        description="Base URL where the server listens (http or https).",
    )
    aliases: list[str] = Field(
        default_factory=list, description="Other names clients may use for this model."
    )
    use_model_name: str | None = Field(
        None,
        alias="useModelName",
        description="Model name sent to the backend instead of this model's id.",
    )
    env: Env = Field(
        default_factory=list,
        description='Environment for the server: a list of "KEY=VALUE" strings or a mapping.',
    )
    check_endpoint: str = Field(
        DEFAULT_CHECK_ENDPOINT,
        alias="checkEndpoint",
        description="Path polled until it answers 2xx before requests are sent; 'none' skips it.",
    )
    ttl: float | None = Field(
        None,
        ge=0,
        description="Unload after this many idle seconds; 0 keeps the model loaded "
        "(default: globalTTL).",
    )
    uses: dict[str, Size] = Field(
        default_factory=dict,
        description="Memory this model holds per resource, e.g. {gpu0: 22GiB} (default: what "
        "modelswap measured on earlier runs).",
    )
    evict_cost: float = Field(
        1.0,
        gt=0,
        alias="evictCost",
        description="Weight of this model's start time when "
        "choosing what to evict (higher: kept longer).",
    )
    priority: int = Field(0, description="Higher-priority models' waiters are served first.")
    unload_timeout: float | None = Field(
        None,
        gt=0,
        alias="unloadTimeout",
        description="Seconds a stopping server gets after SIGTERM (or cmdStop) before SIGKILL "
        "(default: top level, else 5).",
    )
    sleep_mode: bool = Field(
        False,
        alias="sleepMode",
        description="vLLM only: when evicted, sleep (weights to host memory) instead of "
        "stopping, and wake instead of starting; needs --enable-sleep-mode in cmd.",
    )
    concurrency_limit: int = Field(
        0,
        ge=0,
        alias="concurrencyLimit",
        description="Requests in flight to this backend at once (0: no limit); more wait.",
    )
    start_timeout: float | None = Field(
        None,
        gt=0,
        alias="startTimeout",
        description="Hard ceiling in seconds for this model's start (default: top level).",
    )
    health_check_timeout: float | None = Field(
        None,
        gt=0,
        alias="healthCheckTimeout",
        description="llama-swap name of startTimeout (set one of the two).",
    )
    silence_timeout: float | None = Field(
        None,
        gt=0,
        alias="silenceTimeout",
        description="Seconds a starting server may print nothing before it is stopped.",
    )
    failure_backoff: float | None = Field(
        None,
        ge=0,
        alias="failureBackoff",
        description="Seconds a failed start is reported as-is before a new attempt is made.",
    )
    unlisted: bool = Field(False, description="Hide this model from GET /v1/models.")
    name: str | None = Field(None, description="Human-readable name shown in listings.")
    description: str | None = Field(None, description="Human-readable description.")
    backend: Backend = Field(
        "auto",
        description="Server kind, for readiness checks and log diagnosis; 'auto' detects it.",
    )
    timeouts: RawTimeouts = Field(
        default_factory=RawTimeouts, description="Timeouts for requests sent to this server."
    )
    disable_keep_alives: bool = Field(
        False,
        alias="disableKeepAlives",
        description="A new connection to the server for every request (Connection: close), "
        "for a server that closes kept-alive connections under the gateway (llama-swap's).",
    )
    macros: dict[str, MacroValue] = Field(
        default_factory=dict,
        description="Macros for this model only; they override top-level macros of that name.",
    )
    allow_remote_backend: bool = Field(
        False,
        alias="allowRemoteBackend",
        description="Allow a proxy URL that is not on this machine (loopback) for this model.",
    )
    api_key: str | None = Field(
        None,
        alias="apiKey",
        description="Key sent upstream as 'Authorization: Bearer' (use ${env.NAME}); the "
        "client's own key is never forwarded.",
    )
    filters: RawFilters = Field(
        default_factory=RawFilters,
        description="Request body edits: stripParams, then defaultParams, then setParams.",
    )
    fallback: list[str] = Field(
        default_factory=list,
        description="Where a request goes when this model fails before any byte reached the "
        "client: model ids, aliases or peer/model names, tried in order.",
    )
    alias_filters: dict[str, RawFilters] = Field(
        default_factory=dict,
        alias="aliasFilters",
        description="Filters per name, an alias of this model or its own id, applied after "
        "the model's own when a client uses that name.",
    )
    send_loading_state: bool | None = Field(
        None,
        alias="sendLoadingState",
        description="While the model starts, a streamed chat answer gets the progress as "
        "reasoning_content deltas (llama-swap's; default: top level, else SSE comments).",
    )
    prefetch: bool | None = Field(
        None,
        description="While a swap to this model waits for others to drain and stop, read its "
        "weight files into the page cache (default: top level).",
    )
    prompt_cache: bool | None = Field(
        None,
        alias="promptCache",
        description="Save a llama.cpp server's slots (its cached prompts) before it stops and "
        "restore them when it starts again, so a conversation is not prefilled again after a "
        "swap (default: top level promptCache.enabled).",
    )
    capabilities: Annotated[RawCapabilities | None, BeforeValidator(_check_capabilities)] = Field(
        None,
        description="What the model takes and can do, as llama-swap declares it ({in: [text, "
        "image], out: [text], tools: true, context: 8192}); GET /v1/models lists it, with "
        "what the backend reported when last ready filling the keys not written.",
    )
    metadata: dict[str, JsonParam] = Field(
        default_factory=dict,
        description="Any data, shown in GET /v1/models as meta.llamaswap; macros expand in its "
        "strings (a string that is only ${NAME} keeps the macro's type).",
    )


Scope = Literal["inference", "read", "admin"]


def _default_scopes() -> list[Scope]:
    return ["inference"]


Priority = Literal["interactive", "batch"]


class RawQuota(BaseModel):
    """What one client key may use (each 0: no limit; unset: keyDefaults.quota's). Over one,
    a request is refused at once (429 with Retry-After); it never waits for room."""

    model_config = ConfigDict(**_MODEL_CONFIG)

    concurrency: int | None = Field(
        None, ge=0, description="Requests of this key served or waiting at once."
    )
    requests_per_minute: int | None = Field(
        None,
        ge=0,
        alias="requestsPerMinute",
        description="Requests admitted per minute (a bucket refilled continuously; a request "
        "that waits in the queue is counted once, when it is admitted).",
    )
    tokens_per_minute: int | None = Field(
        None,
        ge=0,
        alias="tokensPerMinute",
        description="Tokens per minute: the backend's prompt + completion tokens, charged when "
        "an answer ends (a bucket refilled continuously).",
    )
    tokens_per_day: int | None = Field(
        None,
        ge=0,
        alias="tokensPerDay",
        description="Tokens per rolling 24 hours (a bucket refilled continuously, not a "
        "calendar day).",
    )


class RawKeyDefaults(BaseModel):
    """What every apiKeys entry gets unless it says otherwise, and what the anonymous client
    gets when no keys are configured."""

    model_config = ConfigDict(**_MODEL_CONFIG)

    quota: RawQuota = Field(
        default_factory=RawQuota,
        description="{concurrency, requestsPerMinute, tokensPerMinute, tokensPerDay}; "
        "default: no limit.",
    )
    priority: Priority = Field(
        "interactive",
        description="interactive or batch: waiting interactive requests are served before "
        "batch ones (maxQueueWait still bounds a batch request's wait).",
    )
    weight: float = Field(
        1.0,
        gt=0,
        le=1000,
        description="Share of service among the keys waiting in the same priority class.",
    )


class RawApiKey(BaseModel):
    """A client key with a name, scopes and the models it may use."""

    model_config = ConfigDict(**_MODEL_CONFIG)

    key: str | None = Field(None, description="The key itself (prefer keyEnv or keyFile).")
    key_env: str | None = Field(
        None, alias="keyEnv", description="Name of an environment variable holding the key."
    )
    key_file: str | None = Field(
        None, alias="keyFile", description="Path of a file holding the key (first line)."
    )
    name: str | None = Field(None, description="Shown in logs instead of the key.")
    scopes: list[Scope] = Field(
        default_factory=_default_scopes,
        description="inference: model routes; read: status, logs, metrics; admin: load, "
        "unload, config export, upstream passthrough.",
    )
    models: list[str] | None = Field(
        None, description="Model ids/aliases (glob patterns) this key may use; default all."
    )
    quota: RawQuota | None = Field(
        None,
        description="This key's limits {concurrency, requestsPerMinute, tokensPerMinute, "
        "tokensPerDay}; each field not given is keyDefaults.quota's (0: no limit).",
    )
    priority: Priority | None = Field(
        None,
        description="interactive or batch (default: keyDefaults.priority, interactive).",
    )
    weight: float | None = Field(
        None,
        gt=0,
        le=1000,
        description="Share of service among waiting keys of its class (default: "
        "keyDefaults.weight, 1).",
    )


class RawCors(BaseModel):
    """llama-swap's ``security.cors``: the browser pages that may read modelswap's answers.
    Headers go only to a request that carries an ``Origin``; a backend's own are dropped."""

    model_config = ConfigDict(**_MODEL_CONFIG, title="CORS")

    allowed_origins: list[str] | None = Field(
        None,
        alias="allowedOrigins",
        description="Origins, each a bare scheme://host[:port], or '*' (only with apiKeys); "
        "required once any other cors key is set. Unset: no CORS headers at all.",
    )
    allow_credentials: bool = Field(
        False,
        alias="allowCredentials",
        description="Send Access-Control-Allow-Credentials: true (not with '*').",
    )
    allow_private_network: bool = Field(
        False,
        alias="allowPrivateNetwork",
        description="Answer Chrome's Private Network Access preflight (not with '*').",
    )
    allowed_methods: list[str] = Field(
        default_factory=list,
        alias="allowedMethods",
        description="Methods a preflight allows (default GET, POST, PUT, PATCH, DELETE, OPTIONS).",
    )
    allowed_headers: list[str] = Field(
        default_factory=list,
        alias="allowedHeaders",
        description="Request headers a preflight allows (default: the ones it asks for).",
    )
    exposed_headers: list[str] = Field(
        default_factory=list,
        alias="exposedHeaders",
        description="Response headers a page may read beyond the safelisted ones.",
    )
    max_age: int = Field(
        0, ge=0, alias="maxAge", description="Seconds a preflight is cached (0: 86400)."
    )


class RawSecurity(BaseModel):
    """Switches that open modelswap up. Each one that is on is logged and listed."""

    model_config = ConfigDict(**_MODEL_CONFIG)

    allow_unauthenticated_network: bool = Field(
        False,
        alias="allowUnauthenticatedNetwork",
        description="Allow listening on a non-loopback address without apiKeys.",
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        alias="corsOrigins",
        description="Origins allowed to call modelswap from a browser; '*' only with apiKeys.",
    )
    cors: RawCors | None = Field(
        None,
        description="llama-swap's CORS block: allowedOrigins, allowCredentials, "
        "allowPrivateNetwork, allowedMethods, allowedHeaders, exposedHeaders, maxAge "
        "(instead of corsOrigins).",
    )


class RawLimits(BaseModel):
    """Bounds on what a client may send."""

    model_config = ConfigDict(**_MODEL_CONFIG)

    header_timeout: float = Field(
        10.0,
        gt=0,
        alias="headerTimeout",
        description="Seconds a client may take to send a request's headers (also the idle "
        "keep-alive timeout).",
    )
    max_header_bytes: int = Field(
        16384, ge=1024, alias="maxHeaderBytes", description="Largest request line or header."
    )
    max_headers: int = Field(100, ge=1, alias="maxHeaders", description="Most headers.")
    max_connections: int = Field(
        1024, ge=1, alias="maxConnections", description="Most client connections at once."
    )
    max_connections_per_client: int = Field(
        64,
        ge=1,
        alias="maxConnectionsPerClient",
        description="Most connections not at work one client (an IPv4 address, an IPv6 /64) "
        "may hold, so that no client can take all of maxConnections: new ones (no whole request "
        "yet, or no valid key where keys are configured), and as many idle keep-alive ones. "
        "Requests in flight do not count.",
    )
    fast_lane: bool = Field(
        True,
        alias="fastLane",
        description="Serve the common inference request (a JSON POST to an OpenAI route for "
        "one ready local model, no filters, policies, CORS or capture) on the fast door: a raw "
        "protocol with a C parser and pooled backend connections, ~3x cheaper per request. "
        "Everything else is served by aiohttp's door either way; false sends every request "
        "there.",
    )


DEFAULT_START_TIMEOUT = 1800.0
DEFAULT_SILENCE_TIMEOUT = 120.0
DEFAULT_FAILURE_BACKOFF = 10.0


class RawConfig(BaseModel):
    """The whole configuration file."""

    model_config = ConfigDict(**_MODEL_CONFIG, title=SCHEMA_TITLE)

    models: dict[str, RawModel] = Field(
        default_factory=dict,
        description="The models modelswap serves, by id (the name clients send); none (or "
        "null) for a gateway that serves only its peers' models.",
    )
    listen: str = Field(
        DEFAULT_LISTEN,
        description="host:port the gateway listens on; IPv6 as [::1]:8080.",
    )
    start_port: int = Field(
        5800,
        ge=1,
        le=65535,
        alias="startPort",
        description="First port handed out as ${PORT}; later models get the next ones.",
    )
    start_timeout: float | None = Field(
        None,
        gt=0,
        alias="startTimeout",
        description="Hard ceiling in seconds for a start, however busy (default 1800).",
    )
    health_check_timeout: float | None = Field(
        None,
        gt=0,
        alias="healthCheckTimeout",
        description="llama-swap name of startTimeout (set one of the two).",
    )
    silence_timeout: float = Field(
        DEFAULT_SILENCE_TIMEOUT,
        gt=0,
        alias="silenceTimeout",
        description="Seconds a starting server may print nothing before it is stopped.",
    )
    failure_backoff: float = Field(
        DEFAULT_FAILURE_BACKOFF,
        ge=0,
        alias="failureBackoff",
        description="Seconds a failed start is reported as-is before a new attempt is made.",
    )
    log_level: LogLevel = Field("info", alias="logLevel", description="Gateway log verbosity.")
    log_to_stdout: Literal["proxy", "upstream", "both", "none"] | None = Field(
        None,
        alias="logToStdout",
        description="llama-swap's: what goes to stdout. proxy: the gateway's log; upstream: "
        "the backends' output; both; none. Unset: the gateway logs to stderr.",
    )
    log_time_format: str = Field(
        "",
        alias="logTimeFormat",
        description="llama-swap's timestamp of the gateway's log lines: ansic, unixdate, "
        "rubydate, rfc822, rfc822z, rfc850, rfc1123, rfc1123z, rfc3339, rfc3339nano, kitchen, "
        "stamp, stampmilli, stampmicro, stampnano. Empty: modelswap's own.",
    )
    macros: dict[str, MacroValue] = Field(
        default_factory=dict,
        description="Text substituted for ${name} in cmd, cmdStop, proxy, env and more.",
    )
    max_request_body_bytes: int = Field(
        DEFAULT_MAX_BODY,
        gt=0,
        alias="maxRequestBodyBytes",
        description="Largest request body accepted from clients, in bytes (32 MiB).",
    )
    max_upload_body_bytes: int = Field(
        DEFAULT_MAX_BODY,
        gt=0,
        alias="maxUploadBodyBytes",
        description="Largest multipart upload (audio, images) accepted, in bytes (32 MiB).",
    )
    api_keys: list[str | RawApiKey] = Field(
        default_factory=list,
        alias="apiKeys",
        description="Client keys: a string (inference, all models) or {key|keyEnv|keyFile, "
        "name, scopes, models, quota, priority, weight}. With none, every route is open "
        "(loopback only by default).",
    )
    key_defaults: RawKeyDefaults = Field(
        default_factory=RawKeyDefaults,
        alias="keyDefaults",
        description="Quota, priority and weight of every apiKeys entry that gives none, and "
        "of the anonymous client when no keys are configured.",
    )
    security: RawSecurity = Field(
        default_factory=RawSecurity, description="Switches that open modelswap up."
    )
    limits: RawLimits = Field(default_factory=RawLimits, description="Bounds on client input.")
    groups: dict[str, RawGroup] = Field(
        default_factory=dict, description="Models that may run together (llama-swap groups)."
    )
    resources: dict[str, Size] = Field(
        default_factory=dict,
        description="Memory budgets, e.g. {gpu0: 32GiB, ram: 64GiB}; running models stay within.",
    )
    global_ttl: float = Field(
        0.0, ge=0, alias="globalTTL", description="ttl of models that set none (0: never)."
    )
    queue_limit: int = Field(
        1000, ge=1, alias="queueLimit", description="Waiting requests beyond this get 429."
    )
    max_queue_wait: float = Field(
        60.0,
        gt=0,
        alias="maxQueueWait",
        description="After this many seconds the oldest waiter's model goes next, whatever "
        "the priorities.",
    )
    drain_timeout: float = Field(
        600.0,
        gt=0,
        alias="drainTimeout",
        description="How long a swap waits for the evicted model's requests to finish.",
    )
    max_in_flight: int = Field(
        0, ge=0, alias="maxInFlight", description="Requests in flight in all (0: no limit)."
    )
    global_concurrency_limit: int = Field(
        0,
        ge=0,
        alias="globalConcurrencyLimit",
        description="llama-swap's: requests served at once across every model and peer; one "
        "more is answered 429 at once (Retry-After), never queued (0: no limit, no cost).",
    )
    state_dir: str | None = Field(
        None,
        alias="stateDir",
        description="Where measured start times, memory use and the activity log are kept "
        "(default $XDG_STATE_HOME/modelswap, else ~/.local/state/modelswap).",
    )
    hooks: RawHooks = Field(
        default_factory=RawHooks, description="Startup actions; on_request: an SPL program."
    )
    policies: dict[str, str] = Field(
        default_factory=dict,
        description="Named Swap Policy Language programs, run by `apply <name>` from "
        "hooks.on_request, a filters.policy or another policy.",
    )
    default_model: str | None = Field(
        None,
        alias="defaultModel",
        description="Loaded when nothing runs and the gateway has been idle for defaultAfter.",
    )
    peers: dict[str, RawPeer] = Field(
        default_factory=dict,
        description="Other gateways whose models are served through this one, by peer id.",
    )
    metrics: RawMetrics = Field(default_factory=RawMetrics, description="GET /metrics.")
    performance: RawPerformance = Field(
        default_factory=RawPerformance,
        description="The system monitor behind GET /api/performance: {disabled, every}.",
    )
    activity: RawActivity = Field(
        default_factory=RawActivity, description="The per-request activity log."
    )
    default_after: float = Field(
        300.0, gt=0, alias="defaultAfter", description="Idle seconds before defaultModel loads."
    )
    unload_timeout: float | None = Field(
        None,
        gt=0,
        alias="unloadTimeout",
        description="Seconds a stopping server gets after SIGTERM (or cmdStop) before SIGKILL "
        "(default 5).",
    )
    upstream: RawUpstream = Field(
        default_factory=RawUpstream, description="/upstream/<model>/<path> passthrough."
    )
    matrix: RawMatrix | None = Field(
        None,
        description="llama-swap's swap matrix (instead of groups): vars, sets, evict_costs; a "
        "model starts in the set that costs least to reach.",
    )
    profiles: dict[str, RawProfile | list[str]] = Field(
        default_factory=dict,
        description="Named sets of pins (llama-swap's profiles): {description, pins: {name: "
        "model}}, or a list of model ids (each its own pin). The active one, switched at "
        "runtime (PUT /api/profiles/active), serves its pin names and keeps its models loaded.",
    )
    selectors: dict[str, RawSelector] = Field(
        default_factory=dict,
        description="Virtual model ids (llama-swap's selectors), each resolved per request to "
        "one of its targets.",
    )
    send_loading_state: bool = Field(
        False,
        alias="sendLoadingState",
        description="While a model starts, streamed chat answers get the progress as "
        "reasoning_content deltas, for chat UIs that show thinking (else SSE comments).",
    )
    prefetch: bool = Field(
        True,
        description="While a swap waits for the models it evicts to drain and stop, read the "
        "next model's weight files (GGUF, safetensors) into the page cache, never more than "
        "the memory available minus a margin; false: never.",
    )
    prompt_cache: RawPromptCache = Field(
        default_factory=RawPromptCache,
        alias="promptCache",
        description="The prompt cache kept across a swap (llama.cpp's slots saved and "
        "restored): {enabled, diskBudget, saveTimeout, restoreTimeout}.",
    )
    spare_keeper: bool = Field(
        True,
        alias="spareKeeper",
        description="Keep one backend keeper started ahead (its interpreter started and, with "
        "cgroups, its cgroup joined), so a cold start skips ~35 ms; false: start each keeper "
        "when its backend starts.",
    )
    include_aliases_in_list: bool = Field(
        False,
        alias="includeAliasesInList",
        description="GET /v1/models lists each alias as a row of its own (alias_for) too.",
    )


def config_json_schema() -> dict[str, Any]:
    """JSON schema of the configuration file, keyed by the YAML (camelCase) names.

    Editors use it for completion and validation (e.g. `# yaml-language-server: $schema=...`).
    """
    schema = RawConfig.model_json_schema(by_alias=True, mode="validation")
    # what compat and tree_macros read as well: a llama-swap file validates as written
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **accept_llamaswap(schema)}
