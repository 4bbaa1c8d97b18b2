"""vLLM sleep mode over HTTP: ``POST /sleep?level=1``, ``POST /wake_up``, ``GET /is_sleeping``
(vLLM serves them when started with ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``).
Level 1 offloads the weights to host memory and drops the KV cache: waking skips the load."""

from __future__ import annotations

import asyncio

import aiohttp

SLEEP_TIMEOUT = 120.0
WAKE_TIMEOUT = 300.0
POLL_INTERVAL = 0.1


async def _post(session: aiohttp.ClientSession, url: str, seconds: float) -> bool:
    try:
        async with session.post(url, timeout=aiohttp.ClientTimeout(total=seconds)) as resp:
            await resp.read()
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def is_sleeping(session: aiohttp.ClientSession, base: str) -> bool | None:
    try:
        async with session.get(
            base + "/is_sleeping", timeout=aiohttp.ClientTimeout(total=5.0)
        ) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None
    value = data.get("is_sleeping") if isinstance(data, dict) else None
    return value if isinstance(value, bool) else None


async def put_to_sleep(session: aiohttp.ClientSession, base: str) -> bool:
    """True once the server says it sleeps."""
    if not await _post(session, base + "/sleep?level=1", SLEEP_TIMEOUT):
        return False
    return await is_sleeping(session, base) is True


async def wake(session: aiohttp.ClientSession, base: str, health_url: str | None) -> bool:
    """True once the server is awake and (if it has one) its health check passes."""
    if not await _post(session, base + "/wake_up", WAKE_TIMEOUT):
        return False
    try:
        async with asyncio.timeout(WAKE_TIMEOUT):
            # Polling an external process: there is no event to await.
            while True:
                if await _awake(session, base, health_url):
                    break
                await asyncio.sleep(POLL_INTERVAL)
    except TimeoutError:
        return False
    return True


async def _awake(session: aiohttp.ClientSession, base: str, health_url: str | None) -> bool:
    if await is_sleeping(session, base) is not False:
        return False
    if health_url is None:
        return True
    try:
        async with session.get(health_url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
            await resp.read()
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
