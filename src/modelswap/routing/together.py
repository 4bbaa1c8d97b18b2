"""Co-residency, generated: which models can run side by side, and which evict which (issue 39).

Pure. A set of models runs side by side when starting any member, with the others running,
evicts nothing — asked of the swapper the scheduler uses (groups, matrix, budgets over the
measured or estimated memory), so the sets are the ones it honours. The sets are closed under
subsets (fewer models never evict more), so a depth-first search grows them one model at a
time and keeps the maximal ones. :func:`as_yaml` prints them as llama-swap's ``groups`` (when
they partition the models) or ``matrix`` (otherwise), for users who want to pin them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from modelswap.routing.protocols import Swapper

# Each set tried is one swapper call per member: past this many calls the search stops and
# says so (a config of a few dozen models that all fit together would otherwise explode).
MAX_CALLS = 200_000
_MATRIX_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class Coresidency:
    models: tuple[str, ...]
    sets: tuple[tuple[str, ...], ...]  # maximal sets that run side by side, in config order
    evicts: Mapping[str, Mapping[str, str]]  # model -> {other running alone: why it stops}
    truncated: bool = False

    @property
    def partition(self) -> bool:
        """Every model in exactly one set (llama-swap's groups can say it)."""
        seen = [m for s in self.sets for m in s]
        return len(seen) == len(set(seen))

    def as_dict(self) -> dict[str, object]:
        return {
            "sets": [list(s) for s in self.sets],
            "evicts": {m: dict(o) for m, o in self.evicts.items()},
            "truncated": self.truncated,
        }


def together(models: Sequence[str], swapper: Swapper, max_calls: int = MAX_CALLS) -> Coresidency:
    """The maximal sets of ``models`` that ``swapper`` lets run side by side, and for each
    model what starting it evicts when one other model runs."""
    order = list(dict.fromkeys(models))
    calls = 0
    truncated = False

    def side_by_side(members: list[str]) -> bool:
        nonlocal calls, truncated
        for model in members:
            calls += 1
            others = frozenset(m for m in members if m != model)
            eviction = swapper.eviction_for(model, others, frozenset())
            if eviction is None or eviction.models:
                return False
        return True

    found: list[tuple[str, ...]] = []

    def grow(current: list[str], start: int) -> None:
        nonlocal truncated
        extended = False
        for index in range(start, len(order)):
            if calls >= max_calls:
                truncated = True
                break
            candidate = [*current, order[index]]
            if side_by_side(candidate):
                extended = True
                grow(candidate, index + 1)
        if not extended and current:
            found.append(tuple(current))

    grow([], 0)
    maximal = [s for s in found if not any(set(s) < set(other) for other in found)]
    sets = tuple(dict.fromkeys(maximal))
    evicts: dict[str, dict[str, str]] = {}
    for model in order:
        for other in order:
            if other == model:
                continue
            eviction = swapper.eviction_for(model, frozenset({other}), frozenset())
            if eviction is None:
                evicts.setdefault(model, {})[other] = "cannot start even with it stopped"
            elif other in eviction.models:
                why = eviction.why.get(other, eviction.reason)
                evicts.setdefault(model, {})[other] = why
    return Coresidency(tuple(order), sets, evicts, truncated)


def as_yaml(result: Coresidency, *, form: str | None = None) -> str:
    """The sets as llama-swap YAML: ``groups`` when they partition the models (``form`` None or
    "groups"), else ``matrix``. Refuses groups for sets that overlap (ValueError)."""
    use = form or ("groups" if result.partition else "matrix")
    if use == "groups":
        if not result.partition:
            raise ValueError("the sets overlap: only a matrix can say it (--as matrix)")
        lines = ["groups:"]
        for index, members in enumerate(result.sets, 1):
            lines += [
                f"  together-{index}:",
                "    swap: false  # its members run side by side",
                "    exclusive: true  # starting one stops the other groups",
                f"    members: [{', '.join(_quoted(m) for m in members)}]",
            ]
        return "\n".join(lines) + "\n"
    names = _var_names(result.models)
    lines = ["matrix:", "  vars:"]
    lines += [f"    {names[m]}: {_quoted(m)}" for m in result.models]
    lines.append("  sets:")
    for index, members in enumerate(result.sets, 1):
        lines.append(f"    together-{index}: {_quoted(' & '.join(names[m] for m in members))}")
    return "\n".join(lines) + "\n"


def _var_names(models: Sequence[str]) -> dict[str, str]:
    """A matrix var per model: its id where the matrix language can spell it, else m1, m2 …"""
    names: dict[str, str] = {}
    taken: set[str] = set()
    for index, model in enumerate(models, 1):
        name = model if _MATRIX_NAME.fullmatch(model) and model not in taken else f"m{index}"
        while name in taken:
            name += "_"
        names[model] = name
        taken.add(name)
    return names


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
