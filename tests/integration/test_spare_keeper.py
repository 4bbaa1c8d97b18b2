"""A backend started from the spare keeper (supervisor/spare.py) is a backend like any other:
the same pid semantics, the same diagnosis of a command that cannot run, the same stop; and the
launcher's close leaves nothing behind."""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest
from tests.integration.conftest import MakeModel, MakeProcess, ProcessTracker, is_alive

from modelswap.errors import StartError
from modelswap.supervisor import keeper_client, keeper_program
from modelswap.supervisor.containment import detect
from modelswap.supervisor.spare import Launcher

CEILING = 30.0  # only ends a hang


@pytest.fixture
async def launcher() -> AsyncIterator[Launcher]:
    made = Launcher(detect(), spare=True)
    made.begin()
    yield made
    async with asyncio.timeout(CEILING):
        await made.close()


async def ready_spare(launcher: Launcher, tracker: ProcessTracker) -> tuple[int, Path | None]:
    """The ready spare's waiting child (the next backend's pid) and its cgroup."""
    async with asyncio.timeout(CEILING):
        while launcher.spare is None:  # noqa: ASYNC110 - the launcher offers no event for it
            await asyncio.sleep(0.01)
    spare = launcher.spare
    (child,) = psutil.Process(spare.keeper_pid).children()
    tracker.add(spare.keeper_pid)
    tracker.add(child.pid)
    return child.pid, spare.cgroup


async def test_a_backend_from_the_spare_is_the_spares_child(
    launcher: Launcher, make_model: MakeModel, make_process: MakeProcess, tracker: ProcessTracker
) -> None:
    child, cgroup = await ready_spare(launcher, tracker)
    process = make_process(make_model(), launcher=launcher)

    await process.ensure_ready()

    assert process.pid == child
    keeper = psutil.Process(child).parent()
    assert keeper is not None
    assert process.keeper_pid == keeper.pid
    backend = psutil.Process(child)
    await process.stop()
    assert not is_alive(keeper)
    assert not is_alive(backend)
    if cgroup is not None:
        assert not cgroup.exists()
    await ready_spare(launcher, tracker)  # the next one, made once that start was READY


async def test_a_command_that_cannot_run_is_diagnosed_as_without_a_spare(
    launcher: Launcher, make_model: MakeModel, make_process: MakeProcess, tracker: ProcessTracker
) -> None:
    _, cgroup = await ready_spare(launcher, tracker)
    missing = make_model(cmd=("/nonexistent/modelswap-test-server", "--port", "1"))
    process = make_process(missing, launcher=launcher)

    with pytest.raises(StartError) as failed:
        await process.ensure_ready()

    assert failed.value.diagnosis.code == "executable_not_found"
    if cgroup is not None:
        assert not cgroup.exists()


async def test_closing_the_launcher_ends_its_spare(
    launcher: Launcher, tracker: ProcessTracker
) -> None:
    child, cgroup = await ready_spare(launcher, tracker)
    spare = launcher.spare
    assert spare is not None
    keeper = psutil.Process(spare.keeper_pid)
    waiting = psutil.Process(child)

    await launcher.close()

    assert not is_alive(keeper)
    assert not is_alive(waiting)
    if cgroup is not None:
        assert not cgroup.exists()


# ---- the hand-over: the gateway writes the command to the spare's waiting child itself ------


async def test_the_spare_keeper_gives_the_gateway_its_childs_command_pipe_close_on_exec(
    tracker: ProcessTracker,
) -> None:
    async with asyncio.timeout(CEILING):
        spare = await keeper_client.spawn_spare()
    tracker.add(spare.keeper_pid)
    commands = spare._commands
    try:
        assert commands is not None
        assert stat.S_ISFIFO(os.fstat(commands).st_mode)
        # Close-on-exec: no backend or keeper the gateway starts later may hold it open.
        assert fcntl.fcntl(commands, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
        async with asyncio.timeout(CEILING):
            proc = await spare.use([sys.executable, "-c", "print('handed')"], env=dict(os.environ))
            assert spare._commands is None  # written to and closed
            assert proc.stdout is not None
            assert await proc.stdout.read() == b"handed\n"
            assert await proc.wait() == 0
    finally:
        await spare.discard()


async def test_a_command_too_large_to_hand_over_goes_through_the_keeper(
    tracker: ProcessTracker,
) -> None:
    async with asyncio.timeout(CEILING):
        spare = await keeper_client.spawn_spare()
    tracker.add(spare.keeper_pid)
    big = "x" * (
        keeper_client.HAND_LIMIT + 10_000
    )  # a vast environment: past what the pipe takes at once
    code = "import os; print(len(os.environ['MODELSWAP_TEST_BIG']))"
    async with asyncio.timeout(CEILING):
        proc = await spare.use(
            [sys.executable, "-c", code], env={**os.environ, "MODELSWAP_TEST_BIG": big}
        )
        assert proc.stdout is not None
        assert await proc.stdout.read() == f"{len(big)}\n".encode()
        assert await proc.wait() == 0


async def test_a_gateway_gone_between_telling_the_keeper_and_handing_the_command_leaves_nothing(
    tracker: ProcessTracker,
) -> None:
    """The gateway tells the keeper first that it hands the command to the child itself, then
    writes it: gone in between, the child reads end-of-file and exits, and so does the keeper
    once the gateway's socket closes."""
    async with asyncio.timeout(CEILING):
        spare = await keeper_client.spawn_spare()
    keeper_proc = psutil.Process(spare.keeper_pid)
    (child,) = keeper_proc.children()
    tracker.add(keeper_proc.pid)
    tracker.add(child.pid)
    commands, control = spare._commands, spare._control
    assert commands is not None
    spec = keeper_program.Spec([sys.executable, "-c", "print('never')"], env=dict(os.environ))
    control.setblocking(True)
    control.sendall(keeper_program.HANDED + keeper_program.encode_spec(spec))
    os.close(commands)  # the gateway's copy of the pipe goes, nothing written
    spare._commands = None
    async with asyncio.timeout(CEILING):
        while is_alive(child):  # noqa: ASYNC110 - a foreign process: no event to wait on
            await asyncio.sleep(0.01)
    control.close()
    async with asyncio.timeout(CEILING):
        assert await spare.keeper.wait() is not None
        assert spare.keeper.stdout is not None
        printed = await spare.keeper.stdout.read()  # the child's output would be here
    assert b"never" not in printed  # the keeper did not write the command itself
    assert not is_alive(keeper_proc)
