"""ManagedProcess against real fake-backend processes (docs/architecture.md, "Process lifecycle").

Each test starts ``tests/fakes/openai_backend.py`` through a real ManagedProcess on a free
loopback port. State changes are observed through the EventBus, never by sleeping.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import aiohttp
import psutil
import pytest
from tests.integration.conftest import (
    MakeModel,
    MakeProcess,
    ProcessTracker,
    free_port,
    is_alive,
    pid_alive,
)

from modelswap.errors import ShuttingDownError, StartError
from modelswap.events import Event, EventBus
from modelswap.states import ProcessState
from modelswap.supervisor.logs import LogBuffer
from modelswap.supervisor.process import ManagedProcess

pytestmark = pytest.mark.integration

S = ProcessState
WAIT = 60.0  # a ceiling that only ends a hang


class StateLog:
    """Records one model's state transitions; lets a test await the n-th entry into a state."""

    def __init__(self, events: EventBus, model: str) -> None:
        self.model = model
        self.transitions: list[tuple[ProcessState, ProcessState]] = []
        self.details: list[dict[str, object]] = []
        self._changed = asyncio.Event()
        events.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.kind != "process.state" or event.data.get("model") != self.model:
            return
        self.transitions.append((event.data["old"], event.data["new"]))
        self.details.append(event.data)
        self._changed.set()

    def count(self, state: ProcessState) -> int:
        return sum(1 for _, new in self.transitions if new is state)

    async def wait_for(self, state: ProcessState, times: int = 1, within: float = WAIT) -> None:
        async with asyncio.timeout(within):
            while self.count(state) < times:
                self._changed.clear()
                await self._changed.wait()


class LineWatch:
    """Records when lines matching a pattern arrive in a LogBuffer (and wakes waiters)."""

    def __init__(self, process: ManagedProcess, pattern: str) -> None:
        self._pattern = re.compile(pattern)
        self.lines: list[tuple[float, str]] = []
        self._seen = asyncio.Event()
        process.logs.add_listener(self._on_line)

    def _on_line(self, line: str) -> None:
        if self._pattern.search(line):
            self.lines.append((time.time(), line))
            self._seen.set()

    async def wait(self, within: float = WAIT) -> None:
        async with asyncio.timeout(within):
            await self._seen.wait()


def state_now(process: ManagedProcess) -> ProcessState:
    """A fresh read of the state (a snapshot that awaits change; keeps mypy from narrowing)."""
    return process.state


def started_pids(process: ManagedProcess) -> LineWatch:
    return LineWatch(process, r"fake backend starting: pid=(\d+)")


def pids_of(watch: LineWatch) -> list[int]:
    found = []
    for _, line in watch.lines:
        match = re.search(r"pid=(\d+)", line)
        assert match is not None
        found.append(int(match.group(1)))
    return found


async def wait_gone(proc: psutil.Process, within: float = 3.0) -> None:
    deadline = time.monotonic() + within
    while is_alive(proc):
        if time.monotonic() > deadline:
            pytest.fail(f"process {proc.pid} ({proc.name()}) still alive after {within} s")
        await asyncio.sleep(0.02)


def fake_children(port: int) -> list[psutil.Process]:
    """Live descendants of this test process that are a fake backend on ``port``."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            if str(port) in child.cmdline() and is_alive(child):
                found.append(child)
        except psutil.Error:
            continue
    return found


# ---- start → ready ---------------------------------------------------------------------------


async def test_start_goes_stopped_starting_ready(
    make_model: MakeModel,
    make_process: MakeProcess,
    events: EventBus,
    session: aiohttp.ClientSession,
) -> None:
    config = make_model()
    process = make_process(config)
    states = StateLog(events, config.id)
    assert process.state is S.STOPPED
    assert process.pid is None

    await process.ensure_ready()

    assert state_now(process) is S.READY
    assert states.transitions == [(S.STOPPED, S.STARTING), (S.STARTING, S.READY)]
    pid = process.pid
    assert pid is not None
    assert pid_alive(pid)
    async with session.get(config.proxy + "/health") as response:
        assert response.status == 200
        assert response.headers["X-Fake-Pid"] == str(pid)
    assert process.started_at is not None
    assert process.ready_at is not None
    assert process.ready_at >= process.started_at

    await process.ensure_ready()  # already ready: no second start
    assert process.pid == pid
    assert states.count(S.STARTING) == 1


async def test_concurrent_ensure_ready_starts_one_process(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    port = free_port()
    config = make_model("--load-delay", "0.3", port=port)
    process = make_process(config)
    states = StateLog(events, config.id)
    starts = started_pids(process)

    await asyncio.gather(*(process.ensure_ready() for _ in range(5)))

    assert process.state is S.READY
    assert states.count(S.STARTING) == 1
    assert pids_of(starts) == [process.pid]
    assert [child.pid for child in fake_children(port)] == [process.pid]


async def test_a_cancelled_waiter_does_not_abort_the_start(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    config = make_model("--load-delay", "0.5")
    process = make_process(config)
    states = StateLog(events, config.id)
    loading = LineWatch(process, r"main: loading model")
    impatient = asyncio.create_task(process.ensure_ready())
    patient = asyncio.create_task(process.ensure_ready())
    await loading.wait()

    impatient.cancel()
    with pytest.raises(asyncio.CancelledError):
        await impatient
    await patient

    assert process.state is S.READY
    assert states.count(S.STARTING) == 1


@pytest.mark.parametrize("flavor", ["llamacpp", "vllm"])
async def test_readiness_is_detected_promptly(
    make_model: MakeModel, make_process: MakeProcess, flavor: str
) -> None:
    """llama.cpp answers 503 while loading, vLLM refuses connections: both are "not yet"."""
    load_delay = 0.5
    config = make_model("--flavor", flavor, "--load-delay", str(load_delay))
    process = make_process(config)
    loading = LineWatch(process, r"main: loading model|Starting to load model")
    became_ready = LineWatch(process, r"fake backend ready on")

    await process.ensure_ready()

    assert process.state is S.READY
    assert process.started_at is not None
    assert process.ready_at is not None
    assert loading.lines
    assert became_ready.lines
    load_started_at = loading.lines[0][0]
    # Not ready before the backend finished loading (a lower bound: load cannot shorten it;
    # how soon after is speed, measured in bench/cold_start.py).
    assert process.ready_at - load_started_at >= load_delay - 0.05


# ---- stop --------------------------------------------------------------------------------


async def test_stop_sends_sigterm_and_the_backend_exits(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    config = make_model()
    process = make_process(config)
    states = StateLog(events, config.id)
    await process.ensure_ready()
    pid = process.pid
    assert pid is not None

    await process.stop()

    assert process.state is S.STOPPED
    assert states.transitions[-2:] == [(S.READY, S.STOPPING), (S.STOPPING, S.STOPPED)]
    assert process.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # gone and reaped
    tail = process.logs.tail()
    assert "fake backend: received signal, shutting down" in tail
    assert "[modelswap] backend exited (0)" in tail
    assert not any("SIGKILL" in line for line in tail)

    await process.stop()  # idempotent
    assert process.state is S.STOPPED


async def test_stop_escalates_to_sigkill_after_the_grace_period(
    make_model: MakeModel, make_process: MakeProcess
) -> None:
    grace = 0.5
    process = make_process(make_model("--ignore-sigterm"), stop_grace=grace)
    await process.ensure_ready()
    pid = process.pid
    assert pid is not None

    started = time.monotonic()
    await process.stop()
    took = time.monotonic() - started

    assert took >= grace  # it waited out the grace before SIGKILL (how long after: bench)
    assert process.state is S.STOPPED
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    tail = process.logs.tail()
    assert any("SIGKILL" in line for line in tail)
    assert f"[modelswap] backend exited (-{signal.SIGKILL.value})" in tail


STOPPER = (
    "import os, signal, sys; "
    "open(sys.argv[2], 'w').write(sys.argv[1]); "
    "os.kill(int(sys.argv[1]), signal.SIGTERM)"
)


async def test_cmd_stop_is_used_instead_of_sigterm(
    make_model: MakeModel, make_process: MakeProcess, tmp_path: Path
) -> None:
    marker = tmp_path / "stopped-by-cmd-stop"
    config = make_model(cmd_stop=(sys.executable, "-c", STOPPER, "${PID}", str(marker)))
    process = make_process(config)
    await process.ensure_ready()
    pid = process.pid

    await process.stop()

    assert marker.read_text() == str(pid)  # ${PID} was substituted and the command ran
    assert process.state is S.STOPPED
    assert pid is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "[modelswap] backend exited (0)" in process.logs.tail()


async def test_a_broken_cmd_stop_falls_back_to_sigterm(
    make_model: MakeModel, make_process: MakeProcess
) -> None:
    config = make_model(cmd_stop=("/nonexistent/modelswap-test-stopper", "${PID}"))
    process = make_process(config)
    await process.ensure_ready()

    await process.stop()

    tail = process.logs.tail()
    assert any("cmdStop failed" in line for line in tail)
    assert "fake backend: received signal, shutting down" in tail
    assert process.state is S.STOPPED


async def test_stop_kills_a_grandchild_that_left_the_session(
    make_model: MakeModel, make_process: MakeProcess, tracker: ProcessTracker, tmp_path: Path
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    process = make_process(make_model("--fork-grandchild", str(pidfile)))
    await process.ensure_ready()
    assert process.pid is not None
    grandchild_pid = int(pidfile.read_text())
    tracker.add(grandchild_pid)
    grandchild = psutil.Process(grandchild_pid)
    assert is_alive(grandchild)
    assert os.getsid(grandchild_pid) != os.getsid(process.pid)  # the group kill cannot reach it

    await process.stop()

    await wait_gone(grandchild)


async def test_ensure_ready_during_a_stop_waits_then_starts_again(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    config = make_model("--ignore-sigterm")
    process = make_process(config, stop_grace=0.5)
    states = StateLog(events, config.id)
    await process.ensure_ready()
    first = process.pid

    stopping = asyncio.create_task(process.stop())
    await states.wait_for(S.STOPPING)
    await process.ensure_ready()
    await stopping

    assert process.state is S.READY
    assert process.pid is not None
    assert process.pid != first
    assert states.transitions[-4:] == [
        (S.READY, S.STOPPING),
        (S.STOPPING, S.STOPPED),
        (S.STOPPED, S.STARTING),
        (S.STARTING, S.READY),
    ]


# ---- failures to start -------------------------------------------------------------------


async def test_failed_start_is_diagnosed_and_retried_on_the_next_request(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    config = make_model("--fail-start")
    process = make_process(config)
    states = StateLog(events, config.id)
    starts = started_pids(process)

    with pytest.raises(StartError) as failed:
        await process.ensure_ready()

    diagnosis = failed.value.diagnosis
    assert diagnosis.code == "model_load_error"
    assert diagnosis.evidence is not None
    assert diagnosis.evidence in process.logs.tail()  # a real line the backend printed
    assert re.search(r"error loading model|model loading error", diagnosis.evidence)
    assert diagnosis.numbers.get("returncode") == 1.0
    assert process.state is S.FAILED
    assert process.last_failure == diagnosis
    assert states.transitions == [(S.STOPPED, S.STARTING), (S.STARTING, S.FAILED)]
    assert states.details[-1]["diagnosis"] == diagnosis.as_dict()
    assert process.pid is None

    with pytest.raises(StartError) as again:
        await process.ensure_ready()  # failed is terminal for one attempt only

    assert again.value.diagnosis.code == "model_load_error"
    assert states.count(S.STARTING) == 2
    first, second = pids_of(starts)
    assert first != second
    assert not pid_alive(first)
    assert not pid_alive(second)


async def test_missing_executable_is_diagnosed(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    config = make_model(cmd=("/nonexistent/modelswap-test-server", "--port", "1"))
    process = make_process(config)
    states = StateLog(events, config.id)

    with pytest.raises(StartError) as failed:
        await process.ensure_ready()

    assert failed.value.diagnosis.code == "executable_not_found"
    assert "/nonexistent/modelswap-test-server" in failed.value.diagnosis.summary
    assert process.state is S.FAILED
    assert states.transitions == [(S.STOPPED, S.STARTING), (S.STARTING, S.FAILED)]


@pytest.mark.parametrize("occupant_host", ["127.0.0.1", "0.0.0.0"])
async def test_port_in_use_is_diagnosed_without_spawning(
    make_model: MakeModel, make_process: MakeProcess, occupant_host: str
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as occupant:
        occupant.bind((occupant_host, 0))
        occupant.listen()
        port = occupant.getsockname()[1]
        process = make_process(make_model(port=port))
        before = {child.pid for child in psutil.Process().children(recursive=True)}

        with pytest.raises(StartError) as failed:
            await process.ensure_ready()

        after = {child.pid for child in psutil.Process().children(recursive=True)}
    assert failed.value.diagnosis.code == "port_in_use"
    assert failed.value.diagnosis.numbers.get("port") == float(port)
    assert process.state is S.FAILED
    assert after <= before  # no child was spawned
    assert not any("[modelswap] starting" in line for line in process.logs.tail())


async def test_health_timeout_fails_the_start_and_kills_the_child(
    make_model: MakeModel, make_process: MakeProcess
) -> None:
    # 5 s: long enough that the fake printed its progress on any machine, so the diagnosis
    # can say what it was doing; the ceiling itself is what is tested.
    process = make_process(make_model("--load-delay", "60", start_timeout=5.0))
    starts = started_pids(process)

    started = time.monotonic()
    with pytest.raises(StartError) as failed:
        await process.ensure_ready()
    took = time.monotonic() - started

    diagnosis = failed.value.diagnosis
    assert diagnosis.code == "ceiling_timeout"
    assert diagnosis.numbers.get("timeout_seconds") == 5.0
    assert "loading model tensors" in diagnosis.summary  # says what it was doing
    assert took >= 5.0  # not before the ceiling
    assert process.state is S.FAILED
    (pid,) = pids_of(starts)
    assert not pid_alive(pid)


# ---- dying while ready -------------------------------------------------------------------


async def test_crash_while_ready_fails_then_next_request_restarts(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    config = make_model("--exit-after-ready", "0.3")
    process = make_process(config)
    states = StateLog(events, config.id)
    await process.ensure_ready()
    first = process.pid
    assert first is not None

    await states.wait_for(S.FAILED)

    assert states.transitions[-1] == (S.READY, S.FAILED)
    assert process.state is S.FAILED
    assert process.last_failure is not None
    assert process.last_failure.code == "exited"
    assert process.last_failure.evidence == "FATAL: simulated exit after ready"
    assert process.last_failure.numbers.get("returncode") == 2.0
    assert not pid_alive(first)

    await process.ensure_ready()

    assert state_now(process) is S.READY
    assert process.pid is not None
    assert process.pid != first
    assert pid_alive(process.pid)


async def test_crashed_backend_leaves_no_grandchild(
    make_model: MakeModel,
    make_process: MakeProcess,
    events: EventBus,
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    """No child may outlive its backend: a backend that dies on its own takes its tree along."""
    pidfile = tmp_path / "grandchild.pid"
    config = make_model("--fork-grandchild", str(pidfile), "--exit-after-ready", "0.3")
    process = make_process(config)
    states = StateLog(events, config.id)
    await process.ensure_ready()
    grandchild = psutil.Process(int(pidfile.read_text()))
    tracker.add(grandchild.pid)

    await states.wait_for(S.FAILED)

    await wait_gone(grandchild)


async def test_failed_start_leaves_no_grandchild(
    make_model: MakeModel, make_process: MakeProcess, tracker: ProcessTracker, tmp_path: Path
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    process = make_process(make_model("--fork-grandchild", str(pidfile), "--fail-start"))

    with pytest.raises(StartError):
        await process.ensure_ready()

    try:
        grandchild = psutil.Process(int(pidfile.read_text()))
    except psutil.NoSuchProcess:
        return  # gone already: the backend's keeper ends its tree before it exits
    tracker.add(grandchild.pid)
    await wait_gone(grandchild)


# ---- stop during start, shutdown -----------------------------------------------------------


async def test_stop_during_start_aborts_the_start(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    config = make_model("--load-delay", "5")
    process = make_process(config)
    states = StateLog(events, config.id)
    loading = LineWatch(process, r"main: loading model")
    starts = started_pids(process)
    waiter = asyncio.create_task(process.ensure_ready())
    await loading.wait()

    await process.stop()

    with pytest.raises(StartError) as aborted:
        await waiter
    assert aborted.value.diagnosis.code == "start_aborted"
    assert process.state is S.STOPPED
    assert states.transitions == [
        (S.STOPPED, S.STARTING),
        (S.STARTING, S.STOPPING),
        (S.STOPPING, S.STOPPED),
    ]
    (pid,) = pids_of(starts)
    assert not pid_alive(pid)


@pytest.mark.parametrize("yields", [1, 2, 3, 5, 10, 30])
async def test_stop_right_after_a_start_begins_leaves_no_child(
    make_model: MakeModel, make_process: MakeProcess, yields: int
) -> None:
    """Whatever point of the spawn the stop lands on, nothing is left running."""
    port = free_port()
    process = make_process(make_model(port=port))
    waiter = asyncio.create_task(process.ensure_ready())
    for _ in range(yields):
        await asyncio.sleep(0)

    await process.stop()

    outcome = await asyncio.gather(waiter, return_exceptions=True)
    assert isinstance(outcome[0], StartError)
    assert outcome[0].diagnosis.code == "start_aborted"
    assert process.state is S.STOPPED
    assert fake_children(port) == []


async def test_shutdown_stops_and_refuses_later_starts(
    make_model: MakeModel, make_process: MakeProcess, events: EventBus
) -> None:
    config = make_model()
    process = make_process(config)
    states = StateLog(events, config.id)
    await process.ensure_ready()
    pid = process.pid
    assert pid is not None

    await process.shutdown()

    assert process.state is S.SHUTDOWN
    assert states.transitions[-1] == (S.STOPPING, S.SHUTDOWN)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(ShuttingDownError):
        await process.ensure_ready()
    await process.stop()  # a no-op now
    assert process.state is S.SHUTDOWN


async def test_shutdown_of_a_stopped_process_refuses_starts(
    make_model: MakeModel, make_process: MakeProcess
) -> None:
    process = make_process(make_model())
    await process.shutdown()
    assert process.state is S.SHUTDOWN
    with pytest.raises(ShuttingDownError):
        await process.ensure_ready()
    assert process.pid is None


# ---- the log buffer ----------------------------------------------------------------------


async def test_log_tail_holds_the_backends_stdout_and_stderr(
    make_model: MakeModel, make_process: MakeProcess
) -> None:
    port = free_port()
    process = make_process(make_model("--load-delay", "0.2", port=port))
    ready_line = LineWatch(process, r"fake backend ready on")
    await process.ensure_ready()
    await ready_line.wait()  # stdout may trail the health check by a moment

    tail = process.logs.tail()
    assert f"fake backend ready on http://127.0.0.1:{port}" in tail  # stdout
    assert "main: loading model" in tail  # stderr
    assert any(line.startswith("load_tensors: loading model tensors ... ") for line in tail)
    assert any(line.startswith("[modelswap] ready after ") for line in tail)
    assert process.logs.tail(1) == tail[-1:]


def test_log_buffer_splits_carriage_return_progress() -> None:
    buffer = LogBuffer()
    buffer.feed(b"Loading: 10%\rLoading: 20%\rLoading: 30%\n")
    assert buffer.tail() == ["Loading: 10%", "Loading: 20%", "Loading: 30%"]


def test_log_buffer_joins_lines_across_chunks() -> None:
    buffer = LogBuffer()
    seen: list[str] = []
    buffer.add_listener(seen.append)
    for chunk in (b"hel", b"lo\r", b"\nwor", b"ld 1\r\n", b"\r\n\n", b"tail without newline"):
        buffer.feed(chunk)
    assert buffer.tail() == ["hello", "world 1"]
    buffer.flush()
    assert buffer.tail() == ["hello", "world 1", "tail without newline"]
    assert seen == buffer.tail()


def test_log_buffer_keeps_the_last_lines_and_survives_bad_bytes() -> None:
    buffer = LogBuffer(capacity=3)
    buffer.feed(b"".join(b"line %d\n" % n for n in range(5)))
    buffer.feed(b"bad \xff byte\n")
    assert buffer.tail() == ["line 3", "line 4", "bad \ufffd byte"]
    assert buffer.tail(2) == ["line 4", "bad \ufffd byte"]
    assert buffer.total_lines == 6
