"""The orphan reaper (docs/architecture.md, "Process lifecycle"): no backend outlives the
gateway, even a SIGKILLed gateway.

The main test runs ``tests/fakes/orphan_gateway.py`` (a real gateway-like program with a
Reaper and several ManagedProcess backends), SIGKILLs it, and checks that every process it
started is gone soon after. Only processes these tests started are ever registered or signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.integration.conftest import (
    REPO,
    SRC,
    MakeModel,
    MakeProcess,
    ProcessTracker,
    is_alive,
    subprocess_env,
)

from modelswap.events import Event, EventBus
from modelswap.states import ProcessState
from modelswap.supervisor.reaper import GRACE_SECONDS, Reaper

pytestmark = pytest.mark.integration

ORPHAN_GATEWAY = REPO / "tests" / "fakes" / "orphan_gateway.py"
REAP_DEADLINE = 60.0  # the watchdog's grace for SIGTERM-ignorers is GRACE_SECONDS (1.5 s)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]


def read_line(proc: subprocess.Popen[bytes], timeout: float, errors: Path) -> bytes:
    """One line of ``proc``'s stdout, or fail with its stderr after ``timeout`` seconds."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None:
            pytest.fail(f"no line from {proc.args!r} (rc={proc.poll()}):\n{errors.read_text()}")
        ready, _, _ = select.select([fd], [], [], min(remaining, 0.1))
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                continue
            data += chunk
    return data.split(b"\n", 1)[0]


def survivors(procs: dict[str, psutil.Process], deadline: float) -> dict[str, psutil.Process]:
    """Poll (50 ms steps) until every process is dead or ``deadline`` passes; the living."""
    while True:
        alive = {name: proc for name, proc in procs.items() if is_alive(proc)}
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def describe(procs: dict[str, psutil.Process]) -> str:
    rows = []
    for name, proc in procs.items():
        with contextlib.suppress(psutil.Error):
            rows.append(f"{name}: pid {proc.pid} {proc.status()} {proc.cmdline()}")
    return "\n".join(rows)


@pytest.fixture
def reaper_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watchdog runs ``python -m modelswap.supervisor.reaper``: make ``src`` importable."""
    monkeypatch.setenv("PYTHONPATH", subprocess_env()["PYTHONPATH"])
    assert str(SRC) in os.environ["PYTHONPATH"]


@pytest.fixture
def reaper(reaper_env: None, tracker: ProcessTracker) -> Iterator[Reaper]:
    watchdog = Reaper()
    watchdog.start()
    assert watchdog.pid is not None
    tracker.add(watchdog.pid)
    yield watchdog
    watchdog.close()


@pytest.fixture
def sleeper(tracker: ProcessTracker) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Start throwaway processes (in their own sessions) that only the test knows of."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def start_sleeper(started: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(SLEEPER, start_new_session=True, stdin=subprocess.DEVNULL)
    started.append(proc)
    return proc


# ---- the guarantee: a SIGKILLed gateway leaves nothing behind ------------------------------


def test_sigkilled_gateway_leaves_no_backend_alive(
    reaper_env: None, tracker: ProcessTracker, tmp_path: Path
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    errors = tmp_path / "gateway.stderr"
    with errors.open("wb") as stderr:
        gateway = subprocess.Popen(
            [sys.executable, str(ORPHAN_GATEWAY), "--pidfile", str(pidfile), "--starting"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=subprocess_env(),
            cwd=REPO,
            start_new_session=True,
        )
    tracker.add(gateway.pid)
    try:
        info = json.loads(read_line(gateway, 60.0, errors))
        procs: dict[str, psutil.Process] = {}
        for name, pid in info["backends"].items():
            procs[name] = psutil.Process(pid)
            tracker.add(pid)
        grandchild_pid = int(pidfile.read_text())
        procs["grandchild's grandchild"] = psutil.Process(grandchild_pid)
        tracker.add(grandchild_pid)
        assert info["wrapped_children"], "bash should still be the fake's parent"
        for pid in info["wrapped_children"]:
            procs[f"child {pid} of the bash wrapper"] = psutil.Process(pid)
            tracker.add(pid)
        watchdog = psutil.Process(info["reaper"])
        tracker.add(watchdog.pid)
        assert os.getsid(grandchild_pid) != os.getsid(info["backends"]["grandchild"])
        assert all(is_alive(proc) for proc in procs.values()), describe(procs)
        assert is_alive(watchdog)

        os.kill(gateway.pid, signal.SIGKILL)
        assert gateway.wait(timeout=60) == -signal.SIGKILL

        left = survivors(procs, time.monotonic() + REAP_DEADLINE)
        assert not left, f"outlived the gateway:\n{describe(left)}"
        assert not survivors({"watchdog": watchdog}, time.monotonic() + 30.0), "watchdog lingers"
    finally:
        if gateway.poll() is None:
            gateway.kill()
        gateway.wait(timeout=60)
        assert gateway.stdout is not None
        gateway.stdout.close()


# ---- the Reaper protocol ---------------------------------------------------------------------


def test_unregistered_process_is_left_alone(
    reaper: Reaper, sleeper: list[subprocess.Popen[bytes]]
) -> None:
    stopped_backend = start_sleeper(sleeper)
    running_backend = start_sleeper(sleeper)
    reaper.register(stopped_backend.pid)
    reaper.register(running_backend.pid)
    reaper.unregister(stopped_backend.pid)

    reaper.close()  # as if the gateway exited

    assert running_backend.wait(timeout=60) == -signal.SIGTERM
    assert stopped_backend.poll() is None


def test_close_with_nothing_registered_exits_promptly(reaper: Reaper) -> None:
    assert reaper.pid is not None
    watchdog = psutil.Process(reaper.pid)
    assert is_alive(watchdog), "the watchdog died on its own (can it import modelswap?)"

    reaper.close()  # returns once the watchdog exited (its own wait is bounded)

    assert not is_alive(watchdog)
    assert reaper.pid is None


def test_sigterm_ignoring_process_gets_sigkill(
    reaper: Reaper, sleeper: list[subprocess.Popen[bytes]]
) -> None:
    stubborn = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ok', flush=True); time.sleep(120)",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    sleeper.append(stubborn)
    assert stubborn.stdout is not None
    assert stubborn.stdout.readline() == b"ok\n"  # SIGTERM is ignored from here on
    stubborn.stdout.close()
    reaper.register(stubborn.pid)

    started = time.monotonic()
    reaper.close()

    assert stubborn.wait(timeout=60) == -signal.SIGKILL
    assert time.monotonic() - started >= GRACE_SECONDS  # SIGKILL only after the grace


def test_reaper_methods_never_raise_once_the_watchdog_is_gone(
    reaper: Reaper, sleeper: list[subprocess.Popen[bytes]]
) -> None:
    assert reaper.pid is not None
    os.kill(reaper.pid, signal.SIGKILL)
    psutil.Process(reaper.pid).wait(timeout=60)
    ours = start_sleeper(sleeper)
    reaper.register(ours.pid)  # the pipe is broken: must not raise
    reaper.unregister(ours.pid)
    reaper.close()
    assert reaper.pid is None
    assert ours.poll() is None


async def test_managed_process_registers_its_backend_tree(
    reaper: Reaper,
    make_model: MakeModel,
    make_process: MakeProcess,
    events: EventBus,
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    """Closing the watchdog's pipe (what a gateway's death does) takes the backend and the
    grandchild that escaped its session; the ManagedProcess then sees its backend die."""
    pidfile = tmp_path / "grandchild.pid"
    config = make_model("--fork-grandchild", str(pidfile))
    process = make_process(config, reaper=reaper)
    failed = asyncio.Event()

    def on_event(event: Event) -> None:
        if event.kind == "process.state" and event.data["new"] is ProcessState.FAILED:
            failed.set()

    events.add_listener(on_event)
    await process.ensure_ready()
    assert process.pid is not None
    backend = psutil.Process(process.pid)
    grandchild = psutil.Process(int(pidfile.read_text()))
    tracker.add(grandchild.pid)
    # No wait for the watchdog's next snapshot: the grandchild is in its keeper's tree,
    # which the watchdog knows from the start and which ends with it.

    await asyncio.to_thread(reaper.close)

    async with asyncio.timeout(REAP_DEADLINE):
        await failed.wait()
    assert not is_alive(backend)
    left = survivors({"grandchild": grandchild}, time.monotonic() + 30.0)
    assert not left, describe(left)
    assert process.state is ProcessState.FAILED
