"""Scheduling end to end (issue 6): ``python -m modelswap serve`` with fake backends on loopback.

Memory budgets with two small models that fit together and a big one that needs the whole
budget under a mixed, bounded load; groups; swaps that never cut a stream; the drain timeout;
the queue limit; load on demand, preload and defaultModel; memory measured into stats.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import random
import shlex
import statistics
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from tests.e2e.conftest import (
    HANG,
    REPO,
    Gateway,
    Reply,
    chat,
    chat_body,
    fake_cmd,
    held_cmd,
    load_model,
    next_event,
    open_stream,
    pid_alive,
    queue_depth,
    request,
    stream_tokens,
)

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
JSON = {"Content-Type": "application/json"}
MIB = 1024**2
MEMORY_BACKEND = REPO / "tests" / "fakes" / "memory_backend.py"


def model(model_id: str, *flags: str, delay: float = 0.2, **keys: str) -> str:
    """One model's YAML: the fake backend with ``flags``; ``keys`` are more YAML keys."""
    lines = [f"  {model_id}:"]
    lines += [f"    {key}: {value}" for key, value in keys.items()]
    lines.append(f"    cmd: {fake_cmd('--load-delay', str(delay), *flags)}")
    return "\n".join(lines) + "\n"


def starts(gw: Gateway, model_id: str) -> int:
    """How many times modelswap began starting ``model_id`` (from its own log)."""
    text = gw.log()
    return text.count(f"model {model_id}: stopped -> starting") + text.count(
        f"model {model_id}: failed -> starting"
    )


def ready(gw: Gateway) -> set[str]:
    return {m for m, row in gw.running().items() if row["state"] == "ready"}


def fake_pid(reply: Reply) -> int:
    assert reply.status == 200, reply.body
    return int(reply.headers["X-Fake-Pid"])


def send_only(gw: Gateway, body: bytes) -> http.client.HTTPConnection:
    """Send a request now; read its response later with :func:`read_reply`."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    conn.request("POST", "/v1/chat/completions", body, JSON)
    return conn


def read_reply(conn: http.client.HTTPConnection) -> Reply:
    try:
        resp = conn.getresponse()
        return Reply(resp.status, resp.headers, resp.read())
    finally:
        conn.close()


@contextlib.contextmanager
def reply_in_background(gw: Gateway, body: bytes) -> Iterator[list[tuple[float, Reply]]]:
    """Send ``body`` now; the list gets ``(monotonic time answered, reply)`` once answered."""
    conn = send_only(gw, body)
    answered: list[tuple[float, Reply]] = []

    def wait() -> None:
        reply = read_reply(conn)
        answered.append((time.monotonic(), reply))

    thread = threading.Thread(target=wait)
    thread.start()
    try:
        yield answered
    finally:
        thread.join(timeout=HANG)
        conn.close()


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered)) - 1))
    return ordered[index]


# ---- three models under a memory budget ------------------------------------------------------

# ram 2 GiB: s1 and s2 (1 GiB each) fit together; big (2 GiB) needs the whole budget.
BUDGET = "resources: {ram: 2GiB}\n"
SERVE = ("--tps", "400", "--tokens", "4")


def budget_models(delay: float = 0.3, big_flags: tuple[str, ...] = SERVE) -> str:
    return (
        model("s1", *SERVE, delay=delay, uses="{ram: 1GiB}")
        + model("s2", *SERVE, delay=delay, uses="{ram: 1GiB}")
        + model("big", *big_flags, delay=delay, uses="{ram: 2GiB}")
    )


async def run_load(
    gw: Gateway, models: list[str], workers: int = 8
) -> list[tuple[str, int, float, int]]:
    """Send one chat request per entry of ``models`` with at most ``workers`` in flight;
    ``(model, status, seconds waited for the whole answer, backend pid)`` per request."""
    todo: asyncio.Queue[str] = asyncio.Queue()
    for name in models:
        todo.put_nowait(name)
    results: list[tuple[str, int, float, int]] = []
    timeout = aiohttp.ClientTimeout(total=2 * HANG)  # ends a hang; the time is only printed

    async def worker(session: aiohttp.ClientSession) -> None:
        while not todo.empty():
            name = todo.get_nowait()
            started = time.monotonic()
            body = chat_body(name, max_tokens=4)
            async with session.post(gw.url("/v1/chat/completions"), data=body) as resp:
                await resp.read()
                pid = int(resp.headers.get("X-Fake-Pid", "0"))
                results.append((name, resp.status, time.monotonic() - started, pid))

    async with aiohttp.ClientSession(headers=JSON, timeout=timeout) as session:
        await asyncio.gather(*(worker(session) for _ in range(workers)))
    assert len(results) == len(models)
    return results


async def test_mixed_load_under_a_budget_completes_with_the_predicted_starts(
    gateway: StartGateway,
) -> None:
    gw = gateway(budget_models(), extra_top=BUDGET)
    rng = random.Random(6)
    # Phase 1: s1 and s2 interleaved (they fit together: one start each, then co-resident).
    # Phase 2: big (evicts both, once). Phase 3: s1 and s2 again (one more start each).
    phases = [
        [rng.choice(["s1", "s2"]) for _ in range(80)],
        ["big"] * 40,
        [rng.choice(["s1", "s2"]) for _ in range(80)],
    ]
    expected_starts = [
        {"s1": 1, "s2": 1, "big": 0},
        {"s1": 1, "s2": 1, "big": 1},
        {"s1": 2, "s2": 2, "big": 1},
    ]
    expected_ready = [{"s1", "s2"}, {"big"}, {"s1", "s2"}]
    began = time.monotonic()
    results: list[tuple[str, int, float, int]] = []
    for phase, (names, want_starts, want_ready) in enumerate(
        zip(phases, expected_starts, expected_ready, strict=True), start=1
    ):
        got = await run_load(gw, names)
        results += got
        assert [status for _, status, _, _ in got] == [200] * len(names), f"phase {phase}"
        assert {m: starts(gw, m) for m in ("s1", "s2", "big")} == want_starts, f"phase {phase}"
        assert ready(gw) == want_ready, f"phase {phase}"
        pids: dict[str, set[int]] = {}
        for name, _, _, pid in got:
            pids.setdefault(name, set()).add(pid)
        assert all(len(p) == 1 for p in pids.values()), pids  # one backend per model per phase
        for name, (pid,) in pids.items():
            assert pid_alive(pid) == (name in want_ready), (phase, name)
    elapsed = time.monotonic() - began

    waits = [seconds for _, _, seconds, _ in results]
    by_model = Counter(name for name, _, _, _ in results)
    p50, p95 = statistics.median(waits), percentile(waits, 95)
    total_starts = {m: starts(gw, m) for m in ("s1", "s2", "big")}
    print(
        f"\nmixed load: {len(results)} requests ({dict(by_model)}), 8 workers, "
        f"0 errors, {elapsed:.1f} s; starts {total_starts}; "
        f"client-side wait p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
        f"max {max(waits) * 1000:.0f} ms"
    )
    assert len(results) == 200  # how fast is bench/'s question, not this test's
    assert "to fit big within ram 2.0 GiB" in gw.log()  # the committed swap's reason


def test_two_small_models_share_while_the_big_one_runs_alone_with_groups(
    gateway: StartGateway,
) -> None:
    gw = gateway(
        model("s1") + model("s2") + model("big"),
        extra_top="groups:\n  small: {members: [s1, s2], swap: false, exclusive: true}\n",
    )
    pid_s1 = fake_pid(chat(gw, "s1"))
    pid_s2 = fake_pid(chat(gw, "s2"))
    assert ready(gw) == {"s1", "s2"}
    assert pid_alive(pid_s1)
    assert pid_alive(pid_s2)

    pid_big = fake_pid(chat(gw, "big"))
    assert ready(gw) == {"big"}
    assert set(gw.running()) == {"big"}
    assert not pid_alive(pid_s1)
    assert not pid_alive(pid_s2)

    fake_pid(chat(gw, "s2"))
    assert ready(gw) == {"s2"}
    assert not pid_alive(pid_big)


def test_budget_co_residence_is_visible_in_running(gateway: StartGateway) -> None:
    gw = gateway(budget_models(delay=0.1), extra_top=BUDGET)
    fake_pid(chat(gw, "s1"))
    fake_pid(chat(gw, "s2"))
    rows = gw.running()
    assert {m for m, r in rows.items() if r["state"] == "ready"} == {"s1", "s2"}
    fake_pid(chat(gw, "big"))
    assert set(gw.running()) == {"big"}


def test_a_swap_never_cuts_a_streaming_answer(gateway: StartGateway, tmp_path: Path) -> None:
    # big's stream stops after 10 tokens until the test lets it go: s1 surely arrives, and
    # waits, while it is in flight.
    release = tmp_path / "release-big"
    held = ("--stall-after", "10", "--stall-until", shlex.quote(str(release)))
    big_flags = ("--tps", "20", "--tokens", "20", *held)
    gw = gateway(budget_models(delay=0.1, big_flags=big_flags), extra_top=BUDGET)
    load_model(gw, "big")  # the stream then gets the backend's own headers
    with open_stream(gw, "big") as resp:
        assert resp.status == 200
        pid_big = int(resp.headers["X-Fake-Pid"])
        first = next_event(resp)
        assert first is not None
        with reply_in_background(gw, chat_body("s1")) as answered:
            gw.wait_for(lambda: queue_depth(gw, "s1") == 1)
            assert answered == [], "s1 was answered while big was streaming"
            assert ready(gw) == {"big"}
            release.touch()
            tokens, events = stream_tokens(resp)
        assert len(answered) == 1
    for event in events:
        assert '"error"' not in event, event
    assert tokens[-1] == "tok19 "
    assert "".join(tokens).count("tok") >= 19
    assert events[-1] == "[DONE]"
    # No clock comparison of s1's answer with the stream's end: two client threads' clocks
    # race under load. What the swap may not do is shown above: s1 stayed unanswered while big
    # was held, and big's answer arrived whole, to [DONE].
    _, reply_s1 = answered[0]
    fake_pid(reply_s1)
    assert not pid_alive(pid_big)
    assert ready(gw) == {"s1"}


def test_drain_timeout_lets_the_swap_proceed_and_ends_the_stream_with_an_error(
    gateway: StartGateway,
) -> None:
    gw = gateway(
        model("a", "--tps", "5", "--tokens", "200", delay=0.1) + model("b", delay=0.1),
        extra_top="drainTimeout: 1\n",
    )
    load_model(gw, "a")  # the stream then gets the backend's own headers
    with open_stream(gw, "a") as resp:
        assert resp.status == 200
        pid_a = int(resp.headers["X-Fake-Pid"])
        assert next_event(resp) is not None
        with reply_in_background(gw, chat_body("b")) as answered:
            tokens, events = stream_tokens(resp)
        assert len(answered) == 1
    assert len(tokens) < 200  # cut by the drain timeout (200 tokens at 5/s take 40 s)
    error = json.loads(events[-1])["error"]
    assert error["code"] == "upstream_error"
    fake_pid(answered[0][1])
    assert not pid_alive(pid_a)
    assert "drain timeout" in gw.log()


def test_queue_limit_answers_429_with_retry_after(gateway: StartGateway, tmp_path: Path) -> None:
    release = tmp_path / "release-a"  # a's start waits for it: the first request stays queued
    gw = gateway(f"  a:\n    cmd: {held_cmd(release)}\n", extra_top="queueLimit: 1\n")
    with reply_in_background(gw, chat_body("a")) as answered:
        gw.wait_for(lambda: gw.running().get("a", {}).get("queued") == 1)
        refused = chat(gw, "a")
        assert refused.status == 429, refused.body
        assert refused.headers["X-Modelswap-Error"] == "1"
        assert refused.json()["error"]["code"] == "queue_full"
        retry_after = refused.headers["Retry-After"]
        assert retry_after.isdigit()
        assert int(retry_after) >= 1
        release.touch()
    assert len(answered) == 1
    fake_pid(answered[0][1])
    fake_pid(chat(gw, "a"))  # room again once served


def test_load_endpoint_starts_a_model_without_a_request(gateway: StartGateway) -> None:
    gw = gateway(model("a") + model("b"))
    reply = request(gw, "POST", "/api/models/load/a")
    assert reply.status == 200, reply.body
    assert reply.json() == {"loaded": "a"}
    row = gw.running()["a"]
    assert row["state"] == "ready"
    assert row["in_flight"] == 0
    assert starts(gw, "a") == 1
    stats = request(gw, "GET", "/upstream/a/stats").json()
    assert stats["requests"] == 0

    reply = request(gw, "POST", "/api/models/load/b")  # one at a time by default
    assert reply.status == 200, reply.body
    assert set(gw.running()) == {"b"}
    assert request(gw, "POST", "/api/models/load/nope").status == 404


def test_preload_at_startup_then_default_model_when_idle(gateway: StartGateway) -> None:
    gw = gateway(
        model("a") + model("d"),
        extra_top="hooks:\n  onStartup:\n    preload: [a]\ndefaultModel: d\ndefaultAfter: 0.5\n",
    )
    gw.wait_for(lambda: ready(gw) == {"a"})
    assert "preloaded a" in gw.log()
    assert request(gw, "GET", "/upstream/a/stats").json()["requests"] == 0

    assert request(gw, "POST", "/api/models/unload/a").status == 200
    gw.wait_for(lambda: ready(gw) == {"d"})  # nothing runs, idle: d loads
    assert starts(gw, "d") == 1


def test_memory_of_a_model_without_uses_is_measured_into_stats(
    gateway: StartGateway, tmp_path: Path
) -> None:
    state = tmp_path / "measured-state"
    cmd = json.dumps(
        f'"{sys.executable}" "{MEMORY_BACKEND}" --alloc-mib 64 --port ${{PORT}} --load-delay 0.1'
    )
    gw = gateway(
        f"  m:\n    cmd: {cmd}\n", extra_top=f"stateDir: {state}\nresources: {{ram: 4GiB}}\n"
    )
    fake_pid(chat(gw, "m"))
    stats_file = state / "stats.json"

    def measured() -> int:
        try:
            data = json.loads(stats_file.read_text())
        except (OSError, ValueError):
            return 0
        return int(data.get("models", {}).get("m", {}).get("peak_bytes", {}).get("ram", 0))

    gw.wait_for(lambda: measured() >= 64 * MIB)
    data = json.loads(stats_file.read_text())
    entry = data["models"]["m"]
    assert entry["peak_bytes"]["ram"] < 1024 * MIB
    assert len(entry["start_seconds"]) == 1
    assert 0 < entry["start_seconds"][0] < HANG  # seconds (not ms), one start's worth
