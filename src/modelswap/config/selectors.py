"""Selectors (llama-swap's virtual model ids): each target must name a model, an alias or a
peer's model, and the selector's id must be a name of its own."""

from __future__ import annotations

from collections.abc import Mapping

from modelswap.config.paths import Problems, key_path
from modelswap.config.peers import target_problem
from modelswap.config.resolved import ModelConfig, Peer, Selector
from modelswap.config.schema import RawConfig


def resolve_selectors(
    raw: RawConfig,
    models: Mapping[str, ModelConfig],
    peers: Mapping[str, Peer],
    problems: Problems,
) -> dict[str, Selector]:
    local = {name for m in models.values() for name in (m.id, *m.aliases)}
    found: dict[str, Selector] = {}
    for selector_id, entry in raw.selectors.items():
        base = ("selectors", selector_id)
        if selector_id in local or selector_id in peers:
            problems.append((key_path(*base), f"{selector_id!r} is already a model, alias or peer"))
        for index, target in enumerate(entry.targets):
            problem = _target_problem(target, selector_id, local, peers)
            if problem:
                problems.append((key_path(*base, "targets", index), problem))
        found[selector_id] = Selector(
            id=selector_id,
            targets=tuple(entry.targets),
            strategy=entry.strategy,
            reservations=entry.reservations,
            name=entry.name,
            description=entry.description,
            unlisted=entry.unlisted,
        )
    return found


def _target_problem(
    target: str, own: str, local: set[str], peers: Mapping[str, Peer]
) -> str | None:
    if target == own:
        return "a selector cannot name itself"
    return target_problem(target, local, peers, list_peer_models=False)
