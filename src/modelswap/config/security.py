"""Security settings: client keys, open switches, backend locality. Checked before anything
starts; every problem names its key path."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from modelswap.config.macros import ENV_NAME_RE, Scope, expand
from modelswap.config.resolved import SCOPES, ApiKey, Config, Limits, ModelConfig, Security
from modelswap.config.schema import RawApiKey, RawConfig

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
        keys.append(ApiKey(name, secret, scopes, tuple(entry.models or ())))
    return tuple(keys)


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
    return Security(raw.security.allow_unauthenticated_network, origins)


def resolve_limits(raw: RawConfig) -> Limits:
    lim = raw.limits
    return Limits(
        header_timeout=lim.header_timeout,
        max_header_bytes=lim.max_header_bytes,
        max_headers=lim.max_headers,
        max_connections=lim.max_connections,
        max_connections_per_client=lim.max_connections_per_client,
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
        "cors_origins": list(config.security.cors_origins),
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
