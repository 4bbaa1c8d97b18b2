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
    wait_until,
)

from modelswap.events import Event, EventBus
from modelswap.states import ProcessState
from modelswap.supervisor import cgroups, keeper_program, tree
from modelswap.supervisor.containment import Containment, detect
from modelswap.supervisor.reaper import GRACE_SECONDS, Reaper, gateway_cgroup_bases

pytestmark = pytest.mark.integration

ORPHAN_GATEWAY = REPO / "tests" / "fakes" / "orphan_gateway.py"
REAP_DEADLINE = 60.0  # the watchdog's grace for SIGTERM-ignorers is GRACE_SECONDS (1.5 s)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
CEILING = 30.0  # only ends a hang: what is awaited happens within ~2 s
SPAWNER = REPO / "tests" / "fakes" / "helper_spawner.py"
# Ignores SIGTERM; joins the cgroup argv[1] first if given. With argv[2], its SIGTERM handler
# forks a child (SIGTERM ignored too) that writes its pid there: a process born during the
# watchdog's grace, after its last look at the cgroup, that no snapshot of its ever saw.
STUBBORN = """\
import os, signal, sys, time
if len(sys.argv) > 1 and sys.argv[1]:
    with open(os.path.join(sys.argv[1], "cgroup.procs"), "w") as f:
        f.write("0")
def fork_hidden(signum, frame):
    if len(sys.argv) > 2 and os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(sys.argv[2] + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(sys.argv[2] + ".tmp", sys.argv[2])
        time.sleep(120)
        os._exit(0)
signal.signal(signal.SIGTERM, fork_hidden)
print("ok", flush=True)
time.sleep(120)
"""


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


def start_stubborn(
    started: list[subprocess.Popen[bytes]], cgroup: Path | None = None, hidden: Path | None = None
) -> subprocess.Popen[bytes]:
    """A SIGTERM-ignoring process (in its own session; in ``cgroup`` if given), once it ignores
    SIGTERM; with ``hidden``, SIGTERM makes it fork the child that announces itself there."""
    args = [str(cgroup or ""), *([str(hidden)] if hidden else [])]
    proc = subprocess.Popen(
        [sys.executable, "-c", STUBBORN, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    started.append(proc)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ok\n"  # SIGTERM is ignored from here on
    proc.stdout.close()
    return proc


@pytest.fixture
def cgroup_base(writable_cgroup: Containment) -> Path:
    """Where this process (the tests' stand-in gateway) makes backends' cgroups."""
    base = writable_cgroup.cgroup_base
    assert base is not None
    looked = gateway_cgroup_bases(os.getpid())
    if base not in looked:
        # The gateway's own base always holds its cgroup; only a mount of the tests' may not.
        assert detect().cgroup_base != base, f"the watchdog looks in {looked}, not {base}"
        pytest.skip(f"{base} does not hold this process's cgroup, where the watchdog looks")
    return base


@pytest.fixture
def backend_cgroup(cgroup_base: Path) -> Iterator[Path]:
    """A cgroup as the gateway makes one for a backend; ended and removed in teardown."""
    path = cgroups.make(cgroup_base, "reaper-test")
    yield path
    cgroups.end(path)


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
    stubborn = start_stubborn(sleeper)
    reaper.register(stubborn.pid)

    started = time.monotonic()
    reaper.close()

    assert stubborn.wait(timeout=60) == -signal.SIGKILL
    assert time.monotonic() - started >= GRACE_SECONDS  # SIGKILL only after the grace


def test_the_backend_cgroup_ends_what_no_snapshot_saw(
    reaper: Reaper,
    sleeper: list[subprocess.Popen[bytes]],
    backend_cgroup: Path,
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    """A keeper killed before its own ``cgroup.kill``: the watchdog's does it. The helper
    joined the cgroup after the registration, outside the registered tree, and forks a
    SIGTERM-ignoring child when the watchdog's SIGTERM comes — one that only the cgroup holds."""
    root = start_sleeper(sleeper)  # the keeper's place: the registered tree
    reaper.register(root.pid, backend_cgroup)
    hidden = tmp_path / "hidden.pid"
    helper = start_stubborn(sleeper, backend_cgroup, hidden)
    assert keeper_program.cgroup_pids(str(backend_cgroup)) == {helper.pid}
    assert helper.pid not in {child.pid for child in psutil.Process(root.pid).children(True)}

    reaper.close()  # as if the gateway died

    assert helper.wait(timeout=CEILING) == -signal.SIGKILL
    assert root.wait(timeout=CEILING) == -signal.SIGTERM
    wait_until(lambda: not backend_cgroup.exists(), f"{backend_cgroup} removed")
    if not hidden.exists():
        pytest.skip(
            "the helper was killed before its SIGTERM handler forked (starved for the "
            "whole grace): no hidden child to check this time"
        )
    child = psutil.Process(int(hidden.read_text()))
    tracker.add(child.pid)
    assert not is_alive(child), "the child born into the cgroup during the grace survived"


def test_the_watchdog_ends_a_tagged_helper_no_snapshot_saw(
    reaper: Reaper,
    sleeper: list[subprocess.Popen[bytes]],
    tracker: ProcessTracker,
    tmp_path: Path,
) -> None:
    """No cgroup, the keeper killed before it saw the helper: the helper daemonised out of the
    registered tree (to init), but carries its backend's tag; the watchdog finds it by that.
    A process with another tag is left alone."""
    root = start_sleeper(sleeper)  # the keeper's place: the registered tree
    tag, other = tree.new_tag(), tree.new_tag()
    reaper.register(root.pid, None, tag=tag)
    helpers = {}
    for name, its_tag in (("tagged", tag), ("other", other)):
        pidfile = tmp_path / f"{name}.pid"
        argv = [sys.executable, str(SPAWNER), "--mode", "daemon", "--pidfile", str(pidfile)]
        env = {**os.environ, tree.TAG_ENV: its_tag}
        subprocess.run([*argv, "--", "true"], env=env, check=True, timeout=CEILING)
        helpers[name] = psutil.Process(int(pidfile.read_text()))
        tracker.add(helpers[name].pid)
    assert helpers["tagged"].pid not in {c.pid for c in psutil.Process(root.pid).children(True)}

    reaper.close()  # as if the gateway died

    wait_until(lambda: not is_alive(helpers["tagged"]), "the tagged helper ended")
    assert is_alive(helpers["other"])
    helpers["other"].kill()


async def test_the_watchdog_ends_a_backend_cgroup_its_keeper_cannot(
    reaper: Reaper,
    writable_cgroup: Containment,
    cgroup_base: Path,
    make_model: MakeModel,
    make_process: MakeProcess,
    tracker: ProcessTracker,
) -> None:
    """The gateway registers each backend's cgroup with its keeper: a keeper that cannot act
    (stopped here, as a starved one is slow) leaves its cgroup to the watchdog, which kills
    and removes it."""
    config = make_model("--ignore-sigterm")
    process = make_process(config, reaper=reaper, containment=writable_cgroup)
    await process.ensure_ready()
    assert process.pid is not None
    assert process.keeper_pid is not None
    tracker.add(process.keeper_pid)
    # Not in a thread: this loop, and so the ManagedProcess, does nothing until it returns.
    close_with_the_keeper_stopped(reaper, cgroup_base, process.pid, process.keeper_pid)


def close_with_the_keeper_stopped(reaper: Reaper, base: Path, backend_pid: int, pid: int) -> None:
    backend, keeper_proc = psutil.Process(backend_pid), psutil.Process(pid)
    own = cgroups.own_cgroup(Path(f"/proc/{backend_pid}/cgroup").read_text()) or ""
    directory = base / own.rsplit("/", 1)[1]
    assert cgroups.owner(directory.name) == os.getpid(), own
    assert reaper.pid is not None
    watchdog = psutil.Process(reaper.pid)
    os.kill(pid, signal.SIGSTOP)

    reaper.close()

    assert not survivors({"watchdog": watchdog}, time.monotonic() + CEILING), "watchdog lingers"
    assert not directory.exists(), "the watchdog did not remove the backend's cgroup"
    assert not is_alive(backend)
    assert not is_alive(keeper_proc)


def test_a_cgroup_not_of_this_gateway_is_left_alone(
    reaper: Reaper,
    sleeper: list[subprocess.Popen[bytes]],
    cgroup_base: Path,
) -> None:
    """A ``+`` line naming a cgroup the gateway did not make: neither killed nor removed."""
    others = [
        cgroup_base / f"other-{os.getpid()}-reaper-test",
        cgroup_base / f"{cgroups.PREFIX}{os.getppid()}-1-reaper-test",  # another "gateway"'s
    ]
    try:
        for path in others:
            path.mkdir()
        outsider = start_stubborn(sleeper, others[0])
        roots = [start_sleeper(sleeper) for _ in others]
        for root, path in zip(roots, others, strict=True):
            reaper.register(root.pid, path)
        watchdog = psutil.Process(reaper.pid or 0)

        reaper.close()

        for root in roots:  # the watchdog did reap what was registered
            assert root.wait(timeout=CEILING) == -signal.SIGTERM
        assert not survivors({"watchdog": watchdog}, time.monotonic() + CEILING)
        assert outsider.poll() is None
        assert keeper_program.cgroup_pids(str(others[0])) == {outsider.pid}
        assert all(path.is_dir() for path in others)
    finally:
        for path in others:
            cgroups.end(path)


def test_a_cgroup_path_outside_the_gateway_cgroups_is_never_written(
    reaper: Reaper, sleeper: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Looks like one of ours by name, but is a plain directory outside every cgroup mount;
    and the same reached through ``..``."""
    fake = tmp_path / f"{cgroups.PREFIX}{os.getpid()}-1-fake"
    fake.mkdir()
    for name in ("cgroup.procs", "cgroup.kill", "cgroup.events"):
        (fake / name).write_text("")
    paths = [fake, tmp_path / "x" / ".." / fake.name]
    roots = [start_sleeper(sleeper) for _ in paths]
    for root, path in zip(roots, paths, strict=True):
        reaper.register(root.pid, path)
    watchdog = psutil.Process(reaper.pid or 0)

    reaper.close()

    for root in roots:
        assert root.wait(timeout=CEILING) == -signal.SIGTERM
    assert not survivors({"watchdog": watchdog}, time.monotonic() + CEILING)
    assert (fake / "cgroup.kill").read_text() == ""
    assert fake.is_dir()


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
