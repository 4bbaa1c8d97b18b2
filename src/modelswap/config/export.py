"""The resolved configuration as data, secrets masked: ``GET /api/config`` and
``modelswap check --show``. Key values never appear; the Redactor masks everything else."""

from __future__ import annotations

from typing import Any

from modelswap.config.resolved import Config, Filters, ModelConfig, Peer, Timeouts
from modelswap.redact import MASK, Redactor


def _filters(filters: Filters) -> dict[str, Any]:
    return {
        "stripParams": list(filters.strip_params),
        "setParams": dict(filters.set_params),
        "defaultParams": dict(filters.default_params),
    }


def _timeouts(t: Timeouts) -> dict[str, Any]:
    return {
        "connect": t.connect,
        "firstByte": t.first_byte,
        "idleBetweenChunks": t.idle_between_chunks,
        "total": t.total,
    }


def _model(model: ModelConfig, redactor: Redactor) -> dict[str, Any]:
    out: dict[str, Any] = {
        "cmd": redactor.argv(model.cmd),
        "cmdStop": redactor.argv(model.cmd_stop) if model.cmd_stop else None,
        "proxy": redactor.url(model.proxy),
        "aliases": list(model.aliases),
        "useModelName": model.use_model_name,
        "env": {name: value for name, value in model.env.items()},
        "checkEndpoint": model.check_endpoint or "none",
        "ttl": model.ttl,
        "unlisted": model.unlisted,
        "name": model.name,
        "description": model.description,
        "backend": model.backend,
        "startTimeout": model.start_timeout,
        "silenceTimeout": model.silence_timeout,
        "failureBackoff": model.failure_backoff,
        "timeouts": _timeouts(model.timeouts),
        "allowRemoteBackend": model.allow_remote_backend,
        "apiKey": MASK if model.upstream_api_key else None,
        "filters": _filters(model.filters),
        "aliasFilters": {alias: _filters(f) for alias, f in model.alias_filters.items()},
        "metadata": dict(model.metadata) if model.metadata else None,
        "fallback": list(model.fallback) if model.fallback else None,
        "prefetch": model.prefetch,
        "promptCache": model.prompt_cache,
    }
    return {k: v for k, v in out.items() if v is not None}


def _peer(peer: Peer, redactor: Redactor) -> dict[str, Any]:
    return {
        "proxy": redactor.url(peer.proxy),
        "apiKey": MASK if peer.api_key else None,
        "models": list(peer.models),
        "discover": _discover(peer),
        "discoverInterval": peer.discover_interval,
        "timeouts": _timeouts(peer.timeouts),
        "breaker": {"failures": peer.breaker_failures, "cooldown": peer.breaker_cooldown},
        "filters": _filters(peer.filters),
    }


def _discover(peer: Peer) -> bool | dict[str, Any]:
    if peer.dns is None:
        return peer.discover
    ns = peer.dns.nameserver
    return {
        "dns": peer.dns.name,
        "port": peer.dns.port,
        "interval": peer.dns.interval,
        "scheme": peer.dns.scheme,
        "nameserver": None
        if ns is None
        else (f"[{ns[0]}]:{ns[1]}" if ":" in ns[0] else f"{ns[0]}:{ns[1]}"),
    }


def export_config(config: Config, redactor: Redactor) -> dict[str, Any]:
    data: dict[str, Any] = {
        "source": config.source,
        "listen": f"{config.listen_host}:{config.listen_port}",
        "startPort": config.start_port,
        "startTimeout": config.start_timeout,
        "logLevel": config.log_level,
        "maxRequestBodyBytes": config.max_request_body_bytes,
        "maxUploadBodyBytes": config.max_upload_body_bytes,
        "apiKeys": [
            {"name": k.name, "key": MASK, "scopes": sorted(k.scopes), "models": list(k.models)}
            for k in config.api_keys
        ],
        "security": {
            "allowUnauthenticatedNetwork": config.security.allow_unauthenticated_network,
            "corsOrigins": list(config.security.cors_origins),
        },
        "limits": {
            "headerTimeout": config.limits.header_timeout,
            "maxHeaderBytes": config.limits.max_header_bytes,
            "maxHeaders": config.limits.max_headers,
            "maxConnections": config.limits.max_connections,
            "maxConnectionsPerClient": config.limits.max_connections_per_client,
            "fastLane": config.limits.fast_lane,
        },
        "models": {mid: _model(m, redactor) for mid, m in config.models.items()},
        "peers": {pid: _peer(p, redactor) for pid, p in config.peers.items()},
    }
    redacted = redactor.data(data)
    assert isinstance(redacted, dict)
    return redacted
