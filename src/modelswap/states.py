"""Process states and the one table of legal transitions. Stdlib only.

The lifecycle they describe: docs/architecture.md, "Process lifecycle".
"""

from __future__ import annotations

from enum import StrEnum


class ProcessState(StrEnum):
    STOPPED = "stopped"
    STARTING = "starting"
    READY = "ready"
    SLEEPING = "sleeping"  # vLLM sleep mode: process alive, weights offloaded to host memory
    STOPPING = "stopping"
    FAILED = "failed"
    SHUTDOWN = "shutdown"


_S = ProcessState

ALLOWED_TRANSITIONS: dict[ProcessState, frozenset[ProcessState]] = {
    _S.STOPPED: frozenset({_S.STARTING, _S.SHUTDOWN}),
    # A start ends ready, failed (exit, timeout, spawn error) or is aborted by a stop.
    _S.STARTING: frozenset({_S.READY, _S.FAILED, _S.STOPPING}),
    # A ready process is stopped on purpose, or dies on its own (failed).
    _S.READY: frozenset({_S.STOPPING, _S.FAILED, _S.SLEEPING}),
    # A sleeping process wakes (ready), is stopped, or dies.
    _S.SLEEPING: frozenset({_S.READY, _S.STOPPING, _S.FAILED}),
    _S.STOPPING: frozenset({_S.STOPPED, _S.SHUTDOWN}),
    # Failed is terminal for one attempt: the next request may start it again.
    _S.FAILED: frozenset({_S.STARTING, _S.STOPPING, _S.STOPPED, _S.SHUTDOWN}),
    _S.SHUTDOWN: frozenset(),
}


def can_transition(current: ProcessState, new: ProcessState) -> bool:
    return new in ALLOWED_TRANSITIONS[current]
