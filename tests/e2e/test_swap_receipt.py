"""Every swap has a receipt: where its time went, in the log and as a swap.done event."""

from __future__ import annotations

import http.client
import json
import re
import threading
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    HANG,
    Gateway,
    chat,
    chat_body,
    fake_cmd,
    next_event,
    open_stream,
    queue_depth,
)

pytestmark = pytest.mark.e2e


def test_a_swap_logs_its_stop_and_the_targets_spawn_listening_and_ready(
    gateway: type[Gateway],
) -> None:
    silent = fake_cmd("--flavor vllm --quiet-loading --silent-bind --load-delay 0.3")
    gw = gateway(f"  a:\n    cmd: {fake_cmd()}\n  b:\n    cmd: {silent}\n")  # type: ignore[call-arg]
    assert chat(gw, "a").status == 200
    assert chat(gw, "b").status == 200  # one model at a time: a is stopped for b
    gw.wait_for(lambda: "swap to b done in" in gw.log())
    line = next(line for line in gw.log().splitlines() if "swap to b done in" in line)
    found = re.search(
        r"\(stop (\S+) s, start (\S+) s, spawn to listening (\S+) s, listening to ready (\S+) s\)",
        line,
    )
    assert found, line
    stop, start, listening, ready = map(float, found.groups())
    assert stop > 0  # a's whole tree was ended first
    assert 0 < listening <= start
    assert ready >= 0


def test_a_failed_swap_says_so(gateway: type[Gateway]) -> None:
    gw = gateway(f"  broken:\n    cmd: {fake_cmd('--fail-start')}\n")  # type: ignore[call-arg]
    assert chat(gw, "broken").status == 503
    gw.wait_for(lambda: "swap to broken failed in" in gw.log())


# ---- prefetch: B's weights read while A stops -----------------------------------------------

WEIGHTS_BYTES = 2 * 1024 * 1024  # one prefetch chunk: read in milliseconds, A stops in 2 s


def _swap_done_events(gw: Gateway, *models: str) -> dict[str, dict[str, Any]]:
    """Send one chat per model, in order, and return each target's ``swap.done`` event."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    try:
        conn.request("GET", "/api/events")
        resp = conn.getresponse()
        assert resp.status == 200
        for model in models:
            assert chat(gw, model).status == 200
        found: dict[str, dict[str, Any]] = {}
        kind = None
        while len(found) < len(models):
            raw = resp.readline()
            assert raw, "the event stream ended"
            line = raw.decode().rstrip("\r\n")
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: ") and kind == "swap.done":
                data = json.loads(line.removeprefix("data: "))
                found[data["target"]] = data
        return found
    finally:
        conn.close()


def _two_models(weights: Path, b_extra: str = "") -> str:
    weights.write_bytes(b"GGUF" + b"\0" * (WEIGHTS_BYTES - 4))
    a = fake_cmd("--stop-delay 2")  # a takes its time to stop: b's weights are read meanwhile
    b = fake_cmd(f"--weights {weights}")
    return f"  a:\n    cmd: {a}\n  b:\n    cmd: {b}\n{b_extra}"


def test_a_swap_prefetches_the_targets_weights_while_the_evicted_model_stops(
    gateway: type[Gateway], tmp_path: Path
) -> None:
    gw = gateway(_two_models(tmp_path / "b.gguf"))  # type: ignore[call-arg]
    done = _swap_done_events(gw, "a", "b")
    assert "prefetch" not in done["a"]  # nothing to wait for: nothing to read ahead
    prefetch = done["b"]["prefetch"]
    assert prefetch["outcome"] == "done", prefetch
    assert prefetch["files"] == prefetch["files_read"] == 1
    assert prefetch["bytes"] == prefetch["planned_bytes"] == WEIGHTS_BYTES
    assert prefetch["seconds"] >= 0
    gw.wait_for(lambda: "swap to b done in" in gw.log(), timeout=HANG)
    line = next(line for line in gw.log().splitlines() if "swap to b done in" in line)
    assert "; prefetch done: 2.0 MiB of 2.0 MiB from 1 of 1 file(s) in " in line, line


def test_prefetch_false_reads_nothing_and_the_receipt_says_so(
    gateway: type[Gateway], tmp_path: Path
) -> None:
    gw = gateway(_two_models(tmp_path / "b.gguf", "    prefetch: false\n"))  # type: ignore[call-arg]
    done = _swap_done_events(gw, "a", "b")
    assert done["b"]["prefetch"] == {
        "outcome": "skipped",
        "files": 0,
        "files_read": 0,
        "bytes": 0,
        "planned_bytes": 0,
        "seconds": 0.0,
        "why": "prefetch: false",
    }


def test_the_prefetch_begins_while_the_evicted_model_still_serves(
    gateway: type[Gateway], tmp_path: Path
) -> None:
    release = tmp_path / "release-a"  # a's stream stalls until the test lets it go
    weights = tmp_path / "b.gguf"
    weights.write_bytes(b"GGUF" + b"\0" * (WEIGHTS_BYTES - 4))
    a = fake_cmd(f"--stall-after 1 --stall-until {release}")
    b = fake_cmd(f"--weights {weights}")
    gw = gateway(f"  a:\n    cmd: {a}\n  b:\n    cmd: {b}\n")  # type: ignore[call-arg]
    answers: list[int] = []
    with open_stream(gw, "a") as resp:
        assert resp.status == 200
        assert next_event(resp) is not None  # a is streaming, and stalls
        waiter = threading.Thread(target=lambda: answers.append(chat(gw, "b").status))
        waiter.start()
        try:
            gw.wait_for(lambda: "swap to b: prefetching 1 weight file(s)" in gw.log())
            assert set(gw.running()) == {"a"}  # a still serves: the swap has not begun
        finally:
            release.touch()
            waiter.join(HANG)
    assert answers == [200]
    gw.wait_for(lambda: "swap to b done in" in gw.log())
    line = next(line for line in gw.log().splitlines() if "swap to b done in" in line)
    assert re.search(r"\(drain \S+ s, stop \S+ s, start ", line), line  # it waited for a
    assert "; prefetch done: 2.0 MiB of 2.0 MiB from 1 of 1 file(s) in " in line, line


def test_a_prefetch_stops_when_its_swap_is_no_longer_due(
    gateway: type[Gateway], tmp_path: Path
) -> None:
    release = tmp_path / "release-a"
    weights = tmp_path / "b.gguf"
    weights.write_bytes(b"GGUF" + b"\0" * (WEIGHTS_BYTES - 4))
    a = fake_cmd(f"--stall-after 1 --stall-until {release}")
    b = fake_cmd(f"--weights {weights}")
    gw = gateway(f"  a:\n    cmd: {a}\n  b:\n    cmd: {b}\n")  # type: ignore[call-arg]
    with open_stream(gw, "a") as resp:
        assert resp.status == 200
        assert next_event(resp) is not None  # a is streaming, and stalls
        waiting = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
        waiting.request(
            "POST", "/v1/chat/completions", chat_body("b"), {"Content-Type": "application/json"}
        )
        gw.wait_for(lambda: queue_depth(gw, "b") == 1)
        gw.wait_for(lambda: "swap to b: prefetching 1 weight file(s)" in gw.log())
        waiting.close()  # b's only waiter leaves: its swap is no longer due
        gw.wait_for(lambda: "swap to b: no longer due; prefetch " in gw.log())
        assert set(gw.running()) == {"a"}
        release.touch()
    assert "swap to b done" not in gw.log()
