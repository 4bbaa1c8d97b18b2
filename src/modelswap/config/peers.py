"""Peers (other gateways) and per-model fallbacks, checked against each other.

A peer's model is addressed ``peerID/model``, or by its bare name when no local model and no
other peer uses that name. Fallback targets are checked here as far as the file tells: local
names and statically listed peer models must exist; a ``peerID/…`` target of a discovering peer
is accepted (its list is only known at run time).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from urllib.parse import urlsplit

from modelswap.config.filters import resolve_filters
from modelswap.config.paths import Problems, key_path
from modelswap.config.peer_dns import resolve_dns_discovery
from modelswap.config.resolved import ModelConfig, Peer, Timeouts
from modelswap.config.schema import RawConfig, RawDnsDiscovery, RawPeer, RawTimeouts
from modelswap.config.security import env_value


def resolve_timeouts(t: RawTimeouts) -> Timeouts:
    """A model's or a peer's ``timeouts:`` as the relay reads them (both take the same keys)."""
    return Timeouts(
        t.connect,
        t.first_byte,
        t.idle_between_chunks,
        t.total,
        keepalive=t.keepalive,
        tls_handshake=t.tls_handshake,
        idle_conn=t.idle_conn,
    )


def resolve_peers(
    raw: RawConfig, environ: Mapping[str, str], problems: Problems, secrets: set[str]
) -> dict[str, Peer]:
    peers: dict[str, Peer] = {}
    for peer_id, entry in raw.peers.items():
        base = ("peers", peer_id)
        if not peer_id or "/" in peer_id:
            problems.append((key_path(*base), "a peer id cannot be empty or contain '/'"))
            continue
        if peer_id in raw.models:
            problems.append(
                (key_path(*base), f"{peer_id!r} is also a model id; give the peer another id")
            )
        dns = None
        if isinstance(entry.discover, RawDnsDiscovery):
            dns = resolve_dns_discovery(entry.discover, base, problems)
            _pool_problems(peer_id, entry, raw, base, problems)
            proxy = f"{entry.discover.scheme}://{_host(entry.discover.dns)}:{entry.discover.port}"
        else:
            proxy = _proxy(entry, base, problems)
        if bool(entry.discover) == bool(entry.models):
            problems.append(
                (
                    key_path(*base),
                    "give exactly one of models: [names], discover: true or discover: {dns, port}",
                )
            )
        key = _peer_key(entry, environ, base, problems)
        if key:
            secrets.add(key)
        peers[peer_id] = Peer(
            id=peer_id,
            proxy=proxy,
            api_key=key,
            models=tuple(entry.models),
            discover=bool(entry.discover),
            dns=dns,
            discover_interval=entry.discover_interval,
            timeouts=resolve_timeouts(entry.timeouts),
            breaker_failures=entry.breaker.failures,
            breaker_cooldown=entry.breaker.cooldown,
            filters=resolve_filters(entry.filters, (*base, "filters"), problems),
        )
    return peers


def _proxy(entry: RawPeer, base: tuple[str, ...], problems: Problems) -> str:
    if entry.proxy is None:
        problems.append((key_path(*base, "proxy"), "required key is missing"))
        return ""
    url = urlsplit(entry.proxy)
    if url.scheme not in ("http", "https") or not url.hostname:
        problems.append(
            (key_path(*base, "proxy"), f"{entry.proxy!r} is not an http(s) URL with a host")
        )
    return entry.proxy.rstrip("/")


def _pool_problems(
    peer_id: str, entry: RawPeer, raw: RawConfig, base: tuple[str, ...], problems: Problems
) -> None:
    """A pool's peers come from DNS: no ``proxy``; and no other peer is named like a member."""
    if entry.proxy is not None:
        problems.append(
            (
                key_path(*base, "proxy"),
                "not used with discover.dns: each address the name resolves to is a peer at "
                "discover.port",
            )
        )
    for other in raw.peers:
        if other.startswith(f"{peer_id}@"):
            problems.append(
                (
                    key_path("peers", other),
                    f"{peer_id}@… names the members of the pool {peer_id!r}; "
                    "give this peer another id",
                )
            )


def _host(name: str) -> str:
    name = name.strip().rstrip(".")
    return f"[{name}]" if ":" in name else name


def _peer_key(
    entry: RawPeer, environ: Mapping[str, str], base: tuple[str, ...], problems: Problems
) -> str | None:
    if entry.api_key is not None and entry.api_key_env is not None:
        problems.append((key_path(*base), "give one of apiKey and apiKeyEnv, not both"))
        return None
    if entry.api_key_env is not None:
        found = env_value(entry.api_key_env, environ, key_path(*base, "apiKeyEnv"), problems)
        return found.strip() or None if found is not None else None
    return entry.api_key.strip() or None if entry.api_key is not None else None


def resolve_fallbacks(
    raw: RawConfig, models: dict[str, ModelConfig], peers: Mapping[str, Peer], problems: Problems
) -> None:
    """Check each model's ``fallback`` list and store it on the model (in place)."""
    local_names = {n for m in models.values() for n in (m.id, *m.aliases)}
    for model_id, entry in raw.models.items():
        if not entry.fallback or model_id not in models:
            continue
        own = {model_id, *models[model_id].aliases}
        for index, target in enumerate(entry.fallback):
            path = key_path("models", model_id, "fallback", index)
            problem = _target_problem(target, own, local_names, peers)
            if problem:
                problems.append((path, problem))
        models[model_id] = replace(models[model_id], fallback=tuple(entry.fallback))


def _target_problem(
    target: str, own: set[str], local_names: set[str], peers: Mapping[str, Peer]
) -> str | None:
    if target in own:
        return f"{target!r} is this model itself"
    return target_problem(target, local_names, peers, list_peer_models=True)


def target_problem(
    target: str, local_names: set[str], peers: Mapping[str, Peer], *, list_peer_models: bool
) -> str | None:
    """Why ``target`` names nothing a request could go to — a local id or alias, a peer's
    ``peerID/model`` (any name for a discovering peer), or a bare name a peer lists — else
    None. Shared by fallbacks and selectors."""
    if target in local_names:
        return None
    peer_id, slash, name = target.partition("/")
    if slash and peer_id in peers:
        peer = peers[peer_id]
        if peer.discover or name in peer.models:
            return None
        listed = f" (its models: {', '.join(peer.models)})" if list_peer_models else ""
        return f"peer {peer_id!r} does not list {name!r}{listed}"
    if any(target in peer.models for peer in peers.values()):
        return None
    return f"{target!r} is neither a model, an alias nor a peerID/model name"
