"""The progress-aware start watchdog against real fake-backend processes (issue 4).

Two clocks guard a start: ``startTimeout`` (a hard ceiling) and ``silenceTimeout`` (restarted by
any output). A backend that keeps printing progress is never killed by the short clock; one that
goes quiet is, with a diagnosis naming what it was doing last; the ceiling holds regardless.
A failed start is answered from memory for ``failureBackoff`` seconds, then tried afresh.

State is observed through the EventBus and the process's snapshots, waited for with ceilings
that only end a hang. Time is never the assertion: a clock the test wants to see fire is short,
and the test checks that it fired and why (its diagnosis), plus the one lower bound that is the
behaviour itself (it did not fire before it ran out); a clock that must *not* fire (the silence
clock of a start that keeps printing, a failure's backoff) is several seconds, many times the
gaps it has to outlast, because a loaded machine stretches a start.
"""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.integration.conftest import FAKE, MakeModel, MakeProcess, free_port, pid_alive

from modelswap.backends.logreader import BackendLogReader
from modelswap.config import ModelConfig, load_config_text
from modelswap.errors import StartError
from modelswap.events import Event, EventBus
from modelswap.states import ProcessState
from modelswap.supervisor.process import ManagedProcess

pytestmark = pytest.mark.integration

S = ProcessState
OWN_LINE = "[modelswap]"


class Recorder:
    """Every event of one model, with the monotonic time it was published."""

    def __init__(self, events: EventBus, model: str) -> None:
        self.model = model
        self.events: list[tuple[float, Event]] = []
        events.add_listener(self._on_event)

    def _on_event(self, event: Event) -> None:
        if event.data.get("model") == self.model:
            self.events.append((time.monotonic(), event))

    def progress(self, *, backend_only: bool = True) -> list[tuple[float, dict[str, Any]]]:
        """``process.progress`` events; by default only those for lines the backend printed
        (not modelswap's own ``[modelswap] ...`` lines in the same buffer)."""
        return [
            (at, e.data)
            for at, e in self.events
            if e.kind == "process.progress"
            and not (backend_only and str(e.data["line"]).startswith(OWN_LINE))
        ]

    def entered(self, state: ProcessState) -> list[float]:
        return [at for at, e in self.events if e.kind == "process.state" and e.data["new"] is state]


# The silence clock of a start that keeps printing: it must not run out during the test, so it
# is many times the gaps between the fake's lines (0.1 s) and its time to its first line.
QUIET_OK = 4.0
# A ceiling for the test's own waits, only there to end a hang.
HANG = 60.0


async def poll(predicate: Callable[[], bool], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
def watched(make_process: MakeProcess) -> Callable[[ModelConfig], ManagedProcess]:
    """A ManagedProcess that reads progress the way the runtime's do."""

    def make(config: ModelConfig) -> ManagedProcess:
        return make_process(config, log_reader=BackendLogReader())

    return make


async def start_error(process: ManagedProcess, within: float) -> StartError:
    async with asyncio.timeout(within):
        with pytest.raises(StartError) as info:
            await process.ensure_ready()
    return info.value


# ---------------------------------------------------------------- progress keeps it alive


async def test_slow_compiler_printing_progress_outlives_the_silence_clock_and_becomes_ready(
    make_model: MakeModel,
    watched: Callable[[ModelConfig], ManagedProcess],
    events: EventBus,
) -> None:
    load = 2 * QUIET_OK  # loading lasts twice the silence clock: only its progress keeps it alive
    config = make_model(
        "--flavor",
        "vllm",
        "--load-delay",
        str(load),
        "--progress-interval",
        "0.1",
        silence_timeout=QUIET_OK,
        start_timeout=HANG,
    )
    process = watched(config)
    seen = Recorder(events, config.id)
    began = time.monotonic()
    ready = asyncio.create_task(process.ensure_ready())

    # While it starts, the process carries the phase and how far the bar is.
    await poll(
        lambda: process.progress is not None and process.progress.done is not None,
        within=HANG,
        what="a progress bar while starting",
    )
    assert process.state is S.STARTING
    progress = process.progress
    assert progress is not None
    assert progress.phase == "capturing graphs"
    assert progress.total == 51
    assert progress.fraction is not None
    assert 0 < progress.fraction <= 1
    assert progress.label() == f"capturing graphs {progress.done}/51"
    assert process.last_progress_at is not None
    assert abs(process.last_progress_at - time.time()) < HANG  # wall clock, not monotonic
    assert process.last_progress_line is not None
    assert "Capturing CUDA graphs (decode, FULL)" in process.last_progress_line

    async with asyncio.timeout(HANG):
        await ready
    took = time.monotonic() - began
    assert process.state is S.READY
    # Loading lasted longer than the silence clock: only progress kept it alive.
    assert took > QUIET_OK, took
    assert seen.entered(S.FAILED) == []
    assert len(seen.entered(S.STARTING)) == 1

    reports = seen.progress()
    bars = [data for _, data in reports if data["progress"] is not None]
    assert len(bars) >= 8, reports
    assert all(data["phase"].startswith("capturing graphs ") for data in bars)
    assert all("Capturing CUDA graphs" in data["line"] for data in bars)
    fractions = [data["progress"] for data in bars]
    assert fractions == sorted(fractions)
    assert 0 < fractions[0] <= fractions[-1] <= 1
    # The bar line is preceded by vLLM's "Starting to load model" line: loading weights.
    assert any(data["phase"] == "loading weights" for _, data in reports)
    # Progress came all through the load, not only at its start: some of it later than the
    # silence clock would have run out, had the spawn been the last sign of life.
    assert reports[-1][0] - began > QUIET_OK, reports


async def test_dots_without_a_newline_are_signs_of_life_too(
    make_model: MakeModel, watched: Callable[[ModelConfig], ManagedProcess]
) -> None:
    """llama.cpp prints its loading progress as dots on one line: every byte restarts the
    silence clock, complete line or not."""
    port = free_port()
    # Dots every 0.1 s for 1.5 silence windows: only the dots keep it alive.
    count = int(1.5 * QUIET_OK / 0.1)
    dots = (
        "import sys, time\n"
        f"for _ in range({count}):\n"
        "    sys.stdout.write('.'); sys.stdout.flush(); time.sleep(0.1)\n"
    )
    fake = shlex.join([sys.executable, str(FAKE), "--port", str(port)])
    script = f"{shlex.join([sys.executable, '-c', dots])} && exec {fake}"
    config = make_model(
        cmd=("/bin/sh", "-c", script),
        port=port,
        proxy=f"http://127.0.0.1:{port}",
        silence_timeout=QUIET_OK,
        start_timeout=HANG,
    )
    process = watched(config)
    began = time.monotonic()
    async with asyncio.timeout(HANG):
        await process.ensure_ready()
    assert process.state is S.READY
    assert time.monotonic() - began > QUIET_OK  # longer than the silence clock: dots did it
    assert any(line.startswith("....") for line in process.logs.tail())


# ---------------------------------------------------------------- the silence clock


async def test_a_backend_that_goes_quiet_is_killed_at_the_silence_timeout_naming_its_phase(
    make_model: MakeModel,
    watched: Callable[[ModelConfig], ManagedProcess],
    events: EventBus,
) -> None:
    # The clock under test fires; it is long enough that the fake's progress (its first line
    # comes a fraction of a second after the spawn) is printed before it can.
    silence = 3.0
    config = make_model(
        "--flavor",
        "vllm",
        "--load-delay",
        "60",
        "--progress-interval",
        "0.1",
        "--silent-after",
        "1",
        silence_timeout=silence,
        start_timeout=HANG,
    )
    process = watched(config)
    seen = Recorder(events, config.id)
    failing = asyncio.create_task(start_error(process, within=HANG))
    await poll(lambda: process.pid is not None, within=HANG, what="the child's pid")
    pid = process.pid
    assert pid is not None

    error = await failing
    failed_at = time.monotonic()
    diagnosis = error.diagnosis
    assert diagnosis.code == "silent_timeout"
    reports = seen.progress()
    assert reports, "the fake printed progress before going quiet"
    last_at, last = reports[-1]
    assert last["phase"].startswith("capturing graphs ")
    # It names what the backend was doing last: the last progress it printed.
    assert f"it was last {last['phase']}" in diagnosis.summary, diagnosis.summary
    assert "3 s" in diagnosis.summary
    assert diagnosis.numbers["timeout_seconds"] == silence
    assert diagnosis.numbers["progress_total"] == 51.0
    assert f"{diagnosis.numbers['progress_done']:g}/51" in last["phase"]
    assert diagnosis.fix is not None
    assert "silenceTimeout" in diagnosis.fix
    # Killed by the silence clock (the code above), not before a silence window had passed
    # since the last output.
    assert failed_at - last_at >= silence - 0.1, failed_at - last_at
    assert process.state is S.FAILED
    assert process.last_failure == diagnosis
    assert process.pid is None
    assert not pid_alive(pid)
    assert len(seen.entered(S.STARTING)) == 1


# ---------------------------------------------------------------- the ceiling


async def test_the_ceiling_holds_even_while_progress_keeps_coming(
    make_model: MakeModel,
    watched: Callable[[ModelConfig], ManagedProcess],
    events: EventBus,
) -> None:
    # The ceiling is longer than the silence clock, so a start that fails at the ceiling (and
    # not at the silence clock) was kept alive by its progress all along.
    ceiling = QUIET_OK + 2.0
    config = make_model(
        "--flavor",
        "vllm",
        "--load-delay",
        "60",
        "--progress-interval",
        "0.1",
        silence_timeout=QUIET_OK,
        start_timeout=ceiling,
    )
    process = watched(config)
    seen = Recorder(events, config.id)
    began = time.monotonic()
    failing = asyncio.create_task(start_error(process, within=HANG))
    await poll(lambda: process.pid is not None, within=HANG, what="the child's pid")
    pid = process.pid
    assert pid is not None

    error = await failing
    failed_at = time.monotonic()
    diagnosis = error.diagnosis
    assert diagnosis.code == "ceiling_timeout"
    assert failed_at - began >= ceiling - 0.1, failed_at - began
    # Progress was still flowing when the ceiling struck (the silence clock never ran out):
    # some of it came later than one silence window after the spawn.
    reports = seen.progress()
    assert reports
    assert reports[-1][0] - began > QUIET_OK, reports
    _, last = reports[-1]
    assert f"within {ceiling:g} s" in diagnosis.summary, diagnosis.summary
    assert f"it was still {last['phase']}" in diagnosis.summary, diagnosis.summary
    assert diagnosis.numbers["timeout_seconds"] == ceiling
    assert diagnosis.fix is not None
    assert "startTimeout" in diagnosis.fix
    assert process.state is S.FAILED
    assert not pid_alive(pid)


async def test_only_the_backends_own_lines_are_reported_as_progress(
    make_model: MakeModel,
    watched: Callable[[ModelConfig], ManagedProcess],
    events: EventBus,
) -> None:
    """A timed-out start's summary quotes the last progress line ("Last output: Capturing CUDA
    graphs ... 5/51"); modelswap's own ``[modelswap] failed: ...`` line carrying it must not be
    taken for the backend's progress (no event, no last_progress_line/at)."""
    config = make_model(
        "--flavor",
        "vllm",
        "--load-delay",
        "60",
        "--progress-interval",
        "0.1",
        silence_timeout=HANG,
        start_timeout=QUIET_OK,  # fires, after the fake has printed progress for a while
    )
    process = watched(config)
    seen = Recorder(events, config.id)
    error = await start_error(process, within=HANG)
    assert error.diagnosis.code == "ceiling_timeout"
    backend = seen.progress()
    assert backend
    every = seen.progress(backend_only=False)
    own = [data["line"] for _, data in every if data["line"].startswith(OWN_LINE)]
    assert own == [], f"modelswap's own lines published as process.progress: {own}"
    assert process.last_progress_line == backend[-1][1]["line"]


async def test_health_check_timeout_is_the_start_timeout_under_its_llama_swap_name(
    watched: Callable[[ModelConfig], ManagedProcess],
) -> None:
    """``healthCheckTimeout`` (model or top level) is the ceiling, exactly like startTimeout."""
    fake = [sys.executable, str(FAKE), "--port", "${PORT}", "--flavor", "vllm"]
    slow = shlex.join([*fake, "--load-delay", "60", "--progress-interval", "0.2"])
    config = load_config_text(
        f"startPort: {free_port()}\n"
        "healthCheckTimeout: 2\n"
        "silenceTimeout: 60\n"
        "models:\n"
        f"  top:\n    cmd: {slow!r}\n"
        f"  own:\n    cmd: {slow!r}\n    healthCheckTimeout: 2.5\n"
    )
    top, own = config.models["top"], config.models["own"]
    assert (top.start_timeout, own.start_timeout) == (2.0, 2.5)
    assert top.silence_timeout == own.silence_timeout == 60.0
    if top.port == own.port or top.port is None or own.port is None:
        pytest.fail(f"ports: {top.port}, {own.port}")

    began = time.monotonic()
    errors = await asyncio.gather(
        start_error(watched(top), within=HANG), start_error(watched(own), within=HANG)
    )
    took = time.monotonic() - began
    for error, seconds in zip(errors, (2.0, 2.5), strict=True):
        assert error.diagnosis.code == "ceiling_timeout", error.diagnosis
        assert error.diagnosis.numbers["timeout_seconds"] == seconds
        assert f"within {seconds:g} s" in error.diagnosis.summary
    assert took >= 2.4, took  # neither was stopped before its ceiling


# ---------------------------------------------------------------- failureBackoff


async def test_within_failure_backoff_the_diagnosis_is_repeated_then_a_fresh_attempt_is_made(
    make_model: MakeModel,
    watched: Callable[[ModelConfig], ManagedProcess],
    events: EventBus,
    tmp_path: Path,
) -> None:
    """The first start fails (the fake's model-load error); requests within the backoff get that
    diagnosis at once without a spawn; after it, a fresh attempt runs (and now succeeds)."""
    port = free_port()
    marker = tmp_path / "failed-once"
    fake = shlex.join([sys.executable, str(FAKE), "--port", str(port)])
    script = (
        f"if [ -e {shlex.quote(str(marker))} ]; then exec {fake}; fi; "
        f"touch {shlex.quote(str(marker))}; exec {fake} --fail-start"
    )
    # The backoff must not run out between the failure and the test's next request, however
    # loaded the machine: several seconds.
    backoff = 5.0
    config = make_model(
        cmd=("/bin/sh", "-c", script),
        port=port,
        proxy=f"http://127.0.0.1:{port}",
        failure_backoff=backoff,
    )
    process = watched(config)
    seen = Recorder(events, config.id)

    first = await start_error(process, within=HANG)
    assert first.diagnosis.code == "model_load_error"
    assert process.state is S.FAILED
    assert process.pid is None
    (failed_at,) = seen.entered(S.FAILED)
    assert len(seen.entered(S.STARTING)) == 1

    # Within the backoff: the same diagnosis, from memory: no new start, no new process.
    again = await start_error(process, within=HANG)
    assert again.diagnosis == first.diagnosis
    assert str(again) == str(first)
    assert len(seen.entered(S.STARTING)) == 1
    assert process.pid is None

    # Keep asking: every answer inside the window is the remembered one; the first request
    # after it starts the model again.
    answers: list[StartError] = []
    async with asyncio.timeout(backoff + HANG):
        while len(seen.entered(S.STARTING)) == 1:
            try:
                await process.ensure_ready()
            except StartError as error:
                answers.append(error)
                await asyncio.sleep(0.05)
        await process.ensure_ready()
    assert len(answers) > 5
    assert all(answer.diagnosis == first.diagnosis for answer in answers)
    assert process.state is S.READY
    starts = seen.entered(S.STARTING)
    assert len(starts) == 2
    assert starts[1] - failed_at >= backoff - 0.05, starts[1] - failed_at
    assert process.last_failure is None
