"""The spare keeper (``spareKeeper``, supervisor/spare.py): a keeper started ahead of the next
backend start, its child already in a cgroup of its own, waiting for the command. It never
outlives the gateway (SIGKILLed or stopped), a reload replaces it, one that someone killed is
replaced and never used, and a backend started from it is an ordinary backend: its pid in
/running, the keeper its parent, in the spare's cgroup.
"""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil
from tests.e2e.conftest import chat_body, fake_cmd, request
from tests.reliability.conftest import (
    Launched,
    LaunchFn,
    Tracker,
    alive,
    describe,
    wait_all_dead,
)

from modelswap.supervisor import cgroups, keeper_program
from modelswap.supervisor.containment import CGROUP, detect

CEILING = 30.0  # only ends a hang: a spare is ready within tens of milliseconds
READY = re.compile(r"spare keeper (\d+) ready")
MODELS = f"  m:\n    cmd: {fake_cmd()}\n"


def spare_of(gw: Launched, *, other_than: int | None = None) -> psutil.Process:
    """The gateway's spare keeper once the gateway says it is ready (its child waits in its
    cgroup); not ``other_than``."""
    deadline = time.monotonic() + CEILING
    while time.monotonic() < deadline:
        assert gw.proc.poll() is None, gw.log()
        ready = [int(pid) for pid in READY.findall(gw.log()) if int(pid) != other_than]
        for pid in ready[-1:]:
            spare = psutil.Process(pid)
            assert keeper_program.SPARE in spare.cmdline()
            return spare
        time.sleep(0.02)
    raise AssertionError(f"no spare keeper appeared:\n{gw.log()}")


def waiting_child(spare: psutil.Process) -> psutil.Process:
    (child,) = spare.children()
    return child


def cgroup_dir(pid: int) -> Path | None:
    """The cgroup v2 directory of ``pid`` when it is one of ours, else None."""
    base = detect().cgroup_base
    text = Path(f"/proc/{pid}/cgroup").read_text()
    path = cgroups.own_cgroup(text) or ""
    name = path.rsplit("/", 1)[-1]
    if base is None or not name.startswith(cgroups.PREFIX):
        return None
    return base / name


def wait_gone(path: Path) -> None:
    deadline = time.monotonic() + CEILING
    while path.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not path.exists(), f"{path} outlived its spare"


def backend_pid(gw: Launched) -> int:
    """Ask the model (starting it): the fake backend says its pid in a header."""
    reply = request(gw, "POST", "/v1/chat/completions", chat_body("m"))
    assert reply.status == 200, reply.body
    return int(reply.headers["X-Fake-Pid"])


def has_cgroups() -> bool:
    return detect().mechanism == CGROUP


def test_a_spare_keeper_goes_with_a_sigkilled_gateway(launch: LaunchFn, tracker: Tracker) -> None:
    gw = launch(MODELS)
    spare = spare_of(gw)
    child = waiting_child(spare)
    tracker.adopt_tree(spare.pid)
    where = cgroup_dir(child.pid)
    if has_cgroups():
        assert where is not None, "the spare's child is not in a cgroup of its own"
        assert where.name.endswith("-spare"), where
        assert cgroup_dir(spare.pid) != where  # cgroup.kill must not take the keeper

    os.kill(gw.proc.pid, signal.SIGKILL)

    left = wait_all_dead([spare, child], CEILING)
    assert not left, f"outlived a SIGKILLed gateway:\n{describe(left)}"
    if where is not None:
        wait_gone(where)


def test_stopping_the_gateway_ends_its_spare(launch: LaunchFn, tracker: Tracker) -> None:
    gw = launch(MODELS)
    spare = spare_of(gw)
    child = waiting_child(spare)
    tracker.adopt_tree(spare.pid)
    where = cgroup_dir(child.pid)

    gw.proc.send_signal(signal.SIGTERM)
    assert gw.proc.wait(CEILING) == 0

    assert not wait_all_dead([spare, child], CEILING)
    if where is not None:
        wait_gone(where)


def test_a_reload_replaces_the_spare(launch: LaunchFn, tracker: Tracker) -> None:
    gw = launch(MODELS)
    old = spare_of(gw)
    child = waiting_child(old)
    tracker.adopt_tree(old.pid)
    where = cgroup_dir(child.pid)

    gw.proc.send_signal(signal.SIGHUP)

    new = spare_of(gw, other_than=old.pid)
    tracker.adopt_tree(new.pid)
    assert not wait_all_dead([old, child], CEILING)
    if where is not None:
        wait_gone(where)


def test_a_killed_spare_is_replaced_and_never_used(launch: LaunchFn, tracker: Tracker) -> None:
    gw = launch(MODELS)
    dead = spare_of(gw)
    child = waiting_child(dead)
    tracker.adopt_tree(dead.pid)
    where = cgroup_dir(child.pid)

    dead.kill()  # ours: started by the gateway this test started

    new = spare_of(gw, other_than=dead.pid)
    tracker.adopt_tree(new.pid)
    assert not wait_all_dead([dead, child], CEILING)
    if where is not None:
        wait_gone(where)  # the gateway removed what the dead keeper left
    backend = psutil.Process(backend_pid(gw))
    tracker.add(backend.pid)
    assert backend.ppid() == new.pid


def test_a_backend_started_from_the_spare_is_an_ordinary_one(
    launch: LaunchFn, tracker: Tracker
) -> None:
    gw = launch(MODELS)
    spare = spare_of(gw)
    child = waiting_child(spare)
    tracker.adopt_tree(spare.pid)
    where = cgroup_dir(child.pid)

    assert backend_pid(gw) == child.pid  # the waiting child became the backend
    assert "openai_backend" in " ".join(child.cmdline())
    assert cgroup_dir(child.pid) == where
    after = spare_of(gw, other_than=spare.pid)  # made again once the start was READY
    tracker.adopt_tree(after.pid)
    assert request(gw, "POST", "/api/models/unload", b"").status == 200
    assert not wait_all_dead([spare, child], CEILING)
    if where is not None:
        wait_gone(where)

    backend = psutil.Process(backend_pid(gw))  # again: from the spare made after the first
    tracker.add(backend.pid)
    assert backend.ppid() == after.pid
    gw.proc.send_signal(signal.SIGTERM)  # a stop with a backend from the spare still running
    assert gw.proc.wait(CEILING) == 0
    assert not wait_all_dead([after, backend], CEILING)


def test_the_switch_turns_it_off_and_a_reload_on(launch: LaunchFn, tracker: Tracker) -> None:
    gw = launch(MODELS, extra_top="spareKeeper: false")
    assert request(gw, "POST", "/v1/chat/completions", chat_body("m")).status == 200
    spares = [p for p in gw.descendants() if alive(p) and keeper_program.SPARE in p.cmdline()]
    assert not spares, describe(spares)

    text = gw.config_path.read_text().replace("spareKeeper: false", "spareKeeper: true")
    gw.config_path.write_text(text)
    gw.proc.send_signal(signal.SIGHUP)

    tracker.adopt_tree(spare_of(gw).pid)
