"""Why a model was last stopped (issue 32 #2), kept on its ManagedProcess as ``last_stop``.

A process does not know why it is told to stop: the owner that decides (the router: an eviction
for another model's start, the idle TTL, an unload) writes the record, and for an eviction adds
how the start it made room for went, once that is known. The catalog lists it on a stopped (or
sleeping) model's row; the web UI shows it on the card and page; the model's log ends with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

EVICTED = "evicted"
IDLE = "idle"
UNLOADED = "unloaded"


@dataclass(frozen=True, slots=True)
class StopRecord:
    """``reason``: evicted, idle or unloaded; ``at``: when it stopped (epoch seconds);
    ``detail``: the reason in words. An eviction names ``target`` (the model it made room for)
    and, once its start has ended, ``outcome`` ("started" or "failed") and the failure's
    ``code``; while that start runs, ``outcome`` is None."""

    reason: str
    at: float
    detail: str
    target: str | None = None
    outcome: str | None = None
    code: str | None = None

    def summary(self) -> str:
        """``evicted to start b at 18:04 (b then failed: utilization_guard)`` (local time)."""
        text = f"{self.detail} at {time.strftime('%H:%M', time.localtime(self.at))}"
        if self.target is None:
            return text
        if self.outcome is None:
            return f"{text} ({self.target} starting)"
        if self.outcome == "started":
            return f"{text} ({self.target} then started)"
        return f"{text} ({self.target} then failed: {self.code or 'error'})"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reason": self.reason,
            "at": round(self.at, 3),
            "detail": self.detail,
        }
        for key in ("target", "outcome", "code"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        out["summary"] = self.summary()
        return out


def evicted(target: str, at: float | None = None) -> StopRecord:
    """Stopped (or put to sleep) to make room for ``target``'s start; ``at``: when that swap
    began (the time its own record says), else now."""
    when = time.time() if at is None else at
    return StopRecord(EVICTED, when, f"evicted to start {target}", target)
