"""Fixtures for the integration tests: free ports, fake-backend model configs, real sessions.

Every child process a test causes is tracked by PID (plus creation time, so a recycled PID is
never signalled) and killed in teardown if it is still alive. Nothing here kills by name.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import psutil
import pytest
from tests.e2e.conftest import free_port_range

from modelswap.backends.diagnose import GenericDiagnoser
from modelswap.config import ModelConfig, Timeouts
from modelswap.events import EventBus
from modelswap.supervisor import cgroups
from modelswap.supervisor.containment import CGROUP, Containment, detect
from modelswap.supervisor.process import ManagedProcess

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
FAKE = REPO / "tests" / "fakes" / "openai_backend.py"
HANG_CEILING = 30.0  # only ends a hang: what the tests here wait for comes within ~2 s


def wait_until(done: Callable[[], bool], what: str, ceiling: float = HANG_CEILING) -> None:
    """Poll until ``done()``; fail naming ``what`` after ``ceiling`` seconds."""
    deadline = time.monotonic() + ceiling
    while not done():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {ceiling} s")
        time.sleep(0.01)


_PID_LINE = re.compile(r"fake backend starting: pid=(\d+)|grandchild pid (\d+)")


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago, below the kernel's ephemeral range
    (one bound to port 0 is an ephemeral one, which any outgoing connection on a busy machine
    may take before the backend binds it)."""
    return free_port_range(1)


def is_alive(proc: psutil.Process) -> bool:
    """True if this exact process (PID + creation time) still runs; a zombie counts as dead."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def pid_alive(pid: int) -> bool:
    try:
        return is_alive(psutil.Process(pid))
    except psutil.Error:
        return False


def subprocess_env() -> dict[str, str]:
    """Our environment with ``src`` on PYTHONPATH, so children can import modelswap."""
    env = dict(os.environ)
    parts = [str(SRC), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env


class ProcessTracker:
    """Remembers processes (as psutil handles) so teardown can kill exactly those."""

    def __init__(self) -> None:
        self._procs: list[psutil.Process] = []

    def add(self, pid: int) -> None:
        with contextlib.suppress(psutil.Error):
            self._procs.append(psutil.Process(pid))

    def watch_line(self, line: str) -> None:
        """A LogBuffer listener: track the PIDs the fake backend announces."""
        match = _PID_LINE.search(line)
        if match:
            self.add(int(match.group(1) or match.group(2)))

    def kill_all(self) -> None:
        for proc in self._procs:
            if is_alive(proc):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        for proc in self._procs:
            with contextlib.suppress(psutil.Error):
                proc.wait(timeout=2)  # reaps our own children; no-op for others


class MakeModel(Protocol):
    def __call__(self, *fake_args: str, port: int | None = None, **overrides: Any) -> ModelConfig:
        """A fake-backend ModelConfig; ``fake_args`` are appended to the fake's command line."""
        ...


class MakeProcess(Protocol):
    def __call__(
        self, config: ModelConfig, *, stop_grace: float = 1.0, **kwargs: Any
    ) -> ManagedProcess: ...


@pytest.fixture
def tracker() -> Iterator[ProcessTracker]:
    tracked = ProcessTracker()
    yield tracked
    tracked.kill_all()


@pytest.fixture(scope="module")
def writable_cgroup() -> Iterator[Containment]:
    """The cgroup mechanism: the one this machine offers, else a cgroup2 mount of our own (as
    root); skipped with the reason where neither is possible."""
    found = detect()
    if found.mechanism == CGROUP:
        yield found
        return
    if os.geteuid() != 0:
        pytest.skip(f"no writable cgroup v2 ({found.detail}), and not root to mount one")
    mount = Path(tempfile.mkdtemp(prefix="modelswap-cgroup2-"))
    done = subprocess.run(
        ["mount", "-t", "cgroup2", "none", str(mount)], capture_output=True, text=True
    )
    if done.returncode != 0:
        mount.rmdir()
        pytest.skip(f"no writable cgroup v2 ({found.detail}); mount failed: {done.stderr.strip()}")
    try:
        reason = cgroups.check_base(mount)  # our own cgroup in a fresh mount is its root
        if reason is not None:
            pytest.skip(f"the test's cgroup2 mount is not usable: {reason}")
        yield Containment(CGROUP, f"a cgroup2 mount of the tests' own at {mount}", mount)
    finally:
        for leftover in mount.glob(f"{cgroups.PREFIX}{os.getpid()}-*"):
            cgroups.end(leftover)
        subprocess.run(["umount", str(mount)], check=False)
        with contextlib.suppress(OSError):
            mount.rmdir()


@pytest.fixture(name="free_port")
def free_port_fixture() -> Callable[[], int]:
    return free_port


@pytest.fixture
def make_model() -> MakeModel:
    counter = 0

    def make(*fake_args: str, port: int | None = None, **overrides: Any) -> ModelConfig:
        nonlocal counter
        counter += 1
        if port is None:
            port = free_port()
        fields: dict[str, Any] = {
            "id": f"fake{counter}",
            "cmd": (sys.executable, str(FAKE), "--port", str(port), *fake_args),
            "cmd_stop": None,
            "proxy": f"http://127.0.0.1:{port}",
            "port": port,
            "aliases": (),
            "use_model_name": None,
            "env": {},
            "check_endpoint": "/health",
            "ttl": 0.0,
            "unlisted": False,
            "name": None,
            "description": None,
            "backend": "llamacpp",
            "timeouts": Timeouts(),
            "start_timeout": 10.0,
            "silence_timeout": 10.0,
            "failure_backoff": 0.0,
        }
        fields.update(overrides)
        return ModelConfig(**fields)

    return make


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


@pytest.fixture
def events() -> EventBus:
    return EventBus()


@pytest.fixture
async def make_process(
    events: EventBus, session: aiohttp.ClientSession, tracker: ProcessTracker
) -> AsyncIterator[MakeProcess]:
    """ManagedProcess factory; every process made is shut down (and its children killed) after."""
    made: list[ManagedProcess] = []

    def make(config: ModelConfig, *, stop_grace: float = 1.0, **kwargs: Any) -> ManagedProcess:
        kwargs.setdefault("reaper", None)
        kwargs.setdefault("diagnoser", GenericDiagnoser())
        process = ManagedProcess(
            config, events=events, session=session, stop_grace=stop_grace, **kwargs
        )
        process.logs.add_listener(tracker.watch_line)
        made.append(process)
        return process

    yield make
    for process in made:
        # Bounded: a shutdown that hangs must not hang the suite; the tracker then kills, by
        # PID, whatever is left.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(30):
                await process.shutdown()
