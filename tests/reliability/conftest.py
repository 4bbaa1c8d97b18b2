"""Fixtures for the reliability suite: modelswap as a real subprocess, fake backends as real
programs, and a tracker that ends exactly the processes a test caused — never anything else.

The long scenarios carry the ``reliability_long`` marker and are skipped unless
``MODELSWAP_RELIABILITY_LONG=1`` (``make test-reliability`` sets it), as the vLLM tier is
skipped outside ``make test-vllm``; the fast ones run in every ``make test``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import resource
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from tests.e2e.conftest import (
    REPO,
    Gateway,
    free_port,
    free_port_range,
    serve_command,
    wait_healthy,
)

from modelswap.supervisor import cgroups, keeper_program
from modelswap.supervisor.containment import detect

LONG_ENV = "MODELSWAP_RELIABILITY_LONG"
REPORT_ENV = "MODELSWAP_RELIABILITY_REPORT"  # a JSON-lines file: what each scenario did


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(LONG_ENV) == "1":
        return
    skip = pytest.mark.skip(reason="long reliability scenario: run `make test-reliability`")
    for item in items:
        if item.get_closest_marker("reliability_long") is not None:
            item.add_marker(skip)


def alive(proc: psutil.Process) -> bool:
    """This exact process (pid + creation time) still runs; a zombie counts as dead."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree_of(pid: int) -> list[psutil.Process]:
    """``pid`` and its live descendants (empty if it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def wait_all_dead(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Poll (20 ms) until every process is dead or ``timeout`` passes; the survivors."""
    procs = list(procs)
    deadline = time.monotonic() + timeout
    while (left := [p for p in procs if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


def is_spare(proc: psutil.Process, gw: Gateway) -> bool:
    """Part of the gateway's unused spare keeper (``spareKeeper``): the keeper, its waiting
    child, or the gateway's fork about to exec one. A spare's keeper keeps ``--spare`` in its
    command line once used: then its child is the backend, and it counts as a backend's."""
    try:
        cmdline = proc.cmdline()
        if cmdline == gw.proc.args:
            return True
        if keeper_program.SPARE not in cmdline:
            return False
        return all(keeper_program.SPARE in child.cmdline() for child in proc.children())
    except psutil.Error:
        return False


def describe(procs: Iterable[psutil.Process]) -> str:
    rows = []
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            rows.append(f"pid {proc.pid} {proc.status()} {' '.join(proc.cmdline())[:200]}")
    return "\n".join(rows)


class Tracker:
    """Every process a test caused, as psutil handles (pid + creation time, so a recycled pid is
    never signalled). Teardown kills the ones still alive; nothing is ever killed by name."""

    def __init__(self) -> None:
        self.procs: dict[tuple[int, float], psutil.Process] = {}

    def add(self, pid: int) -> psutil.Process | None:
        if pid <= 1 or pid == os.getpid():
            return None
        try:
            proc = psutil.Process(pid)
            self.procs[(pid, proc.create_time())] = proc
            return proc
        except psutil.Error:
            return None

    def adopt_tree(self, pid: int) -> list[psutil.Process]:
        """Track ``pid`` (one of ours) and all its descendants now; returns them."""
        found = tree_of(pid)
        for proc in found:
            with contextlib.suppress(psutil.Error):
                self.procs[(proc.pid, proc.create_time())] = proc
        return found

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if alive(proc):
                with contextlib.suppress(psutil.Error):
                    proc.kill()
        wait_all_dead(self.procs.values(), 2.0)  # a zombie counts as dead: not ours to reap
        self._remove_cgroups()

    def _remove_cgroups(self) -> None:
        """The cgroups our gateways made (``modelswap-<gateway pid>-...``), now empty: a
        SIGKILLed gateway whose spare keepers were SIGKILLed too leaves them for the next
        gateway's sweep, and a test leaves nothing behind on the machine."""
        base = detect().cgroup_base
        if base is None:
            return
        pids = {pid for pid, _ in self.procs}
        for entry in base.glob("modelswap-*"):
            if cgroups.owner(entry.name) in pids:
                with contextlib.suppress(OSError):
                    entry.rmdir()  # only an empty one: rmdir of a populated cgroup fails


Report = Callable[..., None]


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Iterator[Report]:
    """``report(requests=1000, starts=16, ...)``: numbers for docs/RELIABILITY.md, appended
    with the test's id and wall time to the file named by $MODELSWAP_RELIABILITY_REPORT."""
    data: dict[str, object] = {}
    started = time.monotonic()
    yield data.update
    path = os.environ.get(REPORT_ENV)
    if path:
        line = {"test": request.node.nodeid, "seconds": round(time.monotonic() - started, 1)}
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({**line, **data}) + "\n")


@pytest.fixture
def tracker() -> Iterator[Tracker]:
    tracked = Tracker()
    yield tracked
    tracked.kill_all()


@dataclass
class Launched(Gateway):
    """A gateway started by :func:`launch`, with its config and state directory."""

    config_path: Path = field(default=Path())
    state_dir: Path = field(default=Path())

    def get_text(self, path: str) -> str:
        with urllib.request.urlopen(self.url(path), timeout=10) as resp:
            return str(resp.read().decode(errors="replace"))

    def descendants(self) -> list[psutil.Process]:
        return tree_of(self.proc.pid)[1:]

    def metric(self, name: str, **labels: str) -> float:
        """Sum of ``name`` samples in /metrics whose labels include ``labels``."""
        with urllib.request.urlopen(self.url("/metrics"), timeout=10) as resp:
            text = resp.read().decode()
        total = 0.0
        for line in text.splitlines():
            if not line.startswith(name):
                continue
            match = re.match(rf"{re.escape(name)}(\{{[^}}]*\}})? (\S+)$", line)
            if match is None:
                continue
            got = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
            if all(got.get(k) == v for k, v in labels.items()):
                total += float(match.group(2))
        return total


LaunchFn = Callable[..., Launched]


def _limits(rlimits: dict[int, int] | None) -> Callable[[], None] | None:
    if not rlimits:
        return None

    def apply() -> None:
        for which, value in rlimits.items():
            hard = resource.getrlimit(which)[1]
            resource.setrlimit(which, (value, hard))

    return apply


@pytest.fixture
def launch(tmp_path: Path, tracker: Tracker) -> Iterator[LaunchFn]:
    """Factory: ``launch(models_yaml, extra_top=..., state_dir=..., rlimits=..., wait=True)``
    writes a config (free listen port, a free ``startPort`` range, ``logLevel: debug``) and runs
    ``python -m modelswap serve`` with its output in a log file."""
    started: list[Launched] = []

    def start(
        models_yaml: str,
        *,
        extra_top: str = "",
        state_dir: Path | None = None,
        ports: int = 8,
        rlimits: dict[int, int] | None = None,
        wait: bool = True,
        start_port: int | None = None,
        listen_port: int | None = None,
        env: dict[str, str] | None = None,
        pipe_log: bool = False,
    ) -> Launched:
        n = len(started)
        port = listen_port or free_port()
        state = state_dir or tmp_path / "state"
        config = tmp_path / f"config-{n}.yaml"
        first = start_port if start_port is not None else free_port_range(ports)
        config.write_text(
            f"startPort: {first}\nlogLevel: debug\nstateDir: {state}\n{extra_top}\n"
            f"models:\n{models_yaml}"
        )
        log_path = tmp_path / f"modelswap-{n}.log"
        with log_path.open("wb") as log_file:
            # pipe_log: through a pipe this process copies to the file, so the gateway's own
            # file-size limit (a "full disk") cannot cut its log.
            proc = subprocess.Popen(
                serve_command(config, f"127.0.0.1:{port}"),
                stdout=subprocess.PIPE if pipe_log else log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
                cwd=REPO,
                preexec_fn=_limits(rlimits),  # only setrlimit, before exec
            )
        tracker.add(proc.pid)
        if pipe_log:
            threading.Thread(target=_copy, args=(proc, log_path), daemon=True).start()
        gw = Launched(proc, port, log_path, config_path=config, state_dir=state)
        started.append(gw)
        if wait:
            wait_healthy(gw)
            tracker.adopt_tree(proc.pid)  # the orphan watchdog
        return gw

    yield start
    for gw in started:  # quick: SIGKILL; the tracker then kills every process of its tree
        if gw.proc.poll() is None:
            tracker.adopt_tree(gw.proc.pid)
            gw.proc.kill()
            gw.proc.wait()
        if gw.proc.stdout is not None:
            gw.proc.stdout.close()


def _copy(proc: subprocess.Popen[bytes], path: Path) -> None:
    assert proc.stdout is not None
    with path.open("ab") as out:
        for line in proc.stdout:
            out.write(line)
            out.flush()


_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")


def log_problems(text: str, allow: Iterable[str] = ()) -> list[str]:
    """Gateway log lines that betray a bug: tracebacks, unhandled errors, ERROR records —
    except in records (a timestamped line and the lines under it) that contain ``allow``."""
    bad = ("Traceback", "Error handling request", "Unhandled exception", "Task exception")
    allowed = tuple(allow)
    records: list[list[str]] = []
    for line in text.splitlines():
        if _RECORD.match(line) or not records:
            records.append([line])
        else:
            records[-1].append(line)
    return [
        line
        for record in records
        if not any(phrase in record[0] for phrase in allowed)
        for line in record
        if any(word in line for word in bad) or re.search(r"\sERROR\s", line)
    ]


__all__ = [
    "REPO",
    "LaunchFn",
    "Launched",
    "Report",
    "Tracker",
    "alive",
    "describe",
    "free_port",
    "free_port_range",
    "log_problems",
    "tree_of",
    "wait_all_dead",
]
