"""Process-tree helpers: find every descendant of a backend and make sure none survives.

A backend may fork helpers that call ``setsid()`` and so leave its process group; signalling
the group alone misses them. We therefore snapshot the descendant tree (pid + creation time,
so a recycled pid is never signalled) and signal the snapshot as well as the group.

A snapshot is only as fresh as its last look: a helper that daemonised after it, whose keeper
was then killed, reparents to init and leaves the tree unseen. So every backend also starts
with a *tag* in its environment (``MODELSWAP_TREE=<gateway pid>.<random>.<n>``), which every
process it forks inherits, daemons included; :func:`end_tagged` finds them again by reading
``/proc/*/environ`` — the cookie Jenkins's process-tree killer uses for the same problem. Only
an exact ``NAME=tag`` entry matches, and the tag holds 64 random bits, so nothing else is hit.
A process that replaced its whole environment before it exec'd is out of this reach (a cgroup
holds it: docs/RELIABILITY.md).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from collections.abc import Callable

import psutil

ProcKey = tuple[int, float]  # (pid, create_time)
TAG_ENV = "MODELSWAP_TREE"
TAG_ROUNDS = 50  # only ends a fork storm: each round kills what the last scan found
EXEC_REREADS = 20  # an environment that reads empty mid-exec is read again, 1 ms apart
PF_KTHREAD = 0x00200000  # /proc/PID/stat flags: a kernel thread (no environment, ever)
_tag_prefix: tuple[int, str] | None = None  # (pid, random): made anew in a forked child
_tag_numbers = itertools.count(1)


def new_tag() -> str:
    """A tag for one backend's start, unique among this gateway's and across gateways."""
    global _tag_prefix
    if _tag_prefix is None or _tag_prefix[0] != os.getpid():
        # os.urandom, as secrets.token_hex reads it: importing secrets would load hashlib's
        # OpenSSL into the orphan watchdog too, 2 MiB of its heap (docs/PERFORMANCE.md).
        _tag_prefix = (os.getpid(), f"{os.getpid()}.{os.urandom(8).hex()}")
    return f"{_tag_prefix[1]}.{next(_tag_numbers)}"


def tagged(tag: str, proc: str = "/proc", sleep: Callable[[float], None] = time.sleep) -> set[int]:
    """The processes (but this one) whose environment holds ``MODELSWAP_TREE=<tag>``. Another
    user's processes cannot be read and are never among them; a zombie's or a kernel thread's
    environment reads empty. So does a process's in the middle of ``exec``: the kernel sets
    the new environment's place after the old program is gone (and after ``subprocess``'s
    parent has returned), so an empty read of a live user process is read again, up to
    EXEC_REREADS times."""
    needle = b"\0" + os.fsencode(f"{TAG_ENV}={tag}") + b"\0"
    found: set[int] = set()
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    me = os.getpid()

    def look(names: list[str]) -> list[str]:
        """Add the tagged among ``names`` to ``found``; return those that may be mid-exec."""
        unsettled: list[str] = []
        for name in names:
            data = _environ(proc, name)
            if data == b"" and _may_be_in_exec(proc, name):
                unsettled.append(name)
            elif data and needle in b"\0" + data.rstrip(b"\0") + b"\0":
                found.add(int(name))
        return unsettled

    unsettled = look([name for name in names if name.isdigit() and int(name) != me])
    for _ in range(EXEC_REREADS):
        if not unsettled:
            break
        sleep(0.001)
        unsettled = look(unsettled)
    return found


def _environ(proc: str, name: str) -> bytes | None:
    try:
        with open(f"{proc}/{name}/environ", "rb") as f:
            return f.read()
    except OSError:
        return None


def _may_be_in_exec(proc: str, name: str) -> bool:
    """Whether an empty environment may be a process's between two programs: it is alive (not
    a zombie) and not a kernel thread. Without a readable ``stat`` it is taken as settled."""
    try:
        with open(f"{proc}/{name}/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2 :].split()
        return fields[0] not in (b"Z", b"X", b"x") and not int(fields[6]) & PF_KTHREAD
    except (OSError, ValueError, IndexError):
        return False


def end_tagged(tag: str, proc: str = "/proc") -> int:
    """SIGKILL every process carrying ``tag`` until a scan finds none (a fork between a scan
    and its kill is found by the next); how many were killed. Blocking: call it off the loop."""
    killed: set[ProcKey] = set()
    for _ in range(TAG_ROUNDS):
        keys: set[ProcKey] = set()
        for pid in tagged(tag, proc):
            with contextlib.suppress(psutil.Error):
                keys.add((pid, psutil.Process(pid).create_time()))
        left = alive(keys)
        if not left:
            break
        signal_all(left, signal.SIGKILL)
        killed |= left
        time.sleep(0.005)  # a SIGKILLed process needs a moment to stop being runnable
    return len(killed)


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
