"""A circuit breaker per peer: pure and synchronous (the caller passes the time).

closed    every request goes through; ``failures`` consecutive failures open it.
open      requests fail fast (or go to their fallback) until ``cooldown`` has passed.
half_open one probe request goes through; its success closes the breaker, its failure opens
          it again for another cooldown. Others fail fast while the probe is out.
"""

from __future__ import annotations

from typing import Literal

BreakerState = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(self, failures: int, cooldown: float) -> None:
        self.threshold = failures
        self.cooldown = cooldown
        self.state: BreakerState = "closed"
        self.consecutive_failures = 0
        self._opened_at = 0.0
        self._probe_out = False

    def admit(self, now: float) -> bool:
        """Whether a request may go to the peer now. In half_open, admits the single probe."""
        if self.state == "closed":
            return True
        if self.state == "open":
            if now - self._opened_at < self.cooldown:
                return False
            self.state = "half_open"
        if self._probe_out:
            return False
        self._probe_out = True
        return True

    def success(self) -> None:
        self.state = "closed"
        self.consecutive_failures = 0
        self._probe_out = False

    def failure(self, now: float) -> None:
        self.consecutive_failures += 1
        if self.state == "half_open" or self.consecutive_failures >= self.threshold:
            self.state = "open"
            self._opened_at = now
        self._probe_out = False

    def abandon(self) -> None:
        """An admitted request ended without a verdict (the client left): a probe slot it held
        is given back, so the next request probes instead."""
        self._probe_out = False

    def retry_in(self, now: float) -> float:
        """Seconds until the next probe may go (0 unless open)."""
        if self.state != "open":
            return 0.0
        return max(0.0, self.cooldown - (now - self._opened_at))
