"""Scenario 5: mixed load with swaps — 1,000 requests, concurrency 32, four models under a memory
budget that fits two.

The load comes in phases, each over a pair of models (streaming and non-streaming requests,
random order, 32 at a time). Every request carries its own ``X-Request-Id``, which the fake
echoes as the completion's ``id``: every answer must be complete, for the right model and the
right request, seen once, with no 5xx. The number of backend starts must be what the pure
scheduler (the same ``Scheduler`` and ``BudgetSwapper`` the gateway runs, driven by a recording
``Effects``) predicts for the same arrivals.

A phase change is made deterministic the way a careful operator would: first a long request
to each pair member already running (so it is busy, and a swap evicts the idle model that
left the pair, never a member), then one request per member that must start.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import Counter
from dataclasses import dataclass

import aiohttp
import pytest
from tests.e2e.conftest import HANG, fake_cmd
from tests.fakes.effects import Admission, RecordingEffects
from tests.reliability.conftest import Launched, LaunchFn, Report, log_problems

from modelswap.routing.scheduler import Scheduler
from modelswap.routing.swappers import BudgetSwapper

pytestmark = pytest.mark.reliability

MODELS = ("m1", "m2", "m3", "m4")
TOTAL = 1000
PHASES = 8
CONCURRENCY = 32
GIB = 1024**3
# A hold streams for 2 s (at the fake's 200 tokens/s): it must outlast the moment the phase's
# openers reach the gateway, which on a loaded machine can be a good part of a second later.
HOLD_TOKENS = 400


def config() -> tuple[str, str]:
    models = "".join(
        f"  {m}:\n    cmd: {fake_cmd('--echo-id', '--model', m, '--tps', '200')}\n"
        "    uses: {ram: 1GiB}\n"
        for m in MODELS
    )
    return models, "resources: {ram: 2GiB}\n"


def phase_pairs(rng: random.Random) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    while len(pairs) < PHASES:
        pair = tuple(sorted(rng.sample(MODELS, 2)))
        if not pairs or pair != pairs[-1]:
            pairs.append((pair[0], pair[1]))
    return pairs


def predicted_starts(pairs: list[tuple[str, str]], sizes: list[int]) -> Counter[str]:
    """Drive the pure scheduler through the same arrivals, every swap and answer completing at
    once, and count the starts it orders."""
    effects = RecordingEffects()
    swapper = BudgetSwapper({"ram": 2 * GIB}, lambda m: {"ram": GIB}, lambda m: 1.0)
    scheduler = Scheduler(swapper, effects)
    n = 0

    def arrive(model: str) -> Admission:
        nonlocal n
        n += 1
        adm = Admission(model, f"r{n}", arrived=float(n))
        scheduler.on_request(adm)
        return adm

    done_swaps = 0
    for pair, size in zip(pairs, sizes, strict=True):
        holders = [arrive(m) for m in pair if m in scheduler.running]
        openers = [arrive(m) for m in pair if m not in scheduler.running]
        while done_swaps < len(effects.starts()):
            target, _ = effects.starts()[done_swaps]
            done_swaps += 1
            scheduler.on_swap_done(target, None)
        granted = set(map(id, effects.granted()))
        assert all(id(a) in granted for a in holders + openers)
        for adm in holders + openers:
            scheduler.on_serve_done(adm.model)
        for i in range(size - len(holders) - len(openers)):
            adm = arrive(pair[i % 2])  # within a phase, every order gives the same answer
            assert id(adm) in set(map(id, effects.granted())), "no swap within a phase"
            scheduler.on_serve_done(adm.model)
    return Counter(target for target, _ in effects.starts())


@dataclass
class Answer:
    rid: str
    model: str
    status: int
    pid: str


async def ask(
    session: aiohttp.ClientSession,
    gw: Launched,
    model: str,
    *,
    stream: bool,
    tokens: int,
    started: asyncio.Event | None = None,
) -> Answer:
    """One request; checks that the answer is complete and is this request's."""
    rid = uuid.uuid4().hex
    body = {
        "model": model,
        "messages": [{"role": "user", "content": f"request {rid}"}],
        "max_tokens": tokens,
        "stream": stream,
    }
    async with session.post(
        gw.url("/v1/chat/completions"), json=body, headers={"X-Request-Id": rid}
    ) as resp:
        pid = resp.headers.get("X-Fake-Pid", "")
        if resp.status != 200:
            return Answer(rid, model, resp.status, pid)
        if started is not None:
            started.set()
        expected = "".join(f"tok{i} " for i in range(tokens))
        if not stream:
            data = await resp.json()
            assert data["id"] == f"chatcmpl-fake-{rid}", (data["id"], rid)
            assert data["model"] == model
            assert data["choices"][0]["message"]["content"] == expected
            return Answer(rid, model, 200, pid)
        text = ""
        events = []
        async for raw in resp.content:
            line = raw.strip()
            if line.startswith(b"data: "):
                events.append(line[6:].decode())
        assert events[-1] == "[DONE]", events[-3:]
        for event in events[:-1]:
            chunk = json.loads(event)
            assert chunk["id"] == f"chatcmpl-fake-{rid}", (chunk["id"], rid)
            assert chunk["model"] == model
            for choice in chunk["choices"]:
                text += choice["delta"].get("content") or ""
        assert text == expected, (text, expected)
        return Answer(rid, model, 200, pid)


@pytest.mark.timeout(300)
async def test_mixed_load_with_swaps_loses_nothing(launch: LaunchFn, report: Report) -> None:
    rng = random.Random(11)
    pairs = phase_pairs(rng)
    sizes = [TOTAL // PHASES] * PHASES
    predicted = predicted_starts(pairs, sizes)
    models, budget = config()
    gw = launch(models, extra_top=budget)

    answers: list[Answer] = []
    started = time.monotonic()
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    running: set[str] = set()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        limit = asyncio.Semaphore(CONCURRENCY)

        async def bounded(model: str) -> Answer:
            async with limit:
                return await ask(
                    session, gw, model, stream=rng.random() < 0.5, tokens=rng.randint(1, 8)
                )

        for pair, size in zip(pairs, sizes, strict=True):
            # Phase change: hold each member that runs (busy until its swap is decided)...
            holds = []
            for model in (m for m in pair if m in running):
                busy = asyncio.Event()
                holds.append(
                    asyncio.ensure_future(
                        ask(session, gw, model, stream=True, tokens=HOLD_TOKENS, started=busy)
                    )
                )
                await asyncio.wait_for(busy.wait(), HANG)
            # ...then ask for each member that must start.
            openers = [
                ask(session, gw, m, stream=True, tokens=100) for m in pair if m not in running
            ]
            answers += await asyncio.gather(*openers)
            answers += await asyncio.gather(*holds)
            running = set(pair)
            rest = size - len(pair)
            mix = [rng.choice(pair) for _ in range(rest)]
            answers += await asyncio.gather(*(bounded(model) for model in mix))
    seconds = time.monotonic() - started

    assert len(answers) == TOTAL
    statuses = Counter(a.status for a in answers)
    assert statuses == {200: TOTAL}, statuses
    assert len({a.rid for a in answers}) == TOTAL, "duplicate request ids"
    observed = Counter(
        {m: int(gw.metric("modelswap_starts_total", model=m, result="ready")) for m in MODELS}
    )
    # A stream that waited for its model got the gateway's own early headers: no X-Fake-Pid.
    pids = {m: {a.pid for a in answers if a.model == m and a.pid} for m in MODELS}
    assert {m: len(p) for m, p in pids.items()} == {m: observed[m] for m in MODELS}
    assert +observed == predicted, (observed, predicted, pairs)
    assert gw.metric("modelswap_starts_total", result="failed") == 0
    assert not log_problems(gw.log()), log_problems(gw.log())[:20]
    report(
        requests=TOTAL,
        concurrency=CONCURRENCY,
        phases=[f"{a}+{b}" for a, b in pairs],
        starts_predicted=sum(predicted.values()),
        starts_observed=sum(observed.values()),
        statuses=dict(statuses),
        seconds=round(seconds, 1),
    )
