"""The prompt cache's proof (issue 38): each restore judged by the first answer after it, the
verdict per model, and saving stopped after restores that never work."""

from __future__ import annotations

import pytest

from modelswap.reported import CacheHazard
from modelswap.supervisor.cacheproof import STOP_AFTER, Verdicts, judge

SWA = CacheHazard("swa", "a sliding-window model", "add --swa-full")


@pytest.mark.parametrize(
    ("restored", "cached", "prompt", "state"),
    [
        (1466, 1466, 1500, "works"),
        (1466, 1400, 1500, "works"),  # a few tokens are evaluated again
        (1466, 700, 1500, "partly"),
        (1466, 0, 1500, "fails"),
        (200, 40, 41, "works"),  # a shorter prompt: only its prefix could be reused
        (200, 0, None, "fails"),
        (0, 0, 100, None),  # nothing restored: nothing proved
        (200, 0, 1, None),  # a one-token prompt reuses nothing
    ],
)
def test_judge(restored: int, cached: int, prompt: int | None, state: str | None) -> None:
    assert judge(restored, cached, prompt) == state


def test_unknown_until_the_first_answer_after_a_restore() -> None:
    verdicts = Verdicts()
    assert verdicts.get("m", "k").as_dict()["state"] == "unknown"
    assert not verdicts.answered("m", "k", 100, 120)  # no restore waits: nothing proved
    assert verdicts.get("m", "k").state == "unknown"
    verdicts.restored("m", "k", 100)
    assert verdicts.waiting("m")
    verdicts.answered("m", "k", 100, 120)
    verdict = verdicts.get("m", "k")
    assert verdict.state == "works"
    assert verdict.reason is None
    assert not verdicts.waiting("m")  # one proof per restore
    verdicts.answered("m", "k", 0, 120)
    assert verdicts.get("m", "k").state == "works"  # a later answer proves nothing


def test_an_answer_without_a_count_proves_nothing() -> None:
    verdicts = Verdicts()
    verdicts.restored("m", "k", 100)
    verdicts.answered("m", "k", None, 120)
    assert verdicts.get("m", "k").state == "unknown"
    assert not verdicts.waiting("m")  # the slot moved on: no later answer can say


def test_a_failure_carries_the_known_reason_and_fix() -> None:
    verdicts = Verdicts()
    verdicts.restored("m", "k", 100)
    verdicts.answered("m", "k", 0, 120, hazards=(SWA,))
    verdict = verdicts.get("m", "k").as_dict()
    assert verdict["state"] == "fails"
    assert verdict["reason"] == SWA.reason
    assert verdict["fix"] == SWA.fix
    verdicts.restored("m", "k", 100)
    verdicts.answered("m", "k", 0, 120, salted=True, hazards=(SWA,))
    assert "cache_salt" in str(verdicts.get("m", "k").reason)  # the salt explains it first


def test_saving_stops_after_failed_proofs_in_a_row_once() -> None:
    verdicts = Verdicts()
    stops = []
    for _ in range(STOP_AFTER + 2):
        verdicts.restored("m", "k", 100)
        stops.append(verdicts.answered("m", "k", 0, 120))
    assert stops == [False] * (STOP_AFTER - 1) + [True, False, False]  # said once
    assert not verdicts.saving("m", "k")
    assert "stopped" in verdicts.get("m", "k").as_dict()


def test_a_restore_that_works_resets_the_count() -> None:
    verdicts = Verdicts()
    for cached in [0] * (STOP_AFTER - 1) + [100] + [0] * (STOP_AFTER - 1):
        verdicts.restored("m", "k", 100)
        verdicts.answered("m", "k", cached, 120)
    assert verdicts.saving("m", "k")
    assert verdicts.get("m", "k").counts == {"fails": 2 * (STOP_AFTER - 1), "works": 1}


def test_a_partial_reuse_neither_stops_nor_resets() -> None:
    verdicts = Verdicts()
    for cached in [0] * (STOP_AFTER - 1) + [50]:
        verdicts.restored("m", "k", 100)
        verdicts.answered("m", "k", cached, 120)
    assert verdicts.get("m", "k").state == "partly"
    assert verdicts.get("m", "k").failed_in_a_row == STOP_AFTER - 1
    verdicts.restored("m", "k", 100)
    assert verdicts.answered("m", "k", 0, 120)  # the next failure stops


def test_a_changed_command_starts_over() -> None:
    verdicts = Verdicts(stop_after=1)
    verdicts.restored("m", "k", 100)
    verdicts.answered("m", "k", 0, 120)
    assert not verdicts.saving("m", "k")
    assert verdicts.saving("m", "k2")
    assert verdicts.get("m", "k2").state == "unknown"


def test_a_save_that_fails_counts_only_with_a_known_reason() -> None:
    verdicts = Verdicts(stop_after=2)
    assert not verdicts.save_failed("m", "k", ())  # a full disk says nothing of the cache
    assert verdicts.get("m", "k").state == "unknown"
    mmproj = CacheHazard("mmproj", "a projector is loaded", "no --mmproj")
    assert not verdicts.save_failed("m", "k", (mmproj,))
    verdict = verdicts.get("m", "k")
    assert verdict.state == "fails"
    assert verdict.reason is not None
    assert "projector" in verdict.reason
    assert verdicts.save_failed("m", "k", (mmproj,))  # the second in a row stops
