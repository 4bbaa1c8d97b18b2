"""Readiness polling: fast at first (a swap should cost the backend's start time, not ours)."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp

FIRST_INTERVAL = 0.02
MAX_INTERVAL = 0.25
BACKOFF = 1.5
PROBE_TIMEOUT = 2.0


def intervals() -> Iterator[float]:
    """20 ms, 30 ms, 45 ms … capped at 250 ms."""
    interval = FIRST_INTERVAL
    while True:
        yield interval
        interval = min(interval * BACKOFF, MAX_INTERVAL)


async def is_healthy(session: aiohttp.ClientSession, url: str) -> bool:
    """True on a 2xx answer. Refused connections and 503 "Loading model" mean: not yet."""
    try:
        async with session.get(
            url, timeout=aiohttp.ClientTimeout(total=PROBE_TIMEOUT), allow_redirects=False
        ) as response:
            await response.read()
            return 200 <= response.status < 300
    except (TimeoutError, aiohttp.ClientError, OSError):
        return False
