"""llama-swap's swap matrix, the solver: another swapper (same contract as ``swappers.py``).

Pure. :class:`MatrixSwapper` starts a target inside the alternative (``config/matrix.py``)
that costs least to reach from the running set: the sum of ``evict_costs`` (default 1) of the
running models it leaves out; ties go to the alternative that evicts fewer busy models, then to
the earliest one. A model in no alternative runs alone (everything else is evicted), as an
ungrouped model does.
"""

from __future__ import annotations

from collections.abc import Mapping, Set

from modelswap.config.matrix import Alternatives
from modelswap.routing.protocols import Eviction


class MatrixSwapper:
    """The least-cost alternative holding the target (module docstring)."""

    def __init__(self, alternatives: Alternatives, evict_costs: Mapping[str, float]) -> None:
        self._alternatives = alternatives
        self._costs = evict_costs

    def cost(self, model: str) -> float:
        return self._costs.get(model, 1.0)

    def eviction_for(self, target: str, running: Set[str], busy: Set[str]) -> Eviction | None:
        others = frozenset(m for m in running if m != target)
        options = [alt for alt in self._alternatives if target in alt]
        if not options:
            reason = f"start {target} (in no matrix set: it runs alone)"
            return Eviction(
                others,
                reason + (f"; evict {', '.join(sorted(others))}" if others else ""),
                dict.fromkeys(others, f"matrix: {target} is in no set"),
            )

        def score(alt: frozenset[str]) -> tuple[float, int]:
            out = others - alt
            return (sum(self.cost(m) for m in out), len(out & busy))

        best = min(options, key=score)  # min keeps the earliest of equal scores
        evict = others - best
        reason = f"start {target} in matrix set {{{', '.join(sorted(best))}}}"
        if evict:
            reason += f"; evict {', '.join(sorted(evict))} (cost {score(best)[0]:g})"
        where = f"matrix: not in set {{{', '.join(sorted(best))}}}"
        return Eviction(evict, reason, dict.fromkeys(evict, where))
