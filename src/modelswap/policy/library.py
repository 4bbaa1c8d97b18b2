"""What a configuration compiles to: the named policies, and the checks that need them all.

A program may ``apply`` only a policy that exists, may not write the protected ``model``
(anywhere under it: ``model``, ``body.model``, ``model.x``), and the policies may not apply
one another in a cycle (``a -> b -> a``): each is refused when the configuration loads.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from modelswap.policy.nodes import Action, Program
from modelswap.policy.program_errors import PolicyError

PROTECTED = ("model",)
"""Body keys no program may set or remove (the routing key)."""

POLICY_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")
"""What a policy's name may be: what ``apply <name>`` can spell."""


def check(program: Program, known: Iterable[str]) -> list[PolicyError]:
    """Every ``apply`` of a policy not in ``known``, every write of a protected key."""
    names = frozenset(known)
    problems: list[PolicyError] = []
    for clause in program.clauses:
        if clause.action is Action.APPLY:
            if clause.policy not in names:
                problems.append(
                    PolicyError(
                        clause.line,
                        clause.col,
                        f'apply references unknown policy "{clause.policy}"',
                    )
                )
        elif clause.path is not None and clause.path.first_key in PROTECTED:
            verb = "remove" if clause.action is Action.REMOVE else "set"
            problems.append(
                PolicyError(
                    clause.path.line,
                    clause.path.col,
                    f'cannot {verb} protected parameter "{clause.path.first_key}"',
                )
            )
    return problems


def find_cycle(policies: Mapping[str, Program]) -> list[str] | None:
    """The first ``apply`` cycle, depth first in name order, as ``[a, b, a]``; or None.
    Names a policy applies that do not exist are skipped (:func:`check` reports them)."""
    done: set[str] = set()
    for start in sorted(policies):
        if start in done:
            continue
        # An explicit stack (policy, index of its next apply): no recursion, however deep.
        stack: list[tuple[str, int]] = [(start, 0)]
        on_path = {start}
        while stack:
            name, index = stack[-1]
            applies = policies[name].applies
            if index == len(applies):
                stack.pop()
                on_path.discard(name)
                done.add(name)
                continue
            stack[-1] = (name, index + 1)
            following = applies[index]
            if following in on_path:
                names = [entry for entry, _ in stack]
                return [*names[names.index(following) :], following]
            if following in policies and following not in done:
                stack.append((following, 0))
                on_path.add(following)
    return None


@dataclass(frozen=True, slots=True)
class PolicySet:
    """The compiled programs of one configuration: ``policies`` (what ``apply`` finds),
    ``hooks.on_request`` (every JSON request), and each model's and peer's
    ``filters.policy`` by id. A program left blank is absent."""

    library: Mapping[str, Program] = field(default_factory=lambda: MappingProxyType({}))
    on_request: Program | None = None
    models: Mapping[str, Program] = field(default_factory=lambda: MappingProxyType({}))
    peers: Mapping[str, Program] = field(default_factory=lambda: MappingProxyType({}))

    def programs_for(self, *, model: str | None = None, peer: str | None = None) -> list[Program]:
        """What runs, in order, for a request to ``model`` (a local model's id) or ``peer``
        (a peer's id): the hook, then that model's or peer's own policy."""
        own = self.models.get(model) if model is not None else None
        if own is None and peer is not None:
            own = self.peers.get(peer)
        return [p for p in (self.on_request, own) if p is not None and p.clauses]
