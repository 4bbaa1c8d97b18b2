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


def _child_pids(pid: int) -> list[int] | None:
    """Children of ``pid`` from /proc/PID/task/*/children: [] when ``pid`` is gone, None when
    this kernel does not offer the files (then the caller scans every process instead)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    except OSError:
        return None
    out: list[int] = []
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
        except FileNotFoundError:
            if os.path.exists(f"/proc/{pid}/task/{task}"):
                return None  # the thread is there but not its children file
        except (OSError, ValueError):
            return None
    return out


def snapshot(root_pid: int) -> set[ProcKey]:
    """The root and all its live descendants, as (pid, create_time)."""
    keys: set[ProcKey] = set()
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        kids = _child_pids(pid)
        if kids is None:
            return _snapshot_psutil(root_pid)
        with contextlib.suppress(psutil.Error):
            keys.add((pid, psutil.Process(pid).create_time()))
            stack += kids
    return keys


def _snapshot_psutil(root_pid: int) -> set[ProcKey]:
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
