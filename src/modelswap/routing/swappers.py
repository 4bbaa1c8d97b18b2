"""Eviction policies: pure functions from "target + running set" to "what must stop, and why".

``GroupSwapper`` follows llama-swap's groups; ``BudgetSwapper`` keeps the running set within
every memory budget, evicting the cheapest first. ``combine`` applies both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence, Set

from modelswap.routing.protocols import Eviction, Swapper

DEFAULT_GROUP = "(ungrouped)"


def _fmt(size: int) -> str:
    return f"{size / 1024**3:.1f} GiB" if size >= 1024**3 else f"{size / 1024**2:.0f} MiB"


class ExclusiveSwapper:
    """One model at a time: starting any model evicts every other running model."""

    def eviction_for(self, target: str, running: Set[str], busy: Set[str]) -> Eviction:
        others = frozenset(m for m in running if m != target)
        reason = f"start {target}" + (f"; evict {', '.join(sorted(others))}" if others else "")
        return Eviction(others, reason, dict.fromkeys(others, "exclusive: one model at a time"))


class GroupSpec:
    """One group's rules (a plain value object so this module needs no config import)."""

    def __init__(
        self,
        name: str,
        members: Sequence[str],
        *,
        swap: bool = True,
        exclusive: bool = True,
        persistent: bool = False,
    ) -> None:
        self.name = name
        self.members = tuple(members)
        self.swap = swap
        self.exclusive = exclusive
        self.persistent = persistent


class GroupSwapper:
    """llama-swap groups. A model in no group is in an implicit exclusive, swapping group of
    its own kind (it runs alone). A model may be in several groups: every group's rule applies,
    and it is protected from other groups if any of its groups is persistent."""

    def __init__(self, groups: Sequence[GroupSpec], models: Sequence[str]) -> None:
        grouped = {m for g in groups for m in g.members}
        loose = [m for m in models if m not in grouped]
        self._groups = [*groups, *(GroupSpec(DEFAULT_GROUP, [m]) for m in loose)]
        self._of: dict[str, list[GroupSpec]] = {}
        for group in self._groups:
            for member in group.members:
                self._of.setdefault(member, []).append(group)

    def _persistent(self, model: str) -> bool:
        return any(g.persistent for g in self._of.get(model, []))

    def eviction_for(self, target: str, running: Set[str], busy: Set[str]) -> Eviction | None:
        mine = self._of.get(target, [])
        evict: set[str] = set()
        why: list[str] = []
        each: dict[str, str] = {}
        for group in mine:
            if group.swap:
                peers = {m for m in running if m in group.members and m != target}
                if peers:
                    evict |= peers
                    why.append(f"{', '.join(sorted(peers))} (same group {group.name})")
                    for m in peers:
                        each.setdefault(m, f"group {group.name}: its members swap")
            if group.exclusive:
                own = {m for g in mine for m in g.members}
                others = {
                    m for m in running if m not in own and m != target and not self._persistent(m)
                }
                if others:
                    evict |= others
                    why.append(f"{', '.join(sorted(others))} (group {group.name} is exclusive)")
                    for m in others:
                        each.setdefault(m, f"group {group.name} is exclusive")
        reason = f"start {target}" + (f"; evict {'; '.join(why)}" if why else "")
        return Eviction(frozenset(evict), reason, each)


class BudgetSwapper:
    """Keeps the running set within every budget. Evicts idle models before busy ones, and
    among those the cheapest first: cost = median start time × evictCost, plus the prefill its
    slots would redo (routing/prefill.py; the runtime's ``cost``). Persistent models are never
    evicted. None when the target cannot fit whatever is evicted.

    Sleeping models (vLLM sleep mode) are not running but still hold their host memory
    (``host_resource``, "ram"): they count against that budget only, and may be evicted —
    stopped for good — like idle models."""

    def __init__(
        self,
        budgets: Mapping[str, int],
        uses: Callable[[str], Mapping[str, int]],
        cost: Callable[[str], float],
        persistent: Set[str] = frozenset(),
        sleeping: Callable[[], Set[str]] = frozenset,
        host_resource: str = "ram",
        explain: Callable[[str], str] | None = None,
    ) -> None:
        self._budgets = budgets
        self._uses = uses
        self._cost = cost
        self._persistent = persistent
        self._sleeping = sleeping
        self._host = host_resource
        self._explain = explain  # a model's cost in words (start + prefill to redo)

    def _over(self, awake: Set[str], asleep: Set[str], target: str) -> dict[str, int]:
        """Budgets exceeded with ``target`` started, and by how many bytes."""
        over: dict[str, int] = {}
        for resource, budget in self._budgets.items():
            total = self._uses(target).get(resource, 0)
            total += sum(self._uses(m).get(resource, 0) for m in awake)
            if resource == self._host:
                total += sum(self._uses(m).get(resource, 0) for m in asleep)
            if total > budget:
                over[resource] = total - budget
        return over

    def eviction_for(self, target: str, running: Set[str], busy: Set[str]) -> Eviction | None:
        awake = set(running) - {target}
        asleep = set(self._sleeping()) - set(running) - {target}
        if not self._over(awake, asleep, target):
            return Eviction(frozenset(), f"start {target} (fits the budgets)")
        candidates = sorted(
            (m for m in awake | asleep if m not in self._persistent),
            key=lambda m: (m in busy, self._cost(m), m),
        )
        evicted: list[str] = []
        for model in candidates:
            over = self._over(awake, asleep, target)
            if not over:
                break
            # Only evict what helps: a model holding none of an exceeded resource stays.
            holds = [r for r in over if self._uses(model).get(r, 0)]
            if model in asleep:
                holds = [r for r in holds if r == self._host]
            if not holds:
                continue
            awake.discard(model)
            asleep.discard(model)
            evicted.append(model)
        if self._over(awake, asleep, target):
            return None
        parts = []
        each: dict[str, str] = {}
        for model in evicted:
            state = "busy" if model in busy else ("asleep" if model not in running else "idle")
            how = f": {self._explain(model)}" if self._explain is not None else ""
            parts.append(f"{model} ({state}, cost {self._cost(model):.1f} s{how})")
            held = [r for r in self._budgets if self._uses(model).get(r, 0)]
            each[model] = f"budget {', '.join(held)}: {state}, cost {self._cost(model):.1f} s"
        budgets = ", ".join(f"{r} {_fmt(b)}" for r, b in self._budgets.items())
        reason = f"evict {', '.join(parts)} to fit {target} within {budgets}"
        return Eviction(frozenset(evicted), reason, each)


class CombinedSwapper:
    """Groups first, then budgets over what the groups leave running."""

    def __init__(self, first: Swapper, then: Swapper) -> None:
        self._first = first
        self._then = then

    def eviction_for(self, target: str, running: Set[str], busy: Set[str]) -> Eviction | None:
        a = self._first.eviction_for(target, running, busy)
        if a is None:
            return None
        b = self._then.eviction_for(target, frozenset(running) - a.models, busy)
        if b is None:
            return None
        if not b.models:
            return a
        if not a.models:
            return b
        return Eviction(a.models | b.models, f"{a.reason}; {b.reason}", {**b.why, **a.why})
