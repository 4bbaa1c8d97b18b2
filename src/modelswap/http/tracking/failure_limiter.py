"""Throttling failed authentication: slower 401s, never a locked-out key.

A failed attempt (a presented key that matches none) is answered 401 after a wait that grows
with the recent failures of the client's network (an IPv4 address, an IPv6 /64:
:mod:`modelswap.http.tracking.clients`), and with the recent failures of everyone, so that a
guesser
spread over many addresses is slowed too. A valid key is never throttled, whatever its network
did: one person behind a shared proxy or NAT cannot lock the others out.

Each throttling episode is logged when it begins and when it ends, with counts — never per
request, and never with the keys that were tried. Memory is bounded: MAX_NETWORKS networks
(the longest quiet forgotten first) and one counter per second of the window.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from modelswap.http.tracking.clients import client_network

log = logging.getLogger(__name__)

FAILURE_WINDOW = 60.0  # seconds a failure counts
NETWORK_FREE = 10  # failures of one network within the window answered without a wait
GLOBAL_FREE = 50  # failures of all networks within the window before every failure waits
FIRST_DELAY = 0.25  # the first wait; it doubles with each further failure of the network,
GLOBAL_DOUBLING = 10  # and with every 10 further failures of everyone
MAX_DELAY = 5.0
MAX_NETWORKS = 10_000
_TRACKED = NETWORK_FREE + 8  # failures kept per network: past these the wait is at its cap


def failure_wait(over: int, per_doubling: int = 1) -> float:
    """The wait for a failure ``over`` the free ones (0 within them), capped at MAX_DELAY."""
    if over <= 0:
        return 0.0
    doublings = min((over - 1) / per_doubling, 32.0)  # past the cap long before; no overflow
    return min(MAX_DELAY, FIRST_DELAY * 2**doublings)


def _prune(times: deque[float], now: float) -> None:
    while times and now - times[0] > FAILURE_WINDOW:
        times.popleft()


@dataclass(slots=True)
class _Episode:
    started: float
    failures: int
    last: float

    def add(self, now: float) -> None:
        self.failures += 1
        self.last = now


@dataclass(slots=True)
class _Network:
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=_TRACKED))
    episode: _Episode | None = None


class FailureLimiter:
    """Counts failed attempts per client network and for everyone; :meth:`failed` says how long
    the answer to one should wait. ``clock`` and ``sleep`` are injectable for tests."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._clock = clock
        self.sleep = sleep
        self._networks: OrderedDict[str, _Network] = OrderedDict()  # least recently failed first
        self._seconds: deque[list[int]] = deque()  # [second, failures], oldest first
        self._everyone = 0  # failures within the window, all networks
        self._global: _Episode | None = None

    @property
    def remembered_networks(self) -> int:
        return len(self._networks)

    def failed(self, address: str | None) -> float:
        """Record a failed attempt from ``address``; the seconds its 401 should wait."""
        now = self._clock()
        self._forget(now)
        name = client_network(address)
        network = self._networks.get(name)
        if network is None:
            network = self._networks[name] = _Network()
            if len(self._networks) > MAX_NETWORKS:  # an address spray: drop the quietest
                self._ended(*self._networks.popitem(last=False))
        else:
            self._networks.move_to_end(name)
        _prune(network.recent, now)
        network.recent.append(now)
        own = len(network.recent)
        everyone = self._count(now)
        own_wait = failure_wait(own - NETWORK_FREE)
        everyone_wait = failure_wait(everyone - GLOBAL_FREE, GLOBAL_DOUBLING)
        self._network_episode(name, network, own, own_wait, now)
        self._global_episode(everyone, everyone_wait, now)
        return max(own_wait, everyone_wait)

    def _forget(self, now: float) -> None:
        """Drop failures older than the window; a network left with none ends its episode."""
        while self._networks:
            name, network = next(iter(self._networks.items()))
            _prune(network.recent, now)
            if network.recent:
                break
            del self._networks[name]
            self._ended(name, network)
        while self._seconds and now - self._seconds[0][0] > FAILURE_WINDOW:
            self._everyone -= self._seconds.popleft()[1]

    def _count(self, now: float) -> int:
        second = int(now)
        if self._seconds and self._seconds[-1][0] == second:
            self._seconds[-1][1] += 1
        else:
            self._seconds.append([second, 1])
        self._everyone += 1
        return self._everyone

    def _network_episode(
        self, name: str, network: _Network, count: int, wait: float, now: float
    ) -> None:
        if network.episode is not None:
            network.episode.add(now)
        elif wait > 0:
            network.episode = _Episode(network.recent[0], count, now)
            log.warning(
                "authentication: %d failed attempts from %s within %.0f s; its failed attempts "
                "now wait before their 401 (up to %.0f s; valid keys are not slowed)",
                count,
                name,
                FAILURE_WINDOW,
                MAX_DELAY,
            )

    def _ended(self, name: str, network: _Network) -> None:
        episode = network.episode
        if episode is not None:
            log.info(
                "authentication: no failed attempt from %s for %.0f s; its episode had %d "
                "over %.0f s",
                name,
                FAILURE_WINDOW,
                episode.failures,
                episode.last - episode.started,
            )

    def _global_episode(self, count: int, wait: float, now: float) -> None:
        if self._global is None and wait > 0:
            self._global = _Episode(now, count, now)
            log.warning(
                "authentication: %d failed attempts from %d networks within %.0f s; every "
                "failed attempt now waits before its 401 (up to %.0f s; valid keys are not "
                "slowed)",
                count,
                len(self._networks),
                FAILURE_WINDOW,
                MAX_DELAY,
            )
        elif self._global is not None and wait > 0:
            self._global.add(now)
        elif self._global is not None:
            log.info(
                "authentication: failed attempts are back under %d per %.0f s; the episode had "
                "%d over %.0f s",
                GLOBAL_FREE,
                FAILURE_WINDOW,
                self._global.failures,
                self._global.last - self._global.started,
            )
            self._global = None
