"""A backend started from the spare keeper (supervisor/spare.py) is a backend like any other:
the same pid semantics, the same diagnosis of a command that cannot run, the same stop; and the
launcher's close leaves nothing behind."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest
from tests.integration.conftest import MakeModel, MakeProcess, ProcessTracker, is_alive

from modelswap.errors import StartError
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
