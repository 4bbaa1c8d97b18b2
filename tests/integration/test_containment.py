"""Nothing a backend starts outlives it (supervisor/keeper_program.py, keeper_client.py,
containment.py).

The backends here run through ``tests/fakes/helper_spawner.py``, which leaves a helper the way
daemons do — double fork + ``setsid()`` (``daemon``), or ``nohup`` in another process group
(``nohup``) — before it becomes the fake backend. Each helper is an orphan before the backend is
ready, so no snapshot of the tree ever sees it; only the keeper (a child subreaper) or the
backend's cgroup keeps it within reach. Each test runs under both mechanisms; the cgroup one is
skipped, with the reason, where no cgroup v2 subtree is writable.

Time is never the assertion: waits have a ceiling that only ends a hang, and the measured
figures are printed (``pytest -s``) and recorded as test properties.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import aiohttp
import psutil
import pytest
from tests.integration.conftest import (
    FAKE,
    REPO,
    MakeModel,
    MakeProcess,
    ProcessTracker,
    is_alive,
    subprocess_env,
    wait_until,
)
from tests.integration.test_reaper import read_line

from modelswap.backends.diagnose import GenericDiagnoser
from modelswap.config import ModelConfig
from modelswap.errors import StartError
from modelswap.events import Event, EventBus
from modelswap.states import ProcessState
from modelswap.supervisor import cgroups, keeper_client, keeper_program, tree
from modelswap.supervisor.containment import CGROUP, SUBREAPER, Containment
from modelswap.supervisor.leftovers import BackendRecord
from modelswap.supervisor.process import PROBE_DELAY

pytestmark = pytest.mark.integration

SPAWNER = REPO / "tests" / "fakes" / "helper_spawner.py"
ORPHAN_GATEWAY = REPO / "tests" / "fakes" / "orphan_gateway.py"
LATE_HELPER = REPO / "tests" / "fakes" / "late_helper_backend.py"
CEILING = 30.0  # only ends a hang: every wait here is for something expected within ~2 s
MODES = ["daemon", "nohup"]

Record = Callable[[str, object], None]


# ---- fixtures --------------------------------------------------------------------------------


def kill_announced_helpers(directory: Path) -> None:
    """Kill each helper that announced itself in ``directory`` and still runs — the pid is only
    trusted while the process's own command line names that pidfile."""
    for pidfile in directory.glob("*.pid"):
        with contextlib.suppress(ValueError, OSError, psutil.Error):
            proc = psutil.Process(int(pidfile.read_text()))
            if str(pidfile) in proc.cmdline():
                proc.kill()


@pytest.fixture(autouse=True)
def no_helper_survives_a_test(tmp_path: Path) -> Iterator[None]:
    """Even a test that failed before it looked at its helper leaves none running."""
    yield
    kill_announced_helpers(tmp_path)


@pytest.fixture(params=[SUBREAPER, CGROUP])
def containment(request: pytest.FixtureRequest) -> Containment:
    if request.param == CGROUP:
        found: Containment = request.getfixturevalue("writable_cgroup")
        return found
    return Containment(SUBREAPER, "the keeper alone (no cgroup)")


@pytest.fixture
def record(record_property: Record) -> Record:
    """Print a measured figure (seen with ``pytest -s``) and keep it in the JUnit report."""

    def keep(name: str, value: object) -> None:
        print(f"measured {name} = {value}")
        record_property(name, value)

    return keep


def helper_cmd(
    mode: str, pidfile: Path, port: int, *fake_args: str, stubborn: bool = False
) -> tuple[str, ...]:
    spawner = [sys.executable, str(SPAWNER), "--mode", mode, "--pidfile", str(pidfile)]
    if stubborn:
        spawner.append("--stubborn")
    return (*spawner, "--", sys.executable, str(FAKE), "--port", str(port), *fake_args)


def helper_model(
    make_model: MakeModel,
    free_port: Callable[[], int],
    mode: str,
    pidfile: Path,
    *fake_args: str,
    stubborn: bool = False,
) -> ModelConfig:
    port = free_port()
    cmd = helper_cmd(mode, pidfile, port, *fake_args, stubborn=stubborn)
    return make_model(port=port, cmd=cmd)


def the_helper(pidfile: Path, tracker: ProcessTracker) -> psutil.Process:
    """The helper the fake announced (alive: the fake waits for it before it execs the
    backend); tracked by pid and creation time, so teardown can never hit a recycled pid."""
    helper = psutil.Process(int(pidfile.read_text()))
    tracker.add(helper.pid)
    assert is_alive(helper)
    return helper


async def seconds_until_gone(procs: list[psutil.Process], since: float | None = None) -> float:
    """Wait until none of ``procs`` runs (a zombie counts as gone); seconds from ``since``
    (default: now). Fails after CEILING."""
    started = time.monotonic() if since is None else since
    while any(is_alive(proc) for proc in procs):
        if time.monotonic() - started > CEILING:
            left = [proc.pid for proc in procs if is_alive(proc)]
            pytest.fail(f"still alive after {CEILING} s: {left}")
        await asyncio.sleep(0.01)
    return round(time.monotonic() - started, 3)


async def seconds_until_each_gone(
    procs: dict[str, psutil.Process], since: float
) -> dict[str, float]:
    """When each of ``procs`` was first seen gone, in seconds from ``since``."""
    gone: dict[str, float] = {}
    while len(gone) < len(procs):
        now = time.monotonic()
        for name, proc in procs.items():
            if name not in gone and not is_alive(proc):
                gone[name] = round(now - since, 3)
        if now - since > CEILING:
            pytest.fail(f"still alive after {CEILING} s: {sorted(set(procs) - set(gone))}")
        await asyncio.sleep(0.01)
    return gone


def cgroup_of(pid: int) -> str:
    return cgroups.own_cgroup(Path(f"/proc/{pid}/cgroup").read_text()) or ""


def state_entered(events: EventBus, model: str, state: ProcessState) -> asyncio.Event:
    entered = asyncio.Event()

    def on_event(event: Event) -> None:
        data = event.data
        if event.kind == "process.state" and data.get("model") == model and data["new"] is state:
            entered.set()

    events.add_listener(on_event)
    return entered


# ---- the helpers end with their model ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_an_orphaned_helper_reparents_to_the_keeper(
    mode: str,
    containment: Containment,
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "helper.pid"
    process = make_process(
        helper_model(make_model, free_port, mode, pidfile), containment=containment
    )
    await process.ensure_ready()
    helper = the_helper(pidfile, tracker)

    assert helper.ppid() == process.keeper_pid  # not init: the subreaper adopted it
    assert process.pid is not None
    assert process.pid != process.keeper_pid
    assert os.getpgid(process.pid) == process.pid  # the backend leads a group of its own
    if mode == "daemon":
        assert os.getsid(helper.pid) != os.getsid(process.pid)  # a session of its own
    else:
        assert os.getpgid(helper.pid) not in (process.pid, process.keeper_pid)


@pytest.mark.parametrize("mode", MODES)
async def test_the_helper_ends_when_its_model_stops(
    mode: str,
    containment: Containment,
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    tracker: ProcessTracker,
    tmp_path: Path,
    record: Record,
) -> None:
    pidfile = tmp_path / "helper.pid"
    process = make_process(
        helper_model(make_model, free_port, mode, pidfile), containment=containment
    )
    await process.ensure_ready()
    helper = the_helper(pidfile, tracker)
    assert process.keeper_pid is not None
    keeper_proc = psutil.Process(process.keeper_pid)

    started = time.monotonic()
    await process.stop()
    record("stop_seconds", round(time.monotonic() - started, 3))

    # stop() returns once the keeper has exited, and the keeper exits once the tree is gone.
    assert not is_alive(helper)
    assert not is_alive(keeper_proc)
    assert process.state is ProcessState.STOPPED


async def test_the_helper_ends_when_the_backend_exits_on_its_own(
    containment: Containment,
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    events: EventBus,
    tracker: ProcessTracker,
    tmp_path: Path,
    record: Record,
) -> None:
    pidfile = tmp_path / "helper.pid"
    config = helper_model(make_model, free_port, "daemon", pidfile, "--exit-after-ready", "0.3")
    process = make_process(config, containment=containment)
    failed = state_entered(events, config.id, ProcessState.FAILED)
    await process.ensure_ready()
    helper = the_helper(pidfile, tracker)

    async with asyncio.timeout(CEILING):
        await failed.wait()
    record("helper_gone_after_failure_s", await seconds_until_gone([helper]))
    assert process.last_failure is not None
    assert process.last_failure.code != "internal_error"


async def test_a_helper_that_ignores_sigterm_is_killed_after_the_grace(
    containment: Containment,
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    tracker: ProcessTracker,
    tmp_path: Path,
    record: Record,
) -> None:
    pidfile = tmp_path / "helper.pid"
    config = helper_model(make_model, free_port, "daemon", pidfile, stubborn=True)
    process = make_process(config, containment=containment)
    await process.ensure_ready()
    helper = the_helper(pidfile, tracker)

    started = time.monotonic()
    await process.stop()
    record("stop_with_stubborn_helper_s", round(time.monotonic() - started, 3))

    assert not is_alive(helper)
    notes = [line for line in process.logs.tail() if "keeper: ended" in line]
    assert notes == ["[modelswap] keeper: ended 1 process the backend left behind (1 by SIGKILL)"]


async def test_the_helper_ends_when_the_keeper_itself_is_killed(
    containment: Containment,
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    events: EventBus,
    tracker: ProcessTracker,
    tmp_path: Path,
    record: Record,
) -> None:
    """The gateway's own defences: its tree snapshot (the helper is the keeper's child by the
    time the backend is ready) and, with a cgroup, ``cgroup.kill``."""
    pidfile = tmp_path / "helper.pid"
    config = helper_model(make_model, free_port, "daemon", pidfile)
    process = make_process(config, containment=containment)
    failed = state_entered(events, config.id, ProcessState.FAILED)
    await process.ensure_ready()
    helper = the_helper(pidfile, tracker)
    assert process.pid is not None
    assert process.keeper_pid is not None
    backend = psutil.Process(process.pid)
    tracker.add(backend.pid)

    os.kill(process.keeper_pid, signal.SIGKILL)

    async with asyncio.timeout(CEILING):
        await failed.wait()
    record("orphans_gone_after_keeper_sigkill_s", await seconds_until_gone([helper, backend]))


# Where in a start the keeper is killed (issue 33): while the backend loads (the helper already
# daemonised), the moment it is ready, inside the first tree refresh's delay after READY (no
# snapshot has seen the helper then), and after that refresh. The sleeps only place the kill.
KILL_POINTS = {
    "before-ready": None,
    "at-ready": 0.0,
    "first-snapshot-interval": PROBE_DELAY / 2,
    "after-first-snapshot": PROBE_DELAY * 4,
}


@pytest.mark.parametrize("point", list(KILL_POINTS))
async def test_no_helper_survives_a_keeper_killed_at_any_point_of_a_start(
    point: str,
    containment: Containment,
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    events: EventBus,
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "helper.pid"
    # Before READY: the backend loads for long enough that the kill lands while it does.
    load = ("--load-delay", "60") if point == "before-ready" else ()
    config = helper_model(make_model, free_port, "daemon", pidfile, *load)
    process = make_process(config, containment=containment)
    failed = state_entered(events, config.id, ProcessState.FAILED)
    start = asyncio.ensure_future(process.ensure_ready())
    delay = KILL_POINTS[point]
    if delay is None:
        await asyncio.to_thread(
            wait_until, lambda: pidfile.exists() and process.keeper_pid is not None, "a helper"
        )
    else:
        await start
        if delay:
            await asyncio.sleep(delay)
    helper = the_helper(pidfile, tracker)
    keeper_pid = process.keeper_pid
    assert keeper_pid is not None

    os.kill(keeper_pid, signal.SIGKILL)

    async with asyncio.timeout(CEILING):
        if delay is None:
            with pytest.raises(StartError):
                await start
        else:
            await failed.wait()
    await seconds_until_gone([helper])


async def test_a_helper_daemonised_between_snapshots_ends_with_a_killed_keeper(
    containment: Containment,
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    events: EventBus,
    session: aiohttp.ClientSession,
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    """The gap itself, made wide: the backend daemonises a helper on request, well after READY
    and after the first tree refresh, and the keeper is killed at once — no snapshot has seen
    the helper (the next is a second away), so only the tag (or the cgroup) reaches it."""
    pidfile = tmp_path / "helper.pid"
    port = free_port()
    cmd = (sys.executable, str(LATE_HELPER), "--port", str(port), "--pidfile", str(pidfile))
    config = make_model(port=port, cmd=cmd)
    process = make_process(config, containment=containment)
    failed = state_entered(events, config.id, ProcessState.FAILED)
    await process.ensure_ready()
    await asyncio.sleep(PROBE_DELAY * 4)  # past the first refresh: the next is a second away
    async with session.post(f"http://127.0.0.1:{port}/spawn") as response:
        assert response.status == 200
    helper = the_helper(pidfile, tracker)
    assert process.keeper_pid is not None

    os.kill(process.keeper_pid, signal.SIGKILL)

    async with asyncio.timeout(CEILING):
        await failed.wait()
    await seconds_until_gone([helper])


def test_a_helper_that_daemonised_is_found_by_its_tag(
    tracker: ProcessTracker, tmp_path: Path
) -> None:
    """What ends a helper no snapshot saw: the tag in its environment, inherited through a
    double fork and ``setsid()``, found in /proc and killed; an untagged process is left be."""
    tag = tree.new_tag()
    pidfile = tmp_path / "helper.pid"
    argv = [sys.executable, str(SPAWNER), "--mode", "daemon", "--pidfile", str(pidfile)]
    env = {**os.environ, tree.TAG_ENV: tag}
    subprocess.run([*argv, "--", "true"], env=env, check=True, timeout=CEILING)
    helper = the_helper(pidfile, tracker)
    tracker.add(helper.pid)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    tracker.add(bystander.pid)
    assert helper.ppid() != os.getpid()  # an orphan: no tree of ours holds it

    assert tree.tagged(tag) == {helper.pid}
    assert tree.end_tagged(tag) == 1
    wait_until(lambda: not is_alive(helper), "the tagged helper ended")
    assert bystander.poll() is None
    assert tree.tagged(tag) == set()
    bystander.kill()
    bystander.wait()


async def test_the_backend_record_and_the_watchdog_see_the_helper(
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    """The further lines of defence watch the keeper's tree, which holds the orphaned helper."""
    record = BackendRecord(tmp_path / "backends")
    pidfile = tmp_path / "helper.pid"
    process = make_process(helper_model(make_model, free_port, "daemon", pidfile), record=record)
    await process.ensure_ready()
    helper = the_helper(pidfile, tracker)
    path = record.path
    assert path is not None

    async with asyncio.timeout(CEILING):  # the tree is re-read every second while ready
        while True:
            (entry,) = json.loads(path.read_text())["backends"]
            pids = {pid for pid, _ in entry["tree"]}
            if helper.pid in pids:
                break
            await asyncio.sleep(0.05)
    assert entry["pid"] == process.keeper_pid
    assert process.pid in pids

    await process.stop()
    assert not path.exists()


async def test_a_backend_cgroup_holds_the_helper_and_goes_with_it(
    writable_cgroup: Containment,
    make_model: MakeModel,
    make_process: MakeProcess,
    free_port: Callable[[], int],
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "helper.pid"
    config = helper_model(make_model, free_port, "daemon", pidfile)
    process = make_process(config, containment=writable_cgroup)
    await process.ensure_ready()
    helper = the_helper(pidfile, tracker)
    assert process.pid is not None
    assert process.keeper_pid is not None

    path = cgroup_of(process.pid)
    assert re.search(rf"/{cgroups.PREFIX}{os.getpid()}-\d+-{config.id}$", path), path
    assert cgroup_of(helper.pid) == path
    assert cgroup_of(process.keeper_pid) != path  # cgroup.kill must not take the keeper
    assert writable_cgroup.cgroup_base is not None
    directory = writable_cgroup.cgroup_base / path.rsplit("/", 1)[1]
    assert {process.pid, helper.pid} <= keeper_program.cgroup_pids(str(directory))

    await process.stop()

    assert not is_alive(helper)
    assert not directory.exists()


# ---- the keeper on its own -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        pytest.param("exit 0", 0, id="exit-0"),
        pytest.param("exit 7", 7, id="exit-7"),
        pytest.param("kill -TERM $$", -signal.SIGTERM, id="SIGTERM"),
        pytest.param("kill -KILL $$", -signal.SIGKILL, id="SIGKILL"),
        pytest.param("kill -SEGV $$", -signal.SIGSEGV, id="SIGSEGV"),
        pytest.param(f"kill -{signal.SIGRTMIN + 6} $$", -(signal.SIGRTMIN + 6), id="SIGRTMIN+6"),
    ],
)
async def test_the_keeper_exits_as_the_backend_did(script: str, expected: int) -> None:
    proc = await keeper_client.spawn(["sh", "-c", script], env=os.environ)
    async with asyncio.timeout(CEILING):
        code = await proc.wait()
    assert code == expected


async def test_the_keeper_forwards_sigterm_to_the_backend() -> None:
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = await keeper_client.spawn([sys.executable, "-c", code], env=os.environ)
    assert proc.stdout is not None
    async with asyncio.timeout(CEILING):
        assert await proc.stdout.readline() == b"ready\n"
        os.kill(proc.keeper_pid, signal.SIGTERM)
        assert await proc.wait() == 42


async def test_the_keeper_reports_the_backends_exit_before_its_leftovers_are_gone(
    tracker: ProcessTracker,
) -> None:
    """``exited`` comes as soon as the backend has; the keeper itself exits once the helper
    (which ignores SIGTERM, under a grace far longer than the test) is gone too."""
    code = (
        "import signal, subprocess, sys\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the helper\n"
        "helper = subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
        "print('helper', helper.pid, flush=True)\n"
        "sys.exit(3)\n"
    )
    proc = await keeper_client.spawn(
        [sys.executable, "-c", code], env=os.environ, grace=CEILING * 10
    )
    assert proc.stdout is not None
    async with asyncio.timeout(CEILING):
        helper = psutil.Process(int((await proc.stdout.readline()).split()[1]))
        tracker.add(helper.pid)
        await proc.backend_exit()
        assert proc.exit_code == 3
        assert proc.returncode is None  # the keeper is still in its grace for the helper
        assert helper.ppid() == proc.keeper_pid
        proc.kill_now()
        assert await proc.wait() == 3
    assert not is_alive(helper)


def direct_spawn_error(argv: list[str]) -> OSError:
    """What a direct spawn of ``argv`` raises (what modelswap diagnosed before the keeper)."""
    try:
        subprocess.Popen(argv, stdin=subprocess.DEVNULL).wait()
    except OSError as exc:
        return exc
    raise AssertionError(f"{argv} could be executed")


@pytest.mark.parametrize("case", ["missing", "not-executable", "directory", "on-PATH-missing"])
async def test_an_unexecutable_command_gets_the_same_diagnosis_as_before(
    case: str,
    make_model: MakeModel,
    make_process: MakeProcess,
    tmp_path: Path,
) -> None:
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\nexit 0\n")
    cmd0 = {
        "missing": str(tmp_path / "no-such-server"),
        "not-executable": str(plain),
        "directory": str(tmp_path),
        "on-PATH-missing": "modelswap-test-no-such-server",
    }[case]
    expected = GenericDiagnoser().spawn_error(cmd0, direct_spawn_error([cmd0, "--port", "1"]))
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    process = make_process(make_model(cmd=(cmd0, "--port", "1")))

    with pytest.raises(StartError) as failed:
        await process.ensure_ready()

    assert failed.value.diagnosis == expected
    assert process.state is ProcessState.FAILED
    assert process.pid is None
    after = {child.pid for child in psutil.Process().children(recursive=True) if is_alive(child)}
    assert after <= before  # the keeper is gone too


async def test_pid_in_cmd_stop_is_the_backends_own(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    seen = tmp_path / "stop-pid"
    stopper = (
        "import os, signal, sys\n"
        "open(sys.argv[1], 'w').write(sys.argv[2])\n"
        "os.kill(int(sys.argv[2]), signal.SIGTERM)\n"
    )
    config = make_model(cmd_stop=(sys.executable, "-c", stopper, str(seen), "${PID}"))
    process = make_process(config)
    await process.ensure_ready()
    async with session.get(config.proxy + "/health") as response:
        served_by = int(response.headers["X-Fake-Pid"])
    keeper_pid = process.keeper_pid

    await process.stop()

    assert process.state is ProcessState.STOPPED
    assert int(seen.read_text()) == served_by
    assert served_by != keeper_pid


async def test_the_models_env_reaches_the_backend_and_not_the_keeper(
    make_model: MakeModel, make_process: MakeProcess
) -> None:
    process = make_process(make_model(env={"MODELSWAP_TEST_BACKEND_ONLY": "yes"}))
    await process.ensure_ready()
    assert process.pid is not None
    assert process.keeper_pid is not None
    assert psutil.Process(process.pid).environ().get("MODELSWAP_TEST_BACKEND_ONLY") == "yes"
    assert "MODELSWAP_TEST_BACKEND_ONLY" not in psutil.Process(process.keeper_pid).environ()


async def test_the_backends_output_reaches_the_log(
    make_model: MakeModel, make_process: MakeProcess
) -> None:
    process = make_process(make_model())
    await process.ensure_ready()
    lines = process.logs.tail()
    assert f"pid={process.pid} " in next(line for line in lines if "fake backend starting" in line)
    assert any(line == "main: loading model" for line in lines)  # the fake's stderr


def test_the_keepers_descendant_scans_agree(tracker: ProcessTracker) -> None:
    """/proc/PID/task/*/children and the /proc/*/stat fallback find the same tree."""
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print('ok', flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    tracker.add(child.pid)
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ok\n"
        for grandchild in psutil.Process(child.pid).children():
            tracker.add(grandchild.pid)
        fast = keeper_program.descendants(child.pid)
        table = keeper_program._parents()
        assert len(fast) == 1
        assert fast == set(table[child.pid])
    finally:
        child.kill()
        child.wait(timeout=CEILING)
        assert child.stdout is not None
        child.stdout.close()


# ---- a SIGKILLed gateway ---------------------------------------------------------------------


@pytest.fixture
def orphan_gateway(
    tracker: ProcessTracker, tmp_path: Path
) -> Iterator[Callable[[bool], tuple[subprocess.Popen[bytes], dict[str, object]]]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(use_reaper: bool) -> tuple[subprocess.Popen[bytes], dict[str, object]]:
        errors = tmp_path / "gateway.stderr"
        args = ["--pidfile", str(tmp_path / "grandchild.pid"), "--helpers", str(tmp_path)]
        if not use_reaper:
            args.append("--no-reaper")
        with errors.open("wb") as stderr:
            gateway = subprocess.Popen(
                [sys.executable, str(ORPHAN_GATEWAY), *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=subprocess_env(),
                cwd=REPO,
                start_new_session=True,
            )
        started.append(gateway)
        tracker.add(gateway.pid)
        info: dict[str, object] = json.loads(read_line(gateway, 60.0, errors))
        return gateway, info

    yield start
    for gateway in started:
        if gateway.poll() is None:
            gateway.kill()
        gateway.wait(timeout=CEILING)
        if gateway.stdout is not None:
            gateway.stdout.close()


@pytest.mark.parametrize("use_reaper", [False, True], ids=["keepers-alone", "with-watchdog"])
async def test_a_sigkilled_gateway_leaves_no_helper(
    use_reaper: bool,
    orphan_gateway: Callable[[bool], tuple[subprocess.Popen[bytes], dict[str, object]]],
    tracker: ProcessTracker,
    tmp_path: Path,
    record: Record,
) -> None:
    gateway, info = await asyncio.to_thread(orphan_gateway, use_reaper)
    keepers = info["keepers"]
    assert isinstance(keepers, dict)
    names = ("daemon", "nohup", "stubborn-daemon")
    helpers = {name: the_helper(tmp_path / f"{name}.pid", tracker) for name in names}
    for name, helper in helpers.items():
        assert helper.ppid() == keepers[name]
    everything = psutil.Process(gateway.pid).children(recursive=True)
    for proc in everything:
        tracker.add(proc.pid)
    assert set(helpers.values()) <= set(everything)

    os.kill(gateway.pid, signal.SIGKILL)
    killed = time.monotonic()
    assert await asyncio.to_thread(gateway.wait, CEILING) == -signal.SIGKILL

    for name, seconds in (await seconds_until_each_gone(helpers, killed)).items():
        record(f"{name}_helper_gone_after_gateway_sigkill_s", seconds)
    record("whole_tree_gone_after_gateway_sigkill_s", await seconds_until_gone(everything, killed))
    record("processes_in_the_tree", len(everything))


@pytest.mark.parametrize("mode", MODES)
def test_a_gateway_gone_with_the_keepers_reply_unread_still_ends_the_tree(
    mode: str, containment: Containment, tracker: ProcessTracker, tmp_path: Path
) -> None:
    """A gateway killed after the keeper replied but before it read the reply closes its end of
    the socket with that line unread: the keeper's next read is then ECONNRESET, not
    end-of-file. It is the gateway's end all the same, and the keeper ends its tree (it once
    died of the error instead, and the SIGTERM-ignoring helper lived on under init)."""
    pidfile = tmp_path / "helper.pid"
    argv = [sys.executable, str(SPAWNER), "--mode", mode, "--pidfile", str(pidfile)]
    argv += ["--stubborn", "--", "sleep", "60"]
    cgroup = containment.new_cgroup("unread")
    spec = keeper_program.Spec(argv, cgroup=str(cgroup) if cgroup is not None else None)
    ours, theirs = socket.socketpair()  # this test plays the gateway: the keeper's parent
    with ours:
        with theirs:
            keeper_proc = subprocess.Popen(
                [*keeper_client.KEEPER_ARGV, "--gateway", str(os.getpid())],
                stdin=theirs.fileno(),
                start_new_session=True,
            )
        tracker.add(keeper_proc.pid)
        try:
            ours.sendall(keeper_program.encode_spec(spec))
            readable, _, _ = select.select([ours], [], [], CEILING)
            assert readable, "the keeper did not reply"  # the reply waits, unread, in our end
            wait_until(pidfile.exists, "the helper announcing itself")
            helper = the_helper(pidfile, tracker)
            ours.close()  # with the reply unread, as a SIGKILLed gateway's end is closed

            wait_until(lambda: not is_alive(helper), "the helper ending")
            code = keeper_proc.wait(CEILING)
        finally:
            if keeper_proc.poll() is None:
                keeper_proc.kill()
                keeper_proc.wait()
    assert code == -signal.SIGTERM  # as its backend ended: SIGTERMed, not a keeper's crash
    if cgroup is not None:
        assert not cgroup.exists()
