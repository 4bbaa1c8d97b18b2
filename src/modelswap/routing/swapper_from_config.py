"""The swapper a config asks for: groups or the matrix, then the budgets, then the active
profile's pins. One builder for the gateway (``runtime.py``) and the offline ``modelswap plan``,
so a prediction made without a gateway decides as the gateway would."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from modelswap.config import Config
from modelswap.routing.matrix_swapper import MatrixSwapper
from modelswap.routing.profiles import PinnedSwapper
from modelswap.routing.protocols import Swapper
from modelswap.routing.swappers import (
    BudgetSwapper,
    CombinedSwapper,
    ExclusiveSwapper,
    GroupSpec,
    GroupSwapper,
)


def build_swapper(
    config: Config,
    uses: Callable[[str], Mapping[str, int]],
    cost: Callable[[str], float],
    sleeping: Callable[[], frozenset[str]] = frozenset,
    pinned: Callable[[], frozenset[str]] = frozenset,
    explain: Callable[[str], str] | None = None,
) -> Swapper:
    """``uses``: memory per resource of a model (declared, else measured); ``cost``: what
    evicting it costs (seconds); ``sleeping``: models asleep now; ``pinned``: the active
    profile's models; ``explain``: a budget eviction's price in words (its log line)."""
    sched = config.scheduling
    groups = [
        GroupSpec(g.name, g.members, swap=g.swap, exclusive=g.exclusive, persistent=g.persistent)
        for g in sched.groups
    ]
    swapper: Swapper = GroupSwapper(groups, list(config.models)) if groups else ExclusiveSwapper()
    if sched.matrix is not None:  # llama-swap's matrix decides instead of groups
        swapper = MatrixSwapper(sched.matrix, sched.evict_costs)
    if sched.resources:
        persistent = {m for g in sched.groups if g.persistent for m in g.members}
        budget = BudgetSwapper(sched.resources, uses, cost, persistent, sleeping, explain=explain)
        # With budgets and no groups, the budgets alone decide what runs together; a
        # matrix first, then the budgets over what it leaves running.
        combine = bool(groups) or sched.matrix is not None
        swapper = CombinedSwapper(swapper, budget) if combine else budget
    return PinnedSwapper(swapper, pinned) if sched.profiles else swapper


def policy_name(config: Config) -> str:
    """Which rules decide what runs together, in words."""
    sched = config.scheduling
    parts: list[str] = []
    if sched.matrix is not None:
        parts.append("matrix")
    elif sched.groups:
        parts.append("groups")
    if sched.resources:
        parts.append("budgets")
    if not parts:
        parts.append("exclusive (one model at a time)")
    if sched.profiles:
        parts.append("profile pins")
    return " + ".join(parts)
