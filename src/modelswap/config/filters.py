"""Request-body filters as configured (per model, per alias, per peer), checked."""

from __future__ import annotations

from types import MappingProxyType

from modelswap.config.paths import Problems, key_path
from modelswap.config.resolved import Filters
from modelswap.config.schema import RawFilters, RawModel


def resolve_filters(raw: RawFilters, base: tuple[str, ...], problems: Problems) -> Filters:
    """Filters as given; naming ``model`` (the routing key) anywhere is a problem."""
    for index, key in enumerate(raw.strip_params):
        if key == "model":
            problems.append((key_path(*base, "stripParams", index), "`model` cannot be filtered"))
    for field_name, params in (
        ("setParams", raw.set_params),
        ("defaultParams", raw.default_params),
    ):
        if "model" in params:
            problems.append((key_path(*base, field_name, "model"), "`model` cannot be filtered"))
    return Filters(
        strip_params=tuple(raw.strip_params),
        set_params=MappingProxyType(dict(raw.set_params)),
        default_params=MappingProxyType(dict(raw.default_params)),
    )


def resolve_alias_filters(
    model: RawModel, base: tuple[str, ...], problems: Problems, *, own_id: str | None = None
) -> dict[str, Filters]:
    """Filters per name: an alias, or ``own_id`` (the model's id: requests naming it only)."""
    out: dict[str, Filters] = {}
    for alias, raw in model.alias_filters.items():
        path = (*base, "aliasFilters", alias)
        if alias != own_id and alias not in model.aliases:
            known = ", ".join(repr(a) for a in model.aliases) or "none"
            problems.append(
                (key_path(*path), f"{alias!r} is not an alias of this model (aliases: {known})")
            )
            continue
        out[alias] = resolve_filters(raw, path, problems)
    return out
