"""Scenario 8: resource exhaustion.

* Every port of the ``${PORT}`` range is taken by someone else: a request gets a 503 whose
  diagnosis names the port, no backend is spawned, and once a port is free the model starts.
* ``ulimit -n 256``: a burst of more streams than the gateway has file descriptors for; every
  stream completes or ends with a clean error, the gateway survives, serves afterwards, and
  its descriptors return to the baseline.
* A full disk under the activity database (the gateway's file-size limit set to 0 while it
  runs: every write to a file fails, as on a full disk): requests are still served, the failure
  is logged once, and writing resumes when there is room again.
* An unwritable state directory: the gateway starts anyway, serves, and says what it cannot
  keep (activity log, start times, the backend record), once each.
"""

from __future__ import annotations

import asyncio
import json
import resource
import socket
import time
from collections import Counter
from pathlib import Path

import aiohttp
import psutil
import pytest
from tests.e2e.conftest import chat, fake_cmd
from tests.reliability.conftest import Launched, LaunchFn, Report, free_port_range, log_problems

pytestmark = pytest.mark.reliability


def test_taken_ports_give_a_diagnosis_and_spawn_nothing(launch: LaunchFn, report: Report) -> None:
    first = free_port_range(2)
    squatters = []
    for port in (first, first + 1):
        sock = socket.socket()
        sock.bind(("127.0.0.1", port))
        sock.listen(1)
        squatters.append(sock)
    models = (
        f"  a:\n    cmd: {fake_cmd()}\n    failureBackoff: 0\n"
        f"  b:\n    cmd: {fake_cmd()}\n    failureBackoff: 0\n"
    )
    gw = launch(models, start_port=first)
    before = {p.pid for p in gw.descendants()}  # the orphan watchdog
    try:
        for model, port in (("a", first), ("b", first + 1)):
            reply = chat(gw, model)
            assert reply.status == 503, reply.body
            error = reply.json()["error"]
            assert error["code"] == "port_in_use"
            assert str(port) in error["message"]
            assert {p.pid for p in gw.descendants()} == before, "a backend was spawned"
    finally:
        for sock in squatters:
            sock.close()
    assert chat(gw, "a").status == 200  # the port is free again: it starts
    assert not log_problems(gw.log()), log_problems(gw.log())
    report(ports_taken=2, answers="503 port_in_use, then 200 once free")


async def burst(gw: Launched, models: list[str], count: int) -> Counter[str]:
    """``count`` streams at once; each ends ``complete`` or ``clean error`` (else it fails)."""
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    timeout = aiohttp.ClientTimeout(total=90)
    outcomes: Counter[str] = Counter()
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(i: int) -> None:
            body = {
                "model": models[i % len(models)],
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            }
            async with session.post(gw.url("/v1/chat/completions"), json=body) as resp:
                raw = await resp.read()
            if resp.status != 200:
                assert resp.headers.get("X-Modelswap-Error") == "1", (resp.status, raw)
                error = json.loads(raw)["error"]
                assert error["message"], error
                outcomes[f"{resp.status} {error['code']}"] += 1
                return
            events = [line[6:] for line in raw.split(b"\n") if line.startswith(b"data: ")]
            if events and events[-1] == b"[DONE]":
                tokens = sum(b'"content": "tok' in e for e in events)
                assert tokens == 20, raw[-300:]
                outcomes["complete"] += 1
            else:
                error = json.loads(events[-1])["error"]
                assert error["message"], raw[-300:]
                outcomes[f"stream error {error['code']}"] += 1

        await asyncio.gather(*(one(i) for i in range(count)))
    return outcomes


@pytest.mark.reliability_long
@pytest.mark.timeout(300)
async def test_a_low_descriptor_limit_is_survived(launch: LaunchFn, report: Report) -> None:
    cmd = fake_cmd("--tokens", "20", "--tps", "40")
    models = f"  a:\n    cmd: {cmd}\n  b:\n    cmd: {cmd}\n"
    groups = "groups:\n  all:\n    members: [a, b]\n    swap: false\n"
    gw = launch(models, extra_top=groups, rlimits={resource.RLIMIT_NOFILE: 256})
    proc = psutil.Process(gw.proc.pid)
    assert proc.rlimit(psutil.RLIMIT_NOFILE)[0] == 256
    for model in ("a", "b"):
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    assert chat(gw, "a").status == 200
    baseline = proc.num_fds()

    started = time.monotonic()
    outcomes = await burst(gw, ["a", "b"], 300)
    took = time.monotonic() - started
    assert sum(outcomes.values()) == 300
    assert outcomes["complete"] > 0, outcomes

    assert gw.proc.poll() is None, "the gateway died"
    for model in ("a", "b"):
        assert chat(gw, model).status == 200
        assert gw.running()[model]["state"] == "ready"
    # Answers that ended normally leave their connection in the gateway's pool for 15-30 s.
    waited = time.monotonic()
    for _ in range(180):
        if proc.num_fds() <= baseline + 4:
            break
        await asyncio.sleep(0.25)
    after = proc.num_fds()
    settled = time.monotonic() - waited
    conns = Counter(
        (c.status, c.raddr.port if c.raddr else None) for c in proc.net_connections("tcp")
    )
    assert after <= baseline + 4, (baseline, after, conns, outcomes)
    problems = log_problems(gw.log(), allow=["out of system resource", "Too many open files"])
    assert not problems, problems[:20]
    report(
        limit=256,
        streams=300,
        outcomes=dict(outcomes),
        burst_s=round(took, 1),
        fds_baseline=baseline,
        fds_after=after,
        fds_settled_after_s=round(settled, 1),
    )


def test_a_full_disk_under_the_activity_log_is_logged_once(
    launch: LaunchFn, report: Report
) -> None:
    gw = launch(f"  a:\n    cmd: {fake_cmd()}\n", pipe_log=True)
    for _ in range(5):
        assert chat(gw, "a").status == 200
    gw.wait_for(lambda: len(gw.get_json("/api/activity")["data"]) == 5, timeout=10)  # type: ignore[arg-type]
    proc = psutil.Process(gw.proc.pid)
    limits = proc.rlimit(psutil.RLIMIT_FSIZE)
    proc.rlimit(psutil.RLIMIT_FSIZE, (0, limits[1]))  # from now on every file write fails
    try:
        for _ in range(40):
            assert chat(gw, "a").status == 200
        gw.wait_for(lambda: "activity log:" in gw.log(), timeout=10)
        time.sleep(2.0)  # four more batches' worth of failures
        for _ in range(10):
            assert chat(gw, "a").status == 200
        time.sleep(1.5)
    finally:
        proc.rlimit(psutil.RLIMIT_FSIZE, limits)
    failures = [line for line in gw.log().splitlines() if "activity log:" in line]
    assert len(failures) == 1, failures
    assert "failed" in failures[0]
    for _ in range(3):
        assert chat(gw, "a").status == 200
    gw.wait_for(lambda: "activity log: writing again" in gw.log(), timeout=10)
    rows = gw.get_json("/api/activity?limit=1000")["data"]
    assert isinstance(rows, list)
    assert len(rows) >= 8  # the 5 before, the 3 after (the ones in between were dropped)
    problems = log_problems(gw.log())
    assert not problems, problems[:20]
    report(requests_while_full=50, failure_lines=len(failures), rows_after=len(rows))


def test_an_unwritable_state_directory_is_survived(
    launch: LaunchFn, tmp_path: Path, report: Report
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    gw = launch(f"  a:\n    cmd: {fake_cmd()}\n", state_dir=blocker / "state")  # ENOTDIR
    for _ in range(5):
        assert chat(gw, "a").status == 200
    log = gw.log()
    assert "activity log off" in log
    assert log.count("cannot record backend processes") == 1
    assert "cannot save" in log  # measured start times
    activity = gw.get_json("/api/activity")
    assert activity["enabled"] is False
    assert not log_problems(log), log_problems(log)
    report(requests=5, warnings=[w for w in ("activity log off", "cannot record", "cannot save")])
