"""Scenario 9: restart safety. A gateway is SIGKILLed after its orphan watchdog was killed too,
so its backends live on. A new gateway on the same state directory finds the backend trees
recorded there, ends them (a grandchild that called ``setsid()``, a SIGTERM-ignorer and a
``bash -c`` wrapper's child included) before it serves, and starts clean. The activity database
(SQLite, WAL) is intact and holds every row committed before the kill.

A gateway that is alive keeps its backends: a second gateway on the same state directory never
touches them.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
from tests.e2e.conftest import HANG, chat, fake_cmd
from tests.reliability.conftest import (
    Launched,
    LaunchFn,
    Report,
    Tracker,
    alive,
    describe,
    free_port_range,
    is_spare,
    log_problems,
    wait_all_dead,
)
from tests.reliability.test_signals import three_backends

pytestmark = pytest.mark.reliability

REQUESTS = 60


def activity_ids(gw: Launched) -> set[int]:
    rows = gw.get_json("/api/activity?limit=1000")["data"]
    assert isinstance(rows, list)
    return {int(row["id"]) for row in rows}


def load_three(gw: Launched, tracker: Tracker, pidfile: Path) -> list[psutil.Process]:
    for model in ("grandchild", "stubborn", "wrapped"):
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    # Not the spare keeper (spareKeeper): it serves no model, and ends with the gateway.
    procs = [p for p in tracker.adopt_tree(gw.proc.pid)[1:] if not is_spare(p, gw)]
    grandchild = tracker.add(int(pidfile.read_text()))
    assert grandchild is not None
    if grandchild not in procs:
        procs.append(grandchild)
    return procs


def recorded(state: Path) -> list[dict[str, object]]:
    files = sorted((state / "backends").glob("gateway-*.json"))
    return [json.loads(path.read_text()) for path in files]


def test_a_new_gateway_ends_what_a_killed_one_left_and_keeps_every_committed_row(
    launch: LaunchFn, tracker: Tracker, tmp_path: Path, report: Report
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    models, groups = three_backends(pidfile)
    first_port = free_port_range(8)
    old = launch(models, extra_top=groups, start_port=first_port)
    procs = load_three(old, tracker, pidfile)
    names = [("grandchild", "stubborn", "wrapped")[i % 3] for i in range(REQUESTS)]
    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(lambda m: chat(old, m, max_tokens=1).status, names))
    assert statuses == [200] * REQUESTS
    old.wait_for(lambda: len(activity_ids(old)) >= REQUESTS)
    committed = activity_ids(old)

    # The record names every backend and, within a tree refresh, the setsid() grandchild.
    grandchild_pid = int(pidfile.read_text())

    def grandchild_recorded() -> bool:
        trees = [b["tree"] for r in recorded(old.state_dir) for b in r["backends"]]  # type: ignore[attr-defined]
        return any(pid == grandchild_pid for t in trees for pid, _ in t)

    old.wait_for(grandchild_recorded)
    watchdog = [p for p in procs if "modelswap.supervisor.reaper" in " ".join(p.cmdline())]
    assert len(watchdog) == 1
    keepers = [p for p in procs if "supervisor/keeper_program.py" in " ".join(p.cmdline())]
    assert len(keepers) == 3
    backends = [p for p in procs if p not in watchdog and p not in keepers]

    # Every line of defence but the record is taken out: the gateway is frozen (so it cannot
    # react), the watchdog and each backend's keeper are SIGKILLed, then the gateway.
    os.kill(old.proc.pid, signal.SIGSTOP)
    for line in (*watchdog, *keepers):
        os.kill(line.pid, signal.SIGKILL)
    assert not wait_all_dead([*watchdog, *keepers], HANG)
    os.kill(old.proc.pid, signal.SIGKILL)
    old.proc.wait(timeout=HANG)
    # Both are dead and reaped: nothing is left that would end the backends.
    assert all(alive(p) for p in backends), "the leftovers must outlive the killed gateway"

    started = time.monotonic()
    new = launch(models, extra_top=groups, start_port=first_port, state_dir=old.state_dir)
    healthy_after = time.monotonic() - started
    left = wait_all_dead(backends, HANG)
    assert not left, f"leftovers survived the new gateway's start:\n{describe(left)}"
    log = new.log()
    assert f"leftover processes of modelswap pid {old.proc.pid}" in log, log
    assert not recorded(old.state_dir) or all(
        r["gateway"]["pid"] == new.proc.pid  # type: ignore[index]
        for r in recorded(old.state_dir)
    )

    for model in ("grandchild", "stubborn", "wrapped"):  # and it starts clean
        reply = chat(new, model, max_tokens=1)
        assert reply.status == 200, reply.body
    assert committed <= activity_ids(new), "committed activity rows were lost"
    db = old.state_dir / "activity.sqlite3"
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        stored = conn.execute("SELECT COUNT(*) FROM requests").fetchone()[0]
    assert not log_problems(log), log_problems(log)
    report(
        leftover_processes=len(backends),
        new_gateway_healthy_after_s=round(healthy_after, 2),
        committed_rows=len(committed),
        rows_after_restart=stored,
        integrity="ok",
    )


@pytest.mark.reliability_long
def test_a_live_gateways_backends_are_never_touched(
    launch: LaunchFn, tracker: Tracker, tmp_path: Path
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    models, groups = three_backends(pidfile)
    first = launch(models, extra_top=groups)
    procs = load_three(first, tracker, pidfile)
    assert recorded(first.state_dir)
    # The same state directory, while the first gateway runs.
    second = launch(f"  other:\n    cmd: {fake_cmd()}\n", state_dir=first.state_dir)
    # Healthy means its look for leftovers is over (it ends them before it serves).
    assert "leftover" not in second.log()
    assert all(alive(p) for p in procs), describe([p for p in procs if not alive(p)])
    assert chat(first, "stubborn").status == 200
