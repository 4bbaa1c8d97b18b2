from __future__ import annotations

import pytest

from modelswap.states import ALLOWED_TRANSITIONS, ProcessState, can_transition

S = ProcessState

LEGAL = {
    (S.STOPPED, S.STARTING),
    (S.STOPPED, S.SHUTDOWN),
    (S.STARTING, S.READY),
    (S.STARTING, S.FAILED),
    (S.STARTING, S.STOPPING),
    (S.READY, S.STOPPING),
    (S.READY, S.FAILED),
    (S.READY, S.SLEEPING),
    (S.SLEEPING, S.READY),
    (S.SLEEPING, S.STOPPING),
    (S.SLEEPING, S.FAILED),
    (S.STOPPING, S.STOPPED),
    (S.STOPPING, S.SHUTDOWN),
    (S.FAILED, S.STARTING),
    (S.FAILED, S.STOPPING),
    (S.FAILED, S.STOPPED),
    (S.FAILED, S.SHUTDOWN),
}


@pytest.mark.parametrize("old", list(S))
@pytest.mark.parametrize("new", list(S))
def test_states_transition_table_is_exactly_the_design(
    old: ProcessState, new: ProcessState
) -> None:
    assert can_transition(old, new) is ((old, new) in LEGAL)


def test_states_every_state_has_a_row_and_shutdown_is_terminal() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(S)
    assert ALLOWED_TRANSITIONS[S.SHUTDOWN] == frozenset()


def test_states_ready_is_reached_only_by_starting_or_waking() -> None:
    assert [old for old in S if can_transition(old, S.READY)] == [S.STARTING, S.SLEEPING]
