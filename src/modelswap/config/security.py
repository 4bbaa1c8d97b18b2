"""Security settings: client keys, open switches, backend locality. Checked before anything
starts; every problem names its key path."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from modelswap.config.macros import ENV_NAME_RE, Scope, expand
from modelswap.config.resolved import (
    SCOPES,
    ApiKey,
    Config,
    CorsPolicy,
    KeyDefaults,
    Limits,
    ModelConfig,
    Quota,
    Security,
)
from modelswap.config.schema import RawApiKey, RawConfig, RawCors, RawQuota

Problems = list[tuple[str, str]]


def host_port(host: str, port: int) -> str:
    """A listen address as people write it (``[::1]:8080`` for IPv6)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 and ``localhost`` — traffic that never leaves this machine."""
    host = host.strip("[]").lower()
    if host in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def resolve_api_keys(
    raw: RawConfig, environ: Mapping[str, str], problems: Problems, secrets: set[str]
) -> tuple[ApiKey, ...]:
    keys: list[ApiKey] = []
    seen_names: set[str] = set()
    seen_secrets: set[str] = set()
    for index, entry in enumerate(raw.api_keys):
        path = f"apiKeys[{index}]"
        if isinstance(entry, str):
            entry = RawApiKey(key=_expand_env(entry, environ, path, problems, secrets))
        secret = _key_value(entry, environ, path, problems)
        name = entry.name or f"key-{index + 1}"
        if name in seen_names:
            problems.append((f"{path}.name", f"{name!r} is used by another key"))
        seen_names.add(name)
        if secret is None:
            continue
        if secret in seen_secrets:
            problems.append((path, "the same key is listed twice"))
        seen_secrets.add(secret)
        secrets.add(secret)
        scopes = frozenset(entry.scopes)
        if not scopes <= set(SCOPES):  # pydantic already checks; kept for direct callers
            problems.append((f"{path}.scopes", f"scopes are {', '.join(SCOPES)}"))
        defaults = resolve_key_defaults(raw)
        keys.append(
            ApiKey(
                name,
                secret,
                scopes,
                tuple(entry.models or ()),
                quota=_quota(entry.quota, defaults.quota),
                priority=entry.priority or defaults.priority,
                weight=entry.weight if entry.weight is not None else defaults.weight,
            )
        )
    return tuple(keys)


def resolve_key_defaults(raw: RawConfig) -> KeyDefaults:
    """``keyDefaults``: pydantic has checked each value (ranges, classes) with its key path."""
    given = raw.key_defaults
    return KeyDefaults(_quota(given.quota, Quota()), given.priority, given.weight)


def _quota(raw: RawQuota | None, default: Quota) -> Quota:
    """A key's quota: each field it gives, else the default's."""
    if raw is None:
        return default

    def pick(value: int | None, fallback: int) -> int:
        return fallback if value is None else value

    return Quota(
        concurrency=pick(raw.concurrency, default.concurrency),
        requests_per_minute=pick(raw.requests_per_minute, default.requests_per_minute),
        tokens_per_minute=pick(raw.tokens_per_minute, default.tokens_per_minute),
        tokens_per_day=pick(raw.tokens_per_day, default.tokens_per_day),
    )


def _expand_env(
    text: str, environ: Mapping[str, str], path: str, problems: Problems, secrets: set[str]
) -> str:
    """A key written as text may read the environment (``${env.NAME}``), as in llama-swap."""
    if "${" not in text:
        return text
    value, found = expand(text, Scope(builtins={}, macros={}, environ=environ, secrets=secrets))
    problems.extend((path, message) for message in found)
    return value


def env_value(name: str, environ: Mapping[str, str], path: str, problems: Problems) -> str | None:
    """The variable ``name`` (a key named by ``keyEnv`` / ``apiKeyEnv``), or None with the
    problem recorded at ``path``."""
    if not ENV_NAME_RE.fullmatch(name):
        problems.append((path, f"{name!r} is not a variable name"))
        return None
    if name not in environ:
        problems.append((path, f"environment variable {name} is not set"))
        return None
    return environ[name]


def _key_value(
    entry: RawApiKey, environ: Mapping[str, str], path: str, problems: Problems
) -> str | None:
    given = [
        n
        for n, v in (("key", entry.key), ("keyEnv", entry.key_env), ("keyFile", entry.key_file))
        if v is not None
    ]
    if len(given) != 1:
        problems.append((path, "give exactly one of key, keyEnv, keyFile"))
        return None
    if entry.key is not None:
        value = entry.key
    elif entry.key_env is not None:
        found = env_value(entry.key_env, environ, f"{path}.keyEnv", problems)
        if found is None:
            return None
        value = found
    else:
        assert entry.key_file is not None
        try:
            lines = Path(entry.key_file).expanduser().read_text().splitlines()
        except OSError as exc:
            problems.append((f"{path}.keyFile", f"cannot read {entry.key_file}: {exc.strerror}"))
            return None
        value = lines[0] if lines else ""
    value = value.strip()
    if not value:
        problems.append((path, "the key is empty"))
        return None
    return value


def resolve_security(raw: RawConfig, keys: tuple[ApiKey, ...], problems: Problems) -> Security:
    cors = None
    if raw.security.cors is not None:
        if raw.security.cors_origins:
            problems.append(("security.cors", "security.corsOrigins is set too: keep one"))
        cors = resolve_cors(raw.security.cors, keys, problems)
    origins = tuple(raw.security.cors_origins)
    if "*" in origins and not keys:
        problems.append(
            (
                "security.corsOrigins",
                "'*' lets any web page call modelswap; it is allowed only together with apiKeys",
            )
        )
    for index, origin in enumerate(origins):
        if origin != "*" and not origin.startswith(("http://", "https://")):
            problems.append(
                (
                    f"security.corsOrigins[{index}]",
                    f"{origin!r} is not an origin like https://app.example.com",
                )
            )
    return Security(raw.security.allow_unauthenticated_network, origins, cors)


_CORS = "security.cors"
_TOKEN_RE = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110: methods and header names


def resolve_cors(raw: RawCors, keys: tuple[ApiKey, ...], problems: Problems) -> CorsPolicy | None:
    """llama-swap's ``security.cors``, refused where llama-swap refuses it at startup (an origin
    with a path, ``*`` with credentials, a method or header name that is not a token) and, as
    ``corsOrigins``, where ``*`` would let any page use a gateway without keys. Without
    ``allowedOrigins`` (and nothing else) there is no CORS at all: modelswap's default."""
    given = raw.model_fields_set - {"allowed_origins"}
    if not raw.allowed_origins:
        if raw.allowed_origins is not None or given:
            problems.append(
                (
                    f"{_CORS}.allowedOrigins",
                    "list the origins allowed (it is required once any other cors key is set)",
                )
            )
        return None
    origins: set[str] = set()
    for index, origin in enumerate(raw.allowed_origins):
        problem = None if origin == "*" else _origin_problem(origin)
        if problem is not None:
            problems.append((f"{_CORS}.allowedOrigins[{index}]", problem))
        origins.add(origin.lower())
    any_origin = "*" in origins
    if any_origin and raw.allow_credentials:
        problems.append(
            (
                f"{_CORS}.allowCredentials",
                "not with '*' in allowedOrigins (browsers refuse that pairing): list the origins",
            )
        )
    if any_origin and raw.allow_private_network:
        problems.append((f"{_CORS}.allowPrivateNetwork", "not with '*' in allowedOrigins"))
    if any_origin and not keys:
        problems.append(
            (
                f"{_CORS}.allowedOrigins",
                "'*' lets any web page call modelswap; it is allowed only together with apiKeys",
            )
        )
    for name, values in (
        ("allowedMethods", raw.allowed_methods),
        ("allowedHeaders", raw.allowed_headers),
        ("exposedHeaders", raw.exposed_headers),
    ):
        for index, value in enumerate(values):
            if not _TOKEN_RE.fullmatch(value):
                kind = "an HTTP method" if name == "allowedMethods" else "a header name"
                problems.append((f"{_CORS}.{name}[{index}]", f"{value!r} is not {kind}"))
    default = CorsPolicy()
    return CorsPolicy(
        origins=frozenset(origins - {"*"}),
        any_origin=any_origin,
        allow_credentials=raw.allow_credentials,
        allow_private_network=raw.allow_private_network,
        allowed_methods=tuple(raw.allowed_methods) or default.allowed_methods,
        allowed_headers=tuple(raw.allowed_headers),
        exposed_headers=tuple(raw.exposed_headers),
        max_age=raw.max_age or default.max_age,
    )


def _origin_problem(origin: str) -> str | None:
    """Why ``origin`` is not a bare ``scheme://host[:port]`` (what a browser sends), if so: a
    path, even a trailing slash, would never match, so it is refused at load."""
    example = "a scheme://host[:port] origin, e.g. https://dashboard.example.com"
    if not origin or origin != origin.strip():
        return f"{origin!r} must be {example}, without spaces"
    try:
        parts = urlsplit(origin)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        return f"{origin!r} is not {example}"
    if not parts.scheme or not parts.netloc:
        return f"{origin!r} must be {example}"
    if parts.path or parts.query or parts.fragment or "@" in parts.netloc or "?" in origin:
        return f"{origin!r} must not have a path (not even a trailing /), query or user"
    return None


def resolve_limits(raw: RawConfig) -> Limits:
    lim = raw.limits
    return Limits(
        header_timeout=lim.header_timeout,
        max_header_bytes=lim.max_header_bytes,
        max_headers=lim.max_headers,
        max_connections=lim.max_connections,
        max_connections_per_client=lim.max_connections_per_client,
        fast_lane=lim.fast_lane,
    )


def remote_backend(model: ModelConfig) -> str | None:
    """The host of ``model``'s proxy when it is not on this machine (else None)."""
    try:
        host = urlsplit(model.proxy).hostname
    except ValueError:
        return None
    return None if host is None or is_loopback_host(host) else host


def exposure_problem(host: str, keys: tuple[ApiKey, ...], allowed: bool) -> str | None:
    """Why listening on ``host`` must be refused, if it must (the exposure policy)."""
    if is_loopback_host(host) or keys or allowed:
        return None
    return (
        f"refusing to listen on {host} without apiKeys: anyone who can reach this address "
        "could use every model. Either configure apiKeys — a key in a file, e.g. a mounted "
        "secret (apiKeys: [{keyFile: /run/secrets/modelswap/api-key}]), or in an environment "
        "variable (apiKeys: [{keyEnv: MODELSWAP_API_KEY}]) — or pass "
        "--allow-unauthenticated-network (config security.allowUnauthenticatedNetwork: true) "
        "if this network is trusted."
    )


def open_switches(config: Config, *, allow_flag: bool = False) -> list[str]:
    """Every switch that opens modelswap up and is on, in words (logged and listed)."""
    found: list[str] = []
    if config.security.allow_unauthenticated_network or allow_flag:
        found.append(
            "security.allowUnauthenticatedNetwork: a non-loopback listen address is allowed "
            "without apiKeys"
        )
    if "*" in config.security.cors_origins:
        found.append("security.corsOrigins: '*' — any web page may call modelswap with a key")
    cors = config.security.cors
    if cors is not None and cors.any_origin:
        found.append(
            "security.cors.allowedOrigins: '*' — any web page may call modelswap with a key"
        )
    if cors is not None and cors.allow_private_network:
        found.append(
            "security.cors.allowPrivateNetwork: a page on a public origin may reach modelswap "
            "on this network"
        )
    for model in config.models.values():
        host = remote_backend(model)
        if model.allow_remote_backend:
            found.append(
                f"models.{model.id}.allowRemoteBackend: requests go to {model.proxy}, "
                "off this machine"
            )
        elif host is not None:  # allowed, as llama-swap allows it (a docker bridge ...)
            found.append(
                f"models.{model.id}.proxy: requests to model {model.id!r} go to {host}, off "
                "this machine, unencrypted unless https (set allowRemoteBackend: true to "
                "say it is meant)"
            )
    return found


def scope_hint(config: Config) -> str | None:
    """Said once at startup when keys exist but none may read or administer: llama-swap's
    string keys open every route, modelswap's the model routes only."""
    if not config.api_keys or any({"read", "admin"} & key.scopes for key in config.api_keys):
        return None
    return (
        "no apiKeys entry has the read or admin scope, so /running, /logs, /api/events, "
        "unload and /upstream answer 403 to every key (a string key may use the model routes "
        "only); to grant them, give a key its scopes, e.g. apiKeys: [{keyEnv: ADMIN_KEY, "
        "scopes: [inference, read, admin]}]"
    )


def security_report(config: Config, *, allow_flag: bool = False) -> dict[str, object]:
    """What ``GET /api/security`` shows: exposure, keys (names, never values), switches."""
    host = config.listen_host
    return {
        "listen": f"{host}:{config.listen_port}",
        "loopback_only": is_loopback_host(host),
        "authentication": "api keys" if config.api_keys else "none (every route is open)",
        "keys": [
            {"name": k.name, "scopes": sorted(k.scopes), "models": list(k.models) or ["*"]}
            for k in config.api_keys
        ],
        "cors_origins": list(config.security.cors_origins) + cors_origins(config.security.cors),
        "open_switches": open_switches(config, allow_flag=allow_flag),
        "limits": {
            "max_request_body_bytes": config.max_request_body_bytes,
            "max_upload_body_bytes": config.max_upload_body_bytes,
            "header_timeout": config.limits.header_timeout,
            "max_header_bytes": config.limits.max_header_bytes,
            "max_headers": config.limits.max_headers,
            "max_connections": config.limits.max_connections,
            "max_connections_per_client": config.limits.max_connections_per_client,
        },
    }


def cors_origins(cors: CorsPolicy | None) -> list[str]:
    """The origins ``security.cors`` allows, as listed (``*`` for any)."""
    if cors is None:
        return []
    return (["*"] if cors.any_origin else []) + sorted(cors.origins)
