"""Process-tree helpers: find every descendant of a backend and make sure none survives.

A backend may fork helpers that call ``setsid()`` and so leave its process group; signalling
the group alone misses them. We therefore snapshot the descendant tree (pid + creation time,
so a recycled pid is never signalled) and signal the snapshot as well as the group.
"""

from __future__ import annotations

import contextlib
import os
import signal

import psutil

ProcKey = tuple[int, float]  # (pid, create_time)


def snapshot(root_pid: int) -> set[ProcKey]:
    """The root and all its live descendants, as (pid, create_time)."""
    try:
        root = psutil.Process(root_pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return set()
    keys: set[ProcKey] = set()
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            keys.add((proc.pid, proc.create_time()))
    return keys


def _alive(key: ProcKey) -> psutil.Process | None:
    try:
        proc = psutil.Process(key[0])
        if proc.create_time() != key[1] or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def alive(keys: set[ProcKey]) -> set[ProcKey]:
    return {key for key in keys if _alive(key) is not None}


def _protected(pid: int) -> bool:
    """Never signal init, ourselves, or our own process group: a wrong pid here would take
    down far more than a backend."""
    return pid <= 1 or pid == os.getpid() or pid == os.getpgrp()


def signal_group(pgid: int, sig: signal.Signals) -> None:
    if _protected(pgid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def signal_all(keys: set[ProcKey], sig: signal.Signals) -> None:
    for key in keys:
        if _protected(key[0]):
            continue
        proc = _alive(key)
        if proc is not None:
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)
