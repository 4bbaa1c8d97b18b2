"""Issue 32 #2: an evicted model says who evicted it and how that start went — on its
/v1/models row (``last_stop``), on /running while it sleeps, and as the last line of its log —
and the next request for it brings it back, as for any stopped model."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from tests.e2e.conftest import REPO, Gateway, chat, fake_cmd, request

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
GUARD_LOG = REPO / "tests" / "data" / "startup-logs" / "vllm-new-utilization-guard.log"
GUARD = fake_cmd("--flavor", "vllm", "--print-log", str(GUARD_LOG), "--fail-start")
SUMMARY = re.compile(
    r"evicted to start guard at \d\d:\d\d \(guard then failed: utilization_guard\)"
)


def row(gw: Gateway, model: str) -> dict[str, Any]:
    return gw.get_json(f"/v1/models/{model}")


def log_lines(gw: Gateway, model: str) -> list[str]:
    return request(gw, "GET", f"/logs/{model}").body.decode().splitlines()


def test_an_evicted_model_names_the_start_that_failed_and_comes_back_on_request(
    gateway: StartGateway,
) -> None:
    gw = gateway(f"  chat:\n    cmd: {fake_cmd()}\n  guard:\n    cmd: {GUARD}\n")
    assert chat(gw, "chat").status == 200
    assert chat(gw, "guard").status == 503  # one model at a time: chat was stopped for it
    gw.wait_for(lambda: row(gw, "chat").get("last_stop", {}).get("outcome") == "failed")

    stop = row(gw, "chat")["last_stop"]
    assert row(gw, "chat")["state"] == "stopped"
    assert {k: stop[k] for k in ("reason", "target", "outcome", "code")} == {
        "reason": "evicted",
        "target": "guard",
        "outcome": "failed",
        "code": "utilization_guard",
    }
    assert SUMMARY.fullmatch(stop["summary"]), stop
    assert isinstance(stop["at"], float)
    listed = {r["id"]: r for r in gw.get_json("/v1/models")["data"]}  # type: ignore[union-attr]
    assert listed["chat"]["last_stop"] == stop
    assert "last_stop" not in listed["guard"]  # failed, not stopped: its own failure says why
    # The log ends with it, no longer with "backend exited (0)".
    lines = log_lines(gw, "chat")
    assert lines[-1] == f"[modelswap] stopped: {stop['summary']}", lines[-3:]
    assert any(line.startswith("[modelswap] backend exited (") for line in lines)

    # What a user wants next: the model back. The next request starts it again, and it is
    # ready with nothing left over from the eviction.
    assert chat(gw, "chat").status == 200
    assert row(gw, "chat")["state"] == "ready"
    assert "last_stop" not in row(gw, "chat")


def test_an_eviction_for_a_start_that_worked_says_so(gateway: StartGateway) -> None:
    gw = gateway(f"  a:\n    cmd: {fake_cmd()}\n  b:\n    cmd: {fake_cmd()}\n")
    assert chat(gw, "a").status == 200
    assert chat(gw, "b").status == 200
    gw.wait_for(lambda: row(gw, "a").get("last_stop", {}).get("outcome") == "started")
    stop = row(gw, "a")["last_stop"]
    assert re.fullmatch(r"evicted to start b at \d\d:\d\d \(b then started\)", stop["summary"])
    assert "code" not in stop
    assert log_lines(gw, "a")[-1] == f"[modelswap] stopped: {stop['summary']}"
    # An unload says so too, and the receipt of b's last swap outlives it (issue 32 #10).
    assert request(gw, "POST", "/api/models/unload/b").status == 200
    assert row(gw, "b")["last_stop"]["reason"] == "unloaded"
    assert row(gw, "b")["last_swap"]["target"] == "b"


def test_an_evicted_sleeping_model_says_why_on_running(gateway: StartGateway) -> None:
    sleepy = fake_cmd("--flavor vllm --enable-sleep-mode")
    gw = gateway(f"  a:\n    sleepMode: true\n    cmd: {sleepy}\n  guard:\n    cmd: {GUARD}\n")
    assert chat(gw, "a").status == 200
    assert chat(gw, "guard").status == 503
    gw.wait_for(lambda: gw.running()["a"].get("last_stop", {}).get("outcome") == "failed")
    running = gw.running()["a"]
    assert running["state"] == "sleeping"
    assert SUMMARY.fullmatch(running["last_stop"]["summary"])
    assert row(gw, "a")["last_stop"] == running["last_stop"]
    assert log_lines(gw, "a")[-1] == f"[modelswap] asleep: {running['last_stop']['summary']}"
