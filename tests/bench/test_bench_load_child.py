"""The aiohttp load clients run in a process of their own (bench/load.py's ``Child``): its
checks come back whole, and a child that fails or hangs is one wrong answer carrying its
stderr, never a crashed suite. The success path with real figures is the smoke run's
(test_bench_smoke.py)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from bench import load

pytestmark = pytest.mark.integration


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        yield sock.getsockname()[1]


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_childs_checks_come_back_whole(closed_port: int) -> None:
    outcome = load.Outcome()
    figures = load.streams(closed_port, {}, 30, 5, 0.0, outcome, timeout=5.0)
    assert figures.chunks == 0
    assert outcome.checked == 30
    assert outcome.failed == 30  # all counted, though only MAX_ERRORS are kept
    assert len(outcome.errors) == load.MAX_ERRORS
    assert "stream broke after 0 chunks" in outcome.errors[0]


def test_a_failing_child_is_a_wrong_answer_with_its_stderr() -> None:
    outcome = load.Outcome()
    with load.Child("no such client", {}, limit=30.0, outcome=outcome) as child:
        assert child.run() == {}
    assert (outcome.checked, outcome.failed) == (0, 1)
    assert "exited without an answer (exit status 1)" in outcome.errors[0]
    assert "unknown load client 'no such client'" in outcome.errors[0]


def test_a_stuck_child_is_killed_at_its_limit(silent_port: int) -> None:
    outcome = load.Outcome()
    args = {"port": silent_port, "headers": {}, "concurrency": 2, "n": 5, "rate": 0.0}
    args |= {"per_worker": 1, "timeout": 60.0}
    with load.Child("streams", args, limit=1.0, outcome=outcome) as child:
        assert child.run() == {}
        assert child.proc is not None
        assert child.proc.returncode is not None  # gone before the with ends
    assert outcome.failed == 1
    assert "sent no answer (limit 1 s); killed it (pid" in outcome.errors[0]
