"""Scheduling settings resolved and checked: sizes, groups, budgets, keep-warm."""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from modelswap.config.matrix import MatrixError, expand
from modelswap.config.resolved import Group, ModelConfig, Scheduling
from modelswap.config.schema import RawConfig
from modelswap.config.schema_sched import Size

Problems = list[tuple[str, str]]

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def _matrix(
    raw: RawConfig, models: Mapping[str, ModelConfig], problems: Problems
) -> tuple[tuple[frozenset[str], ...] | None, dict[str, float]]:
    """The matrix's alternatives (each set expanded) and its costs by model id."""
    if raw.matrix is None:
        return None, {}
    m = raw.matrix
    for name, model_id in m.vars.items():
        if model_id not in models:
            problems.append((f"matrix.vars.{name}", f"{model_id!r} is not a model id"))
    costs: dict[str, float] = {}
    for name, cost in m.evict_costs.items():
        if name not in m.vars:
            problems.append((f"matrix.evict_costs.{name}", f"{name!r} is not one of the vars"))
        elif cost < 0:
            problems.append((f"matrix.evict_costs.{name}", "a cost cannot be negative"))
        else:
            costs[m.vars[name]] = cost
    found: list[frozenset[str]] = []
    for name, expression in m.sets.items():
        try:
            alternatives = expand(expression, m.vars, m.sets, (name,))
        except MatrixError as exc:
            problems.append((f"matrix.sets.{name}", str(exc)))
            continue
        found += [alt for alt in alternatives if alt not in found]
    return tuple(found), costs


def _profiles(
    raw: RawConfig, models: Mapping[str, ModelConfig], problems: Problems
) -> tuple[dict[str, Mapping[str, str | None]], dict[str, str]]:
    """Each profile's pins as pin name -> model id (an alias read as its model), or as written
    for a selector or a peer's model (resolved per request, as llama-swap's pins are)."""
    owner = {n: m.id for m in models.values() for n in (m.id, *m.aliases)}
    routed = set(raw.selectors)  # names a request resolves elsewhere: selectors, peer models
    discovering: list[str] = []
    for peer_id, peer in raw.peers.items():
        routed |= {name for model in peer.models for name in (model, f"{peer_id}/{model}")}
        if peer.discover:
            discovering.append(f"{peer_id}/")
    profiles: dict[str, Mapping[str, str | None]] = {}
    descriptions: dict[str, str] = {}
    for name, entry in raw.profiles.items():
        if isinstance(entry, list):
            given: dict[str, str | None] = {m: m for m in entry}
            where = [f"profiles.{name}[{i}]" for i in range(len(entry))]
        else:
            given = dict(entry.pins)
            where = [f"profiles.{name}.pins.{pin}" for pin in given]
            if entry.description:
                descriptions[name] = entry.description
        pins: dict[str, str | None] = {}
        for path, (pin, written) in zip(where, given.items(), strict=True):
            # llama-swap reads an empty pin as "not served in this profile", as null (issue 38).
            target = written or None
            if target is not None and not (
                target in owner or target in routed or target.startswith(tuple(discovering))
            ):
                problems.append(
                    (path, f"{target!r} is not a model id, alias, selector or peer model")
                )
            pins[pin] = None if target is None else owner.get(target, target)
        profiles[name] = MappingProxyType(pins)
    return profiles, descriptions


def parse_size(value: Size) -> int:
    """Bytes from ``34359738368``, ``"32GiB"``, ``"512 MiB"`` or ``"1.5GB"``."""
    if isinstance(value, bool):
        raise ValueError("expected a size like 32GiB, got a boolean")
    if isinstance(value, int):
        if value < 0:
            raise ValueError("a size cannot be negative")
        return value
    match = _SIZE_RE.fullmatch(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"{value!r} is not a size like 32GiB, 512MiB or 1.5GB")
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(value: int) -> str:
    for unit, factor in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if value >= factor:
            return f"{value / factor:.1f} {unit}"
    return f"{value} B"


def resolve_uses(raw_uses: Mapping[str, Size], path: str, problems: Problems) -> Mapping[str, int]:
    out: dict[str, int] = {}
    for name, value in raw_uses.items():
        try:
            out[name] = parse_size(value)
        except ValueError as exc:
            problems.append((f"{path}.{name}", str(exc)))
    return MappingProxyType(out)


def default_state_dir(environ: Mapping[str, str]) -> str:
    """$XDG_STATE_HOME/modelswap, else ~/.local/state/modelswap (the XDG default)."""
    base = environ.get("XDG_STATE_HOME") or "~/.local/state"
    return f"{base.rstrip('/')}/modelswap"


def resolve_scheduling(
    raw: RawConfig,
    models: Mapping[str, ModelConfig],
    problems: Problems,
    environ: Mapping[str, str] | None = None,
) -> Scheduling:
    resources: dict[str, int] = {}
    for name, value in raw.resources.items():
        try:
            resources[name] = parse_size(value)
        except ValueError as exc:
            problems.append((f"resources.{name}", str(exc)))
    groups = tuple(  # an empty group (llama-swap accepts `members: []`) constrains nothing
        Group(name, tuple(g.members), g.swap, g.exclusive, g.persistent)
        for name, g in raw.groups.items()
        if g.members
    )
    for group in groups:
        for index, member in enumerate(group.members):
            if member not in models:
                problems.append(
                    (f"groups.{group.name}.members[{index}]", f"{member!r} is not a model id")
                )
    _check_budgets(resources, models, problems)
    preload = tuple(dict.fromkeys(raw.hooks.on_startup.preload))  # a selector may repeat one
    for index, name in enumerate(preload):
        if name not in models:
            problems.append((f"hooks.onStartup.preload[{index}]", f"{name!r} is not a model id"))
    profiles, descriptions = _profiles(raw, models, problems)
    matrix, evict_costs = _matrix(raw, models, problems)
    profile = raw.hooks.on_startup.profile
    if profile is not None and profile not in profiles:
        problems.append(("hooks.onStartup.profile", f"{profile!r} is not a profile"))
    if raw.default_model is not None and raw.default_model not in models:
        problems.append(("defaultModel", f"{raw.default_model!r} is not a model id"))
    return Scheduling(
        groups=groups,
        resources=MappingProxyType(resources),
        queue_limit=raw.queue_limit,
        max_queue_wait=raw.max_queue_wait,
        drain_timeout=raw.drain_timeout,
        max_in_flight=raw.max_in_flight,
        global_concurrency_limit=raw.global_concurrency_limit,
        state_dir=raw.state_dir or default_state_dir(environ or {}),
        preload=preload,
        profiles=MappingProxyType(profiles),
        profile_descriptions=MappingProxyType(descriptions),
        matrix=matrix,
        evict_costs=MappingProxyType(evict_costs),
        profile=profile,
        default_model=raw.default_model,
        default_after=raw.default_after,
    )


def _check_budgets(
    resources: Mapping[str, int], models: Mapping[str, ModelConfig], problems: Problems
) -> None:
    """Every resource a model uses is declared, and every model fits its budgets alone."""
    for model in models.values():
        for name, used in model.uses.items():
            path = f"models.{model.id}.uses.{name}"
            if name not in resources:
                declared = ", ".join(resources) or "none"
                problems.append((path, f"{name!r} is not in resources (declared: {declared})"))
            elif used > resources[name]:
                problems.append(
                    (
                        path,
                        f"{format_size(used)} cannot fit even alone in "
                        f"{name}'s budget of {format_size(resources[name])}",
                    )
                )
