"""Whether a swap's start may begin before what it evicts has stopped (issue 38, part 3).

A model evicted from ready first has its backend save its prompt cache (``POST /slots``), which
holds every byte of its memory until it is done and the process ends. When the memory budgets
show that the target fits beside everything that holds memory now — the models being evicted
included — the target's spawn begins at once, while they save and stop; otherwise the swap
keeps its order (stop, then start), since the eviction may be what makes room.

Not safe, so not done: without budgets (``scheduling.resources``) nothing says the two fit; a
model whose use of every budget is unknown (declared nowhere, never measured) might need all
of it; two models that share a ``proxy`` address would fight for its port. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set


def start_may_overlap(
    target: str,
    evict: Set[str],
    holding: Set[str],
    budgets: Mapping[str, int],
    uses: Callable[[str], Mapping[str, int]],
    proxies: Callable[[str], str],
) -> bool:
    """``holding``: every model whose backend holds memory now (running, starting, stopping,
    asleep), the evicted ones included; ``uses``: a model's bytes per budgeted resource (what
    it declares, else what was measured); ``proxies``: a model's address."""
    if not budgets or not evict:
        return False
    if any(not any(uses(m).values()) for m in {target, *evict}):
        return False
    if proxies(target) in {proxies(m) for m in evict}:
        return False
    together = {*holding, *evict, target}
    return all(
        sum(uses(m).get(resource, 0) for m in together) <= budget
        for resource, budget in budgets.items()
    )
