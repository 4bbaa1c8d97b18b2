"""Who a request is for, as the scheduler and the quota ledger see it: a client key's name, its
priority class, its weight and its quota (``apiKeys[]``, ``keyDefaults``; docs/sharing.md).

The name identifies the client everywhere (queues, accounting, logs); the secret never comes
here.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelswap.config.resolved import PRIORITY_CLASSES, ApiKey, KeyDefaults, Quota

ANONYMOUS_NAME = "anonymous"
_NO_QUOTA = Quota()
_RANKS = {name: rank for rank, name in enumerate(PRIORITY_CLASSES)}


@dataclass(frozen=True, slots=True)
class Client:
    """One client of the gateway. ``rank``: 0 is served first (interactive), then 1 (batch)."""

    name: str = ANONYMOUS_NAME
    priority: str = "interactive"
    weight: float = 1.0
    quota: Quota = _NO_QUOTA

    @property
    def rank(self) -> int:
        return _RANKS.get(self.priority, 0)


ANONYMOUS = Client()


def client_for(key: ApiKey | None, defaults: KeyDefaults) -> Client:
    """The client a request is for: its key's, or (no keys configured) the anonymous
    client's, which has ``keyDefaults``."""
    if key is None:
        return Client(ANONYMOUS_NAME, defaults.priority, defaults.weight, defaults.quota)
    return Client(key.name, key.priority, key.weight, key.quota)
