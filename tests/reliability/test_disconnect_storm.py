"""Scenario 4: client disconnect storms.

Streaming requests across three models (one with a concurrency limit, so some wait in its
queue), a random half of them abandoned at random points — before the answer starts, while
queued, after some chunks. Afterwards: nothing in flight, queues empty, no upstream request or
connection left open at any backend (each fake counts its own), the gateway's memory back to
its baseline within ±10 %.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import urllib.request
from dataclasses import dataclass

import aiohttp
import psutil
import pytest
from tests.e2e.conftest import fake_cmd
from tests.reliability.conftest import Launched, LaunchFn, Report, free_port_range, log_problems

pytestmark = pytest.mark.reliability
# The ceiling for settling: the gateway's pool closes idle connections after 15-30 s; this only
# ends a hang, so it is a few times that, loaded machine or not.
SETTLE = 150.0

MODELS = ("a", "b", "c")
TOKENS = 20
CONCURRENCY = 50


def models_yaml() -> str:
    cmd = fake_cmd("--count-connections", "--tokens", str(TOKENS), "--tps", "100")
    return (
        f"  a:\n    cmd: {cmd}\n"
        f"  b:\n    cmd: {cmd}\n"
        f"  c:\n    cmd: {cmd}\n    concurrencyLimit: 8\n"
    )


GROUPS = "groups:\n  all:\n    members: [a, b, c]\n    swap: false\n"


@dataclass
class Plan:
    model: str
    cancel_after: int | None  # data events read before hanging up; -1: before the answer
    delay: float  # for -1: seconds after sending


async def one(session: aiohttp.ClientSession, gw: Launched, plan: Plan) -> str:
    body = {
        "model": plan.model,
        "stream": True,
        "messages": [{"role": "user", "content": "hello"}],
    }

    async def run() -> str:
        async with session.post(gw.url("/v1/chat/completions"), json=body) as resp:
            assert resp.status == 200, await resp.text()
            events = 0
            tokens = 0
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                events += 1
                if plan.cancel_after is not None and events > plan.cancel_after:
                    resp.close()  # hang up mid-stream
                    return "cancelled mid-stream"
                payload = line[6:]
                if payload == b"[DONE]":
                    assert tokens == TOKENS, tokens
                    return "complete"
                for choice in json.loads(payload)["choices"]:
                    if choice["delta"].get("content"):
                        tokens += 1
            raise AssertionError(f"stream ended early after {tokens} tokens")

    if plan.cancel_after == -1:
        task = asyncio.ensure_future(run())
        done, _ = await asyncio.wait({task}, timeout=plan.delay)
        if task in done:
            return task.result()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return "cancelled early"
        return task.result()
    return await run()


def plans(count: int, rng: random.Random) -> list[Plan]:
    cancel = [True] * (count // 2) + [False] * (count - count // 2)
    rng.shuffle(cancel)
    out = []
    for gone in cancel:
        model = rng.choice(MODELS)
        if not gone:
            out.append(Plan(model, None, 0.0))
        elif rng.random() < 0.3:
            out.append(Plan(model, -1, rng.uniform(0.0, 0.3)))
        else:
            out.append(Plan(model, rng.randint(0, TOKENS), 0.0))
    return out


async def storm(gw: Launched, todo: list[Plan]) -> dict[str, int]:
    outcomes: dict[str, int] = {}
    limit = asyncio.Semaphore(CONCURRENCY)
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def bounded(plan: Plan) -> None:
            async with limit:
                result = await one(session, gw, plan)
            if plan.cancel_after is None:
                assert result == "complete", (plan, result)
            outcomes[result] = outcomes.get(result, 0) + 1

        await asyncio.gather(*(bounded(plan) for plan in todo))
    return outcomes


def backend_state(port: int) -> tuple[int, int]:
    """(open connections, requests in flight) as the fake backend on ``port`` counts them."""
    base = f"http://127.0.0.1:{port}"
    with urllib.request.urlopen(base + "/connections", timeout=5) as resp:
        opened = int(json.loads(resp.read())["open"])
    with urllib.request.urlopen(base + "/stats", timeout=5) as resp:
        in_flight = int(json.loads(resp.read())["in_flight"])
    return opened, in_flight


async def settle(
    gw: Launched, ports: list[int], within: float, *, connections: bool = True
) -> dict[str, object]:
    """Poll until the gateway has nothing in flight or queued and no backend has a request (nor,
    with ``connections``, a connection) open; fail with the last observation after ``within``
    seconds. (Answers that ended normally leave their connection in the gateway's pool, which
    closes it after 15-30 s idle.)"""
    deadline = time.monotonic() + within
    while True:
        rows = await asyncio.to_thread(gw.running)
        busy = {m: (r["in_flight"], r["queued"]) for m, r in rows.items()}
        backends = [await asyncio.to_thread(backend_state, port) for port in ports]
        seen: dict[str, object] = {"gateway": busy, "backends": backends}
        open_ok = all(b[0] == 0 for b in backends) or not connections
        if all(v == (0, 0) for v in busy.values()) and all(b[1] == 0 for b in backends) and open_ok:
            return seen
        if time.monotonic() > deadline:
            raise AssertionError(f"still busy after {within} s: {seen}")
        await asyncio.sleep(0.25)


def rss(gw: Launched) -> int:
    return int(psutil.Process(gw.proc.pid).memory_info().rss)


@pytest.mark.reliability_long
@pytest.mark.timeout(900)
async def test_disconnect_storm_leaves_nothing_open(launch: LaunchFn, report: Report) -> None:
    first = free_port_range(3)
    ports = [first, first + 1, first + 2]
    gw = launch(models_yaml(), extra_top=GROUPS, start_port=first)
    for model in MODELS:
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    rng = random.Random(20261130)

    await storm(gw, plans(150, rng))  # warm-up: the allocator's and caches' steady state
    await settle(gw, ports, within=SETTLE, connections=False)
    baseline = rss(gw)

    started = time.monotonic()
    todo = plans(500, rng)
    outcomes = await storm(gw, todo)
    storm_seconds = time.monotonic() - started
    assert sum(outcomes.values()) == 500
    assert outcomes.get("complete", 0) >= 250, outcomes

    settle_started = time.monotonic()
    seen = await settle(gw, ports, within=SETTLE)
    settled = time.monotonic() - settle_started
    after = rss(gw)
    assert abs(after - baseline) <= 0.10 * baseline, (baseline, after)
    for model in MODELS:
        assert await asyncio.to_thread(gw.metric, "modelswap_in_flight", model=model) == 0
        assert await asyncio.to_thread(gw.metric, "modelswap_queue_depth", model=model) == 0
    assert not log_problems(gw.log()), log_problems(gw.log())[:20]
    report(
        requests=len(todo),
        outcomes=outcomes,
        storm_s=round(storm_seconds, 1),
        settled_after_s=round(settled, 1),
        final=seen,
        rss_baseline_mib=round(baseline / 2**20, 1),
        rss_after_mib=round(after / 2**20, 1),
        rss_change_pct=round((after - baseline) / baseline * 100, 1),
        gateway_499=await asyncio.to_thread(gw.metric, "modelswap_requests_total", status="499"),
    )
