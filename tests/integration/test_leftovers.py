"""The backend record in the state directory (supervisor/leftovers.py), with real processes.

Only processes these tests start are ever recorded or signalled: throwaway sleepers in their
own sessions, tracked by pid and creation time.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.integration.conftest import ProcessTracker, is_alive

from modelswap.supervisor import tree
from modelswap.supervisor.leftovers import BackendRecord

pytestmark = pytest.mark.integration

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


@pytest.fixture
def sleepers(tracker: ProcessTracker) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)


def sleeper(started: list[subprocess.Popen[bytes]], tracker: ProcessTracker) -> psutil.Process:
    proc = subprocess.Popen(SLEEPER, start_new_session=True, stdin=subprocess.DEVNULL)
    started.append(proc)
    tracker.add(proc.pid)
    return psutil.Process(proc.pid)


def dead_gateway_record(directory: Path, backends: list[dict[str, object]]) -> Path:
    """A record as a gateway that has since died would have left it (pid 2**22 + 1 with a
    creation time of 1.0 cannot be alive)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "gateway-4194305.json"
    path.write_text(
        json.dumps({"gateway": {"pid": 4194305, "create_time": 1.0}, "backends": backends})
    )
    return path


def entry(
    proc: psutil.Process, model: str = "m", created: float | None = None
) -> dict[str, object]:
    ct = proc.create_time() if created is None else created
    return {"model": model, "pid": proc.pid, "create_time": ct, "tree": [[proc.pid, ct]]}


def test_the_record_follows_the_backends(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]], tracker: ProcessTracker
) -> None:
    record = BackendRecord(tmp_path / "backends")
    backend = sleeper(sleepers, tracker)
    record.add("m", backend.pid)
    assert record.path is not None
    data = json.loads(record.path.read_text())
    assert data["gateway"]["pid"] == os.getpid()
    assert [(b["model"], b["pid"]) for b in data["backends"]] == [("m", backend.pid)]
    helper = sleeper(sleepers, tracker)
    record.update(backend.pid, tree.snapshot(backend.pid) | tree.snapshot(helper.pid))
    recorded = json.loads(record.path.read_text())["backends"][0]["tree"]
    assert sorted(pid for pid, _ in recorded) == sorted([backend.pid, helper.pid])
    record.remove(backend.pid)
    assert not record.path.exists(), "no backend left: no file"


def test_a_dead_gateways_backends_are_ended_and_its_record_removed(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]], tracker: ProcessTracker
) -> None:
    backend = sleeper(sleepers, tracker)
    helper = sleeper(sleepers, tracker)  # a helper that left the backend's session
    row = entry(backend)
    row["tree"] = [[backend.pid, backend.create_time()], [helper.pid, helper.create_time()]]
    path = dead_gateway_record(tmp_path / "backends", [row])

    ended = BackendRecord(tmp_path / "backends").reap_leftovers()

    assert len(ended) == 1
    assert "ended 2 leftover processes of modelswap pid 4194305" in ended[0]
    assert not is_alive(backend)
    assert not is_alive(helper)
    assert not path.exists()


def test_a_dead_gateways_tagged_helper_is_ended_though_never_recorded(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]], tracker: ProcessTracker
) -> None:
    """A helper that daemonised after the record's last look is found by its backend's tag."""
    backend = sleeper(sleepers, tracker)
    tag = tree.new_tag()
    helper = subprocess.Popen(
        SLEEPER, start_new_session=True, env={**os.environ, tree.TAG_ENV: tag}
    )
    sleepers.append(helper)
    tracker.add(helper.pid)
    dead_gateway_record(tmp_path / "backends", [{**entry(backend), "tag": tag}])

    ended = BackendRecord(tmp_path / "backends").reap_leftovers()

    assert "ended 2 leftover processes" in ended[0]
    assert helper.wait(timeout=60) in (-signal.SIGTERM, -signal.SIGKILL)


def test_a_recycled_pid_is_never_signalled(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]], tracker: ProcessTracker
) -> None:
    innocent = sleeper(sleepers, tracker)
    # Recorded with another creation time: the pid now belongs to someone else.
    dead_gateway_record(tmp_path / "backends", [entry(innocent, created=123.0)])
    assert BackendRecord(tmp_path / "backends").reap_leftovers() == []
    assert is_alive(innocent)


def test_a_live_gateways_record_is_left_alone(
    tmp_path: Path, sleepers: list[subprocess.Popen[bytes]], tracker: ProcessTracker
) -> None:
    owner = sleeper(sleepers, tracker)  # stands for a gateway that still runs
    backend = sleeper(sleepers, tracker)
    directory = tmp_path / "backends"
    directory.mkdir()
    path = directory / f"gateway-{owner.pid}.json"
    path.write_text(
        json.dumps(
            {
                "gateway": {"pid": owner.pid, "create_time": owner.create_time()},
                "backends": [entry(backend)],
            }
        )
    )
    assert BackendRecord(directory).reap_leftovers() == []
    assert is_alive(backend)
    assert path.exists()


def test_an_unwritable_directory_is_logged_once_and_never_raises(
    tmp_path: Path,
    sleepers: list[subprocess.Popen[bytes]],
    tracker: ProcessTracker,
    caplog: pytest.LogCaptureFixture,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    record = BackendRecord(blocker / "backends")
    first, second = sleeper(sleepers, tracker), sleeper(sleepers, tracker)
    with caplog.at_level(logging.WARNING, logger="modelswap.supervisor.leftovers"):
        record.add("a", first.pid)
        record.add("b", second.pid)
        record.remove(first.pid)
        assert record.reap_leftovers() == []
    assert len([r for r in caplog.records if "cannot record" in r.getMessage()]) == 1
