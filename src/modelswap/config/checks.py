"""Semantic checks: a shape-valid :class:`RawConfig` -> the resolved :class:`Config`.

Each ``_check_*`` / ``_resolve_*`` function handles one rule and appends ``(path, message)`` to a
shared problem list instead of raising, so one load reports every problem at once.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import replace
from types import MappingProxyType
from urllib.parse import urlsplit

from modelswap.config.filters import resolve_alias_filters, resolve_filters
from modelswap.config.macros import (
    ENV_NAME_RE,
    Scope,
    clean_command,
    expand,
    name_problem,
    transitive_references,
)
from modelswap.config.metadata_macros import MacroValue, macro_text, resolve_metadata
from modelswap.config.paths import Problems, key_path
from modelswap.config.peers import resolve_fallbacks, resolve_peers, resolve_timeouts
from modelswap.config.policies import resolve_policies
from modelswap.config.prompt_cache import resolve_prompt_cache
from modelswap.config.resolved import (
    Capabilities,
    Config,
    KeyMapping,
    ModelConfig,
    Observability,
)
from modelswap.config.scheduling import resolve_scheduling, resolve_uses
from modelswap.config.schema import (
    DEFAULT_START_TIMEOUT,
    NO_CHECK_ENDPOINT,
    RawCapabilities,
    RawConfig,
    RawModel,
)
from modelswap.config.security import (
    resolve_api_keys,
    resolve_key_defaults,
    resolve_limits,
    resolve_security,
)
from modelswap.config.selectors import resolve_selectors
from modelswap.errors import ConfigError
from modelswap.redact import is_secret_name

MAX_PORT = 65535


def build_config(
    raw: RawConfig,
    *,
    source: str,
    environ: Mapping[str, str],
    extra_macros: Mapping[str, str],
    compat: tuple[KeyMapping, ...] = (),
    ports: Mapping[str, int] | None = None,
    secrets: set[str] | None = None,
) -> Config:
    """Resolve ``raw``; raise :class:`ConfigError` with every problem found. ``compat`` says how
    llama-swap keys were read before validation; it is kept for ``modelswap check --explain``.
    ``secrets``: values already read from the environment (by ``tree_macros``)."""
    problems: Problems = []
    secrets = set(secrets or ())
    host, port = _check_listen(raw.listen, problems)
    api_keys = resolve_api_keys(raw, environ, problems, secrets)
    security = resolve_security(raw, api_keys, problems)
    top_macros = {**extra_macros, **_check_macros(raw.macros, ("macros",), problems)}
    macros = {
        model_id: {
            **top_macros,
            **_check_macros(model.macros, ("models", model_id, "macros"), problems),
        }
        for model_id, model in raw.models.items()
    }
    listen_port = port if "listen" in raw.model_fields_set else None
    ports = _allocate_ports(raw, macros, listen_port, problems, ports or {})
    raw = raw.model_copy(
        update={
            "models": {
                model_id: _port_names(model_id, model, ports.get(model_id), problems)
                for model_id, model in raw.models.items()
            }
        }
    )
    _check_names(raw, problems)
    models: dict[str, ModelConfig] = {}
    for model_id, model in raw.models.items():
        _check_port_is_used(model_id, model, macros[model_id], problems)
        models[model_id] = _resolve_model(
            model_id, model, macros[model_id], environ, ports.get(model_id), raw, problems, secrets
        )
    start_timeout = _start_timeout(raw, (), problems) or DEFAULT_START_TIMEOUT
    peers = resolve_peers(raw, environ, problems, secrets)
    resolve_fallbacks(raw, models, peers, problems)
    selectors = resolve_selectors(raw, models, peers, problems)
    scheduling = resolve_scheduling(raw, models, problems, environ)
    policies = resolve_policies(
        raw,
        macros=macros,
        top_macros=top_macros,
        ports=ports,
        environ=environ,
        problems=problems,
        secrets=secrets,
    )
    prompt_cache = resolve_prompt_cache(raw.prompt_cache, problems)
    if problems:
        raise ConfigError(problems)
    return Config(
        models=MappingProxyType(models),
        listen_host=host,
        listen_port=port,
        start_port=raw.start_port,
        start_timeout=start_timeout,
        log_level=raw.log_level,
        log_to_stdout=raw.log_to_stdout,
        log_time_format=raw.log_time_format,
        max_request_body_bytes=raw.max_request_body_bytes,
        source=source,
        max_upload_body_bytes=raw.max_upload_body_bytes,
        api_keys=api_keys,
        key_defaults=resolve_key_defaults(raw),
        security=security,
        limits=resolve_limits(raw),
        secrets=frozenset(secrets),
        peers=MappingProxyType(peers),
        scheduling=scheduling,
        observability=Observability(
            metrics_enabled=raw.metrics.enabled,
            scrape_backends=raw.metrics.scrape_backends,
            activity_enabled=raw.activity.enabled,
            activity_path=raw.activity.path,
            capture=raw.activity.capture,
            capture_bytes=raw.activity.capture_bytes,
            max_age_days=raw.activity.max_age_days,
            max_rows=raw.activity.max_rows,
            performance=not raw.performance.disabled,
            performance_every=raw.performance.every,
            session_headers=tuple(raw.activity.session_headers),
        ),
        compat=compat,
        listen_given="listen" in raw.model_fields_set,
        include_aliases_in_list=raw.include_aliases_in_list,
        spare_keeper=raw.spare_keeper,
        upstream_ignore_paths=_ignore_paths(raw.upstream.ignore_paths, problems),
        selectors=MappingProxyType(selectors),
        policies=policies,
        prompt_cache=prompt_cache,
    )


def _ignore_paths(patterns: list[str], problems: Problems) -> tuple[str, ...]:
    """``upstream.ignorePaths``: regular expressions, as in llama-swap; each must compile."""
    for index, pattern in enumerate(patterns):
        try:
            re.compile(pattern)
        except re.error as exc:
            problems.append((f"upstream.ignorePaths[{index}]", f"not a regular expression: {exc}"))
    return tuple(patterns)


def parse_listen(text: str) -> tuple[str, int]:
    """Split ``host:port`` (IPv6 as ``[::1]:8080``). Raises ``ValueError`` with a user message."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r} has no closing ']' after the IPv6 address")
        host, rest = text[1:end], text[end + 1 :]
        if not rest.startswith(":"):
            raise ValueError(f"{text!r} has no port; write it as [{host}]:8080")
        port_text = rest[1:]
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"{text!r} is not host:port, e.g. 127.0.0.1:8080")
        if ":" in host:
            raise ValueError(f"{text!r}: write an IPv6 address in brackets, e.g. [::1]:8080")
    if not host:
        raise ValueError(
            f"{text!r} has no host; write 127.0.0.1{text} "
            f"(or 0.0.0.0{text} to listen on every interface)"
        )
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= MAX_PORT:
        raise ValueError(f"{text!r}: the port must be a number from 1 to {MAX_PORT}")
    return host, int(port_text)


def _check_listen(text: str, problems: Problems) -> tuple[str, int]:
    try:
        return parse_listen(text.strip())
    except ValueError as exc:
        problems.append(("listen", str(exc)))
        return "", 0


def _check_macros(
    raw: Mapping[str, MacroValue], base: tuple[str, ...], problems: Problems
) -> dict[str, str]:
    """Valid macros as name -> text (numbers become their ``str()``, booleans ``true`` or
    ``false``); bad names are problems."""
    macros: dict[str, str] = {}
    for name, value in raw.items():
        problem = name_problem(name)
        if problem:
            problems.append((key_path(*base, name), problem))
        else:
            macros[name] = macro_text(value)
    return macros


def _check_names(raw: RawConfig, problems: Problems) -> None:
    """Model ids and aliases are well-formed and every name maps to exactly one model."""
    for model_id in raw.models:
        if not model_id.strip() or model_id != model_id.strip():
            problems.append(
                (
                    key_path("models", model_id),
                    "model ids must be non-empty, without leading or trailing spaces",
                )
            )
    owners: dict[str, str] = {}
    for model_id, model in raw.models.items():
        for index, alias in enumerate(model.aliases):
            path = key_path("models", model_id, "aliases", index)
            if not alias.strip() or alias != alias.strip():
                problems.append((path, "aliases must be non-empty, without surrounding spaces"))
            elif alias in raw.models:
                problems.append((path, f"alias {alias!r} is already the id of a model"))
            elif alias in owners:
                owner = owners[alias]
                where = "is listed twice" if owner == model_id else f"is already used by {owner!r}"
                problems.append((path, f"alias {alias!r} {where}"))
            else:
                owners[alias] = model_id


def _port_names(model_id: str, model: RawModel, port: int | None, problems: Problems) -> RawModel:
    """Aliases named with ``${PORT}`` (llama-swap's ``setParamsByID`` keys) once it is known."""
    names = [*model.aliases, *model.alias_filters]
    if not any("${PORT}" in name for name in names):
        return model
    if port is None:
        problems.append(
            (
                key_path("models", model_id, "aliases"),
                "a name uses ${PORT}, but this model has none (its cmd does not use ${PORT})",
            )
        )
        return model

    def named(name: str) -> str:
        return name.replace("${PORT}", str(port))

    return model.model_copy(
        update={
            "aliases": [named(a) for a in model.aliases],
            "alias_filters": {named(k): v for k, v in model.alias_filters.items()},
        }
    )


def _command_texts(command: str | list[str] | None) -> list[str]:
    if command is None:
        return []
    return [clean_command(command)] if isinstance(command, str) else list(command)


def _env_texts(env: list[str] | Mapping[str, str | int | float]) -> list[str]:
    return list(env) if isinstance(env, list) else [str(v) for v in env.values()]


def _expanded_texts(model: RawModel) -> Iterator[str]:
    """Every raw text of ``model`` that macros are expanded in."""
    yield from _command_texts(model.cmd)
    yield from _command_texts(model.cmd_stop)
    yield from _env_texts(model.env)
    yield model.proxy
    yield model.check_endpoint
    if model.use_model_name is not None:
        yield model.use_model_name


def _allocate_ports(
    raw: RawConfig,
    macros: Mapping[str, Mapping[str, str]],
    listen_port: int | None,
    problems: Problems,
    keep: Mapping[str, int],
) -> dict[str, int]:
    """Consecutive ports from ``startPort``, in file order, for models that use ``${PORT}``.
    A model listed in ``keep`` (a reload) keeps its port while it is in range and unshared;
    the others take the lowest free ports."""
    users = [
        model_id
        for model_id, model in raw.models.items()
        if "PORT" in transitive_references(_expanded_texts(model), macros[model_id])
    ]
    top = raw.start_port + len(users) - 1
    ports: dict[str, int] = {}
    for model_id in users:
        kept = keep.get(model_id)
        if kept is not None and raw.start_port <= kept <= top and kept not in ports.values():
            ports[model_id] = kept
    free = iter(sorted(set(range(raw.start_port, top + 1)) - set(ports.values())))
    for model_id in users:
        if model_id not in ports:
            ports[model_id] = next(free)
    ports = {model_id: ports[model_id] for model_id in users}
    if users and raw.start_port + len(users) - 1 > MAX_PORT:
        # Reported once, here: the models past the end keep a valid placeholder port, so
        # their proxy URLs do not each report the same overflow again.
        ports = {model_id: min(port, MAX_PORT) for model_id, port in ports.items()}
        left = MAX_PORT - raw.start_port + 1
        exist = "1 port exists" if left == 1 else f"{left} ports exist"
        problems.append(
            (
                "startPort",
                f"{len(users)} models use ${{PORT}} but only {exist} from {raw.start_port} up",
            )
        )
    for model_id, port in ports.items():
        if port == listen_port:
            problems.append(
                (
                    "startPort",
                    f"model {model_id!r} would get port {port}, which is the listen "
                    "port; choose another startPort",
                )
            )
    return ports


def _check_port_is_used(
    model_id: str, model: RawModel, macros: Mapping[str, str], problems: Problems
) -> None:
    """With the default proxy, the command must tell the server to listen on ``${PORT}``."""
    if "proxy" in model.model_fields_set:
        return
    texts = [*_command_texts(model.cmd), *_env_texts(model.env)]
    if "PORT" not in transitive_references(texts, macros):
        problems.append(
            (
                key_path("models", model_id, "cmd"),
                "does not use ${PORT}, so modelswap cannot "
                "know where the server listens; add --port ${PORT} or set proxy",
            )
        )


def _resolve_model(
    model_id: str,
    model: RawModel,
    macros: Mapping[str, str],
    environ: Mapping[str, str],
    port: int | None,
    raw: RawConfig,
    problems: Problems,
    secrets: set[str],
) -> ModelConfig:
    base = ("models", model_id)
    builtins = {"MODEL_ID": model_id} | ({"PORT": str(port)} if port is not None else {})
    scope = Scope(
        builtins=builtins,
        macros=macros,
        environ=environ,
        unavailable={"PID": "is only available in cmdStop"},
        secrets=secrets,
    )
    stop_scope = replace(scope, keep=frozenset({"PID"}), unavailable={})
    cmd = _resolve_command(model.cmd, scope, (*base, "cmd"), problems)
    cmd_stop = None
    if model.cmd_stop is not None:
        cmd_stop = _resolve_command(model.cmd_stop, stop_scope, (*base, "cmdStop"), problems)
    use_model_name = None
    if model.use_model_name is not None:
        use_model_name = _expand(model.use_model_name, scope, (*base, "useModelName"), problems)
        if not model.use_model_name.strip():
            problems.append((key_path(*base, "useModelName"), "must not be empty"))
    # vLLM serves /sleep and /wake_up only in its dev mode.
    model_env = ({"VLLM_SERVER_DEV_MODE": "1"} if model.sleep_mode else {}) | _resolve_env(
        model.env, scope, (*base, "env"), problems
    )
    # a remote host is allowed (llama-swap allows it) and listed as an open switch
    proxy = _resolve_proxy(model.proxy, scope, (*base, "proxy"), problems)
    upstream_key = None
    if model.api_key is not None:
        upstream_key = _expand(model.api_key, scope, (*base, "apiKey"), problems).strip() or None
        if upstream_key:
            secrets.add(upstream_key)
    _collect_literal_secrets(cmd, cmd_stop, proxy, model_env, secrets)
    return ModelConfig(
        id=model_id,
        cmd=cmd,
        cmd_stop=cmd_stop,
        proxy=proxy,
        port=port,
        aliases=tuple(model.aliases),
        use_model_name=use_model_name,
        env=MappingProxyType(model_env),
        check_endpoint=_resolve_check(model.check_endpoint, scope, base, problems),
        ttl=model.ttl if model.ttl is not None else raw.global_ttl,
        unlisted=model.unlisted,
        name=_expand_optional(model.name, scope, (*base, "name"), problems),
        description=_expand_optional(model.description, scope, (*base, "description"), problems),
        backend=model.backend,
        timeouts=replace(
            resolve_timeouts(model.timeouts), disable_keep_alives=model.disable_keep_alives
        ),
        start_timeout=(
            _start_timeout(model, base, problems)
            or _start_timeout(raw, (), [])
            or DEFAULT_START_TIMEOUT
        ),
        silence_timeout=(
            raw.silence_timeout if model.silence_timeout is None else model.silence_timeout
        ),
        failure_backoff=(
            raw.failure_backoff if model.failure_backoff is None else model.failure_backoff
        ),
        allow_remote_backend=model.allow_remote_backend,
        upstream_api_key=upstream_key,
        uses=resolve_uses(model.uses, key_path(*base, "uses"), problems),
        evict_cost=model.evict_cost,
        capabilities=resolve_capabilities(model.capabilities),
        send_loading_state=(
            raw.send_loading_state if model.send_loading_state is None else model.send_loading_state
        ),
        prefetch=raw.prefetch if model.prefetch is None else model.prefetch,
        prompt_cache=raw.prompt_cache.enabled if model.prompt_cache is None else model.prompt_cache,
        stop_grace=model.unload_timeout if model.unload_timeout is not None else raw.unload_timeout,
        priority=model.priority,
        concurrency_limit=model.concurrency_limit,
        sleep_mode=_check_sleep_mode(model.sleep_mode, cmd, base, problems),
        filters=resolve_filters(model.filters, (*base, "filters"), problems),
        alias_filters=MappingProxyType(
            resolve_alias_filters(model, base, problems, own_id=model_id)
        ),
        metadata=MappingProxyType(
            resolve_metadata(
                model.metadata, scope, {**raw.macros, **model.macros}, (*base, "metadata"), problems
            )
        ),
    )


def resolve_capabilities(raw: RawCapabilities | None) -> Capabilities:
    """The declared capabilities; a key not written stays None (discovery may fill it)."""
    if raw is None:
        return Capabilities()
    return Capabilities(
        inputs=None if raw.in_ is None else tuple(raw.in_),
        outputs=None if raw.out is None else tuple(raw.out),
        tools=raw.tools,
        reranker=raw.reranker,
        context=raw.context,
        disable_auto=raw.disable_auto,
    )


def _expand_optional(
    text: str | None, scope: Scope, path: tuple[str | int, ...], problems: Problems
) -> str | None:
    return None if text is None else _expand(text, scope, path, problems)


def _collect_literal_secrets(
    cmd: tuple[str, ...],
    cmd_stop: tuple[str, ...] | None,
    proxy: str,
    env: Mapping[str, str],
    secrets: set[str],
) -> None:
    """Secrets written into the file itself (not via ${env.…}) must be masked too: values of
    secret-looking flags, of secret-named environment variables, and URL passwords."""
    for argv in (cmd, cmd_stop or ()):
        for index, arg in enumerate(argv):
            flag, eq, inline = arg.partition("=")
            if not flag.startswith("--") or not is_secret_name(flag.lstrip("-")):
                continue
            value = inline if eq else (argv[index + 1] if index + 1 < len(argv) else "")
            if value and not value.startswith("-"):
                secrets.add(value)
    for name, value in env.items():
        if is_secret_name(name) and value:
            secrets.add(value)
    password = urlsplit(proxy).password
    if password:
        secrets.add(password)


def _check_sleep_mode(
    wanted: bool, cmd: tuple[str, ...], base: tuple[str, ...], problems: Problems
) -> bool:
    if wanted and "--enable-sleep-mode" not in cmd:
        problems.append(
            (
                key_path(*base, "sleepMode"),
                "needs a vLLM server started with --enable-sleep-mode (add it to cmd)",
            )
        )
    return wanted


def _start_timeout(
    raw: RawConfig | RawModel, base: tuple[str | int, ...], problems: Problems
) -> float | None:
    """startTimeout, or its llama-swap name healthCheckTimeout; both at once is an error."""
    if raw.start_timeout is not None and raw.health_check_timeout is not None:
        problems.append(
            (
                key_path(*base, "healthCheckTimeout"),
                "is another name for startTimeout: set only one of the two",
            )
        )
    return raw.start_timeout if raw.start_timeout is not None else raw.health_check_timeout


def _expand(text: str, scope: Scope, path: tuple[str | int, ...], problems: Problems) -> str:
    result, found = expand(text, scope)
    problems.extend((key_path(*path), message) for message in found)
    return result


def _resolve_command(
    command: str | list[str], scope: Scope, path: tuple[str | int, ...], problems: Problems
) -> tuple[str, ...]:
    """Expand and split a command into argv; a string is split like a POSIX shell would."""
    before = len(problems)
    if isinstance(command, str):
        text = _expand(clean_command(command), scope, path, problems)
        try:
            argv = shlex.split(text)
        except ValueError as exc:
            problems.append((key_path(*path), f"cannot split the command: {exc}"))
            return ()
    else:
        argv = [_expand(arg, scope, (*path, i), problems) for i, arg in enumerate(command)]
    if len(problems) == before:
        if not argv:
            problems.append((key_path(*path), "the command is empty"))
        elif not argv[0]:
            problems.append((key_path(*path), "the program (first argument) is empty"))
    return tuple(argv)


def _resolve_proxy(text: str, scope: Scope, path: tuple[str | int, ...], problems: Problems) -> str:
    before = len(problems)
    url = _expand(text, scope, path, problems).strip()
    if len(problems) > before:
        return url
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError as exc:
        problems.append((key_path(*path), f"{url!r} has a bad port: {exc}"))
        return url
    if parts.scheme not in ("http", "https") or not parts.hostname:
        problems.append((key_path(*path), f"{url!r} is not an http:// or https:// URL with a host"))
    return url.rstrip("/")


def _resolve_env(
    env: list[str] | Mapping[str, str | int | float],
    scope: Scope,
    path: tuple[str | int, ...],
    problems: Problems,
) -> dict[str, str]:
    """The environment as KEY -> expanded value, from either the list or the mapping form."""
    pairs: list[tuple[str, str, tuple[str | int, ...]]] = []
    if isinstance(env, list):
        for index, entry in enumerate(env):
            key, sep, value = entry.partition("=")
            if not sep:
                problems.append((key_path(*path, index), f"{entry!r} is not KEY=VALUE"))
                continue
            pairs.append((key, value, (*path, index)))
    else:
        pairs = [(key, str(value), (*path, key)) for key, value in env.items()]
    resolved: dict[str, str] = {}
    for key, value, where in pairs:
        if not ENV_NAME_RE.fullmatch(key):
            problems.append(
                (key_path(*where), f"{key!r} is not a valid variable name (letters, digits, '_')")
            )
        elif key in resolved:
            problems.append((key_path(*where), f"{key} is set twice"))
        else:
            resolved[key] = _expand(value, scope, (*path, key), problems)
    return resolved


def _resolve_check(
    text: str, scope: Scope, base: tuple[str, ...], problems: Problems
) -> str | None:
    if text.strip().lower() == NO_CHECK_ENDPOINT:
        return None
    before = len(problems)
    endpoint = _expand(text, scope, (*base, "checkEndpoint"), problems)
    if len(problems) == before and not endpoint.startswith("/"):
        problems.append(
            (
                key_path(*base, "checkEndpoint"),
                f'{endpoint!r} must be a path starting with "/", or "{NO_CHECK_ENDPOINT}"',
            )
        )
    return endpoint
