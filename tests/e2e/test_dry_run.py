"""The load dry run end to end (issue 39), through ``python -m modelswap serve`` and real fake
backends: the prediction of ``GET /api/models/{id}/dry-run`` against the swap that follows
(evicted set, start time within the measured spread, memory within the stated error), a busy
model it would evict, and the 503 of a start that ran out of memory carrying the prediction."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import REPO, Gateway, chat, fake_cmd, next_event, open_stream, request

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
MEMORY_BACKEND = REPO / "tests" / "fakes" / "memory_backend.py"
OOM_LOG = REPO / "tests" / "data" / "startup-logs" / "llamacpp-cuda-oom.log"


def memory_cmd(mib: int, *flags: str) -> str:
    """A YAML scalar: the fake backend holding ``mib`` MiB resident."""
    text = f'"{sys.executable}" "{MEMORY_BACKEND}" --alloc-mib {mib} --port ${{PORT}}'
    return json.dumps(" ".join([text, *flags]))


def dry_run(gw: Gateway, model: str) -> dict[str, Any]:
    reply = request(gw, "GET", f"/api/models/{model}/dry-run")
    assert reply.status == 200, reply.body
    data: dict[str, Any] = reply.json()
    return data


def runs_measured(gw: Gateway, model: str) -> int:
    """How many of ``model``'s runs the memory sampler has seen, as its dry run says."""
    ram = dry_run(gw, model)["memory"]["resources"]["ram"]
    return int(ram["runs"]) if ram["source"] == "measured" else 0


def test_the_dry_run_predicts_the_swap_that_follows(gateway: StartGateway) -> None:
    gw = gateway(
        f"  a:\n    cmd: {memory_cmd(48, '--load-delay 1')}\n"
        f"  b:\n    cmd: {memory_cmd(16, '--load-delay 1')}\n"
    )
    # Two runs of each (one at a time: each evicts the other), every run's memory sampled.
    for model, run in (("a", 1), ("b", 1), ("a", 2), ("b", 2)):
        assert chat(gw, model).status == 200
        gw.wait_for(lambda m=model, n=run: runs_measured(gw, m) == n)  # type: ignore[misc]
    runs = len(gw.get_json("/running")["running"])  # b alone runs
    assert runs == 1

    predicted = dry_run(gw, "a")
    assert [e["model"] for e in predicted["evict"]] == ["b"]
    assert predicted["evict"][0]["why"] == "exclusive: one model at a time"
    assert predicted["evict"][0]["busy"] is False
    assert predicted["fits_now"] is True
    assert predicted["time"]["start_source"] == "measured"
    assert predicted["time"]["start_spread"]["samples"] == 2
    ram = predicted["memory"]["resources"]["ram"]
    assert ram["source"] == "measured"
    assert ram["runs"] == 2
    assert "b" in gw.running()  # asking changed nothing

    assert chat(gw, "a").status == 200
    gw.wait_for(lambda: "memory" in gw.running()["a"]["last_swap"].get("prediction", {}))
    gw.wait_for(lambda: "ram" in gw.running()["a"]["last_swap"]["prediction"]["memory"])
    compared = gw.running()["a"]["last_swap"]["prediction"]
    assert compared["evict_equal"] is True
    assert compared["evict_predicted"] == ["b"]
    start = compared["time"]["start"]
    assert start["low"] <= start["actual_seconds"] <= start["high"], start
    assert start["within"] is True
    memory = compared["memory"]["ram"]
    assert memory["low"] <= memory["actual_bytes"] <= memory["high"], memory
    assert memory["within"] is True


def test_a_busy_model_it_would_evict_is_named(gateway: StartGateway) -> None:
    gw = gateway(
        f"  a:\n    cmd: {fake_cmd()}\n  slow:\n    cmd: {fake_cmd('--tps 2 --tokens 400')}\n"
    )
    with open_stream(gw, "slow") as stream:
        assert next_event(stream) is not None  # it serves: one request in flight
        predicted = dry_run(gw, "a")
        [evicted] = predicted["evict"]
        assert (evicted["model"], evicted["busy"], evicted["in_flight"]) == ("slow", True, 1)
        assert predicted["fits_now"] is False
        assert "slow to finish serving" in predicted["blocked"]
        assert gw.running()["slow"]["in_flight"] == 1  # still serving: nothing was stopped
    assert request(gw, "GET", "/api/models/nope/dry-run").status == 404


def test_a_start_that_ran_out_of_memory_answers_with_the_prediction(
    gateway: StartGateway,
) -> None:
    oom = fake_cmd("--print-log", str(OOM_LOG), "--fail-start")
    gw = gateway(f"  ok:\n    cmd: {fake_cmd()}\n  big:\n    cmd: {oom}\n")
    assert chat(gw, "ok").status == 200
    reply = chat(gw, "big")
    assert reply.status == 503
    error = reply.json()["error"]
    assert error["code"] == "cuda_oom"  # the OpenAI shape, as before
    assert error["type"] == "service_unavailable"
    prediction = error["prediction"]
    assert prediction["model"] == "big"
    assert set(prediction) >= {"evict", "memory", "time", "fits_machine", "summary"}


def test_a_start_that_failed_otherwise_has_no_prediction(gateway: StartGateway) -> None:
    gw = gateway(f"  bad:\n    cmd: {fake_cmd('--fail-start')}\n")
    reply = chat(gw, "bad")
    assert reply.status == 503
    assert "prediction" not in reply.json()["error"]


def test_the_dry_run_path_needs_a_read_key(gateway: StartGateway, tmp_path: Path) -> None:
    gw = gateway(
        f"  a:\n    cmd: {fake_cmd()}\n",
        extra_top="apiKeys:\n  - {key: sk-inference-0001, name: inf, scopes: [inference]}\n"
        "  - {key: sk-reader-00000001, name: reader, scopes: [read]}\n",
    )
    path = "/api/models/a/dry-run"
    assert (
        request(gw, "GET", path, headers={"Authorization": "Bearer sk-inference-0001"}).status
        == 403
    )
    reply = request(gw, "GET", path, headers={"Authorization": "Bearer sk-reader-00000001"})
    assert reply.status == 200
    assert reply.json()["model"] == "a"
