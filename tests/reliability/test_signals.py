"""Scenario 1: the gateway dies (SIGKILL) or is stopped (SIGTERM, SIGINT) with three backends
running — one forks a grandchild that calls ``setsid()``, one ignores SIGTERM, one runs under a
``bash -c`` wrapper — and within 5 s no process of any backend tree remains. A graceful stop
first lets the in-flight streams finish (or end them with a clean error event); requests that
arrive meanwhile get 503 ``shutting_down`` (``/health`` too), then the port closes.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from tests.e2e.conftest import (
    chat_body,
    fake_cmd,
    fake_cmd_text,
    next_event,
    open_stream,
    request,
    stream_tokens,
)
from tests.reliability.conftest import (
    Launched,
    LaunchFn,
    Report,
    Tracker,
    alive,
    describe,
    wait_all_dead,
)

pytestmark = pytest.mark.reliability

JSON = {"Content-Type": "application/json"}

DEADLINE = 60.0  # a ceiling that only ends a hang
TOKENS = 40
TPS = 20.0  # a stream lasts 2 s


def three_backends(pidfile: Path) -> tuple[str, str]:
    stream = ("--tokens", str(TOKENS), "--tps", str(TPS))
    wrapped = json.dumps(["bash", "-c", f"{fake_cmd_text(*stream)} ; true"])
    models = (
        f"  grandchild:\n    cmd: {fake_cmd('--fork-grandchild', str(pidfile), *stream)}\n"
        f"  stubborn:\n    cmd: {fake_cmd('--ignore-sigterm', *stream)}\n"
        f"  wrapped:\n    cmd: {wrapped}\n"
    )
    groups = "groups:\n  all:\n    members: [grandchild, stubborn, wrapped]\n    swap: false\n"
    return models, groups


def start_three(
    launch: LaunchFn, tracker: Tracker, tmp_path: Path
) -> tuple[Launched, list[psutil.Process]]:
    """A gateway with the three backends ready, and every process of their trees (tracked)."""
    pidfile = tmp_path / "grandchild.pid"
    models, groups = three_backends(pidfile)
    gw = launch(models, extra_top=groups)
    for model in ("grandchild", "stubborn", "wrapped"):
        status, _, body = gw.post(f"/api/models/load/{model}", b"")
        assert status == 200, body
    assert set(gw.running()) == {"grandchild", "stubborn", "wrapped"}
    procs = tracker.adopt_tree(gw.proc.pid)[1:]
    grandchild = tracker.add(int(pidfile.read_text()))
    assert grandchild is not None
    if grandchild not in procs:
        procs.append(grandchild)
    assert os.getsid(grandchild.pid) != os.getsid(gw.proc.pid)
    cmdlines = [" ".join(p.cmdline()) for p in procs]
    assert any(line.startswith("bash -c") for line in cmdlines), cmdlines
    assert any("modelswap.supervisor.reaper" in line for line in cmdlines), cmdlines
    # watchdog, 3 backends, the wrapper's child, the grandchild
    assert len(procs) >= 6, describe(procs)
    assert all(alive(p) for p in procs)
    return gw, procs


def test_sigkill_leaves_no_backend_tree(
    launch: LaunchFn, tracker: Tracker, tmp_path: Path, report: Report
) -> None:
    gw, procs = start_three(launch, tracker, tmp_path)
    os.kill(gw.proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    left = wait_all_dead(procs, DEADLINE)
    took = time.monotonic() - killed_at
    assert not left, f"outlived a SIGKILLed gateway by {DEADLINE} s:\n{describe(left)}"
    report(processes=len(procs), all_dead_after_s=round(took, 2))


def read_stream(gw: Launched, model: str, started: threading.Barrier) -> dict[str, object]:
    """One streaming request; waits at ``started`` after its first event, then reads to the end."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    events: list[str] = []
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            chat_body(model, stream=True),
            {"Content-Type": "application/json"},
        )
        resp = conn.getresponse()
        status = resp.status
        waited = False
        while True:
            line = resp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                events.append(line[6:].strip().decode())
                if not waited:
                    waited = True
                    started.wait(timeout=60)
        return {"model": model, "status": status, "events": events}
    except OSError as exc:
        return {"model": model, "status": None, "events": events, "error": repr(exc)}
    finally:
        conn.close()


def outcome(result: dict[str, object]) -> str:
    """``complete`` (every token, then [DONE]) or ``clean error`` (a final error event)."""
    events = result["events"]
    assert isinstance(events, list)
    tokens = sum(
        1
        for event in events
        if event != "[DONE]"
        for choice in json.loads(event).get("choices", [])
        if choice.get("delta", {}).get("content")
    )
    if result["status"] == 200 and events and events[-1] == "[DONE]" and tokens == TOKENS:
        return "complete"
    if events and events[-1] != "[DONE]" and "error" in json.loads(events[-1]):
        return "clean error"
    raise AssertionError(f"neither complete nor a clean error: {result}")


@pytest.mark.parametrize(
    "sig",
    [
        pytest.param(signal.SIGTERM, id="SIGTERM"),
        pytest.param(signal.SIGINT, id="SIGINT", marks=pytest.mark.reliability_long),
    ],
)
def test_graceful_stop_finishes_streams_and_leaves_no_backend_tree(
    sig: signal.Signals,
    launch: LaunchFn,
    tracker: Tracker,
    tmp_path: Path,
    report: Report,
) -> None:
    gw, procs = start_three(launch, tracker, tmp_path)
    names = ["grandchild", "stubborn", "wrapped"] * 2
    started = threading.Barrier(len(names) + 1)
    with ThreadPoolExecutor(len(names)) as pool:
        futures = [pool.submit(read_stream, gw, model, started) for model in names]
        started.wait(timeout=60)  # every stream has its first event: all are in flight
        signalled = time.monotonic()
        gw.proc.send_signal(sig)
        results = [f.result(timeout=60) for f in futures]
    code = gw.proc.wait(timeout=60)
    exited = time.monotonic() - signalled
    left = wait_all_dead(procs, DEADLINE)
    assert not left, f"outlived the stopped gateway:\n{describe(left)}"
    assert code == 0, gw.log()
    outcomes = [outcome(r) for r in results]
    report(
        processes=len(procs),
        streams=len(results),
        complete=outcomes.count("complete"),
        clean_errors=outcomes.count("clean error"),
        gateway_exit_after_s=round(exited, 2),
        exit_code=code,
    )
    assert outcomes.count("complete") == len(results), results


def test_requests_during_the_drain_get_503_while_the_stream_completes(
    launch: LaunchFn, report: Report
) -> None:
    tokens = 40  # at 10 per second: the stream outlasts the signal and the requests below
    gw = launch(f"  slow:\n    cmd: {fake_cmd('--tokens', str(tokens), '--tps', '10')}\n")
    assert gw.post("/api/models/load/slow", b"")[0] == 200
    with open_stream(gw, "slow", timeout=60) as stream:
        assert stream.status == 200
        first = next_event(stream)
        assert first is not None
        gw.proc.send_signal(signal.SIGTERM)
        gw.wait_for(lambda: "shutting down: finishing 1 in-flight" in gw.log(), timeout=30)

        during = request(gw, "POST", "/v1/chat/completions", chat_body("slow"), JSON)
        assert during.status == 503, during.body
        assert during.json()["error"]["code"] == "shutting_down"
        assert during.json()["error"]["type"] == "service_unavailable"
        assert during.headers["X-Modelswap-Error"] == "1"
        assert int(during.headers["Retry-After"]) >= 1
        health = request(gw, "GET", "/health")
        assert health.status == 503
        assert health.json()["status"] == "shutting_down"  # a load balancer stops sending

        rest, events = stream_tokens(stream)
    assert events[-1] == "[DONE]", events[-3:]
    assert len(rest) + (1 if "tok0" in first else 0) == tokens
    code = gw.proc.wait(timeout=60)
    assert code == 0, gw.log()
    try:
        socket.create_connection(("127.0.0.1", gw.port), timeout=5).close()
        closed = False
    except ConnectionRefusedError:
        closed = True
    assert closed, "the port still accepts connections after the gateway exited"
    report(stream_tokens=tokens, during_drain="503 shutting_down", health="503", exit_code=code)
