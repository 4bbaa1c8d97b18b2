"""cgroup v2 for backends: find a subtree this gateway may write, make one cgroup per backend.

A cgroup v2 subtree is usable when a ``cgroup2`` file system is mounted, this process's own
cgroup (the ``0::`` line of /proc/self/cgroup) lies under that mount, and a child cgroup can be
made there that offers ``cgroup.kill`` (Linux 5.14+). That holds for root on a host with a
cgroup2 mount (unified or hybrid) and for a delegated systemd scope
(``systemd-run --user --scope -p Delegate=yes modelswap serve``). Anywhere else
:func:`find_base` says why not and the caller falls back to the subreaper alone.

Backends' cgroups are ``<base>/modelswap-<gateway pid>-<n>-<model>``; the keeper removes each
when its tree is gone, and :func:`sweep_stale` removes the empty ones a killed gateway left.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from modelswap.supervisor import keeper_program

PREFIX = "modelswap-"
_NAME = re.compile(rf"^{PREFIX}(\d+)-\d+")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_sequence = itertools.count(1)


@dataclass(frozen=True)
class Mount:
    point: Path
    root: str  # the cgroup path mounted at ``point`` ("/" unless a namespace or bind mount)


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cgroup2_mounts(mountinfo: str) -> list[Mount]:
    """Every cgroup2 mount in /proc/self/mountinfo text."""
    found = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or right.split()[:1] != ["cgroup2"]:
            continue
        found.append(Mount(Path(_unescape(fields[4])), _unescape(fields[3])))
    return found


def own_cgroup(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path from /proc/self/cgroup text (the ``0::`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or None
    return None


def candidates(mounts: list[Mount], own: str) -> list[Path]:
    """Where our own cgroup appears in each mount."""
    out = []
    for mount in mounts:
        root = mount.root.rstrip("/")
        if own != root and not own.startswith(root + "/"):
            continue  # this mount shows another part of the tree
        out.append(mount.point / own[len(root) :].lstrip("/"))
    return out


def check_base(base: Path) -> str | None:
    """Why backends cannot get cgroups under ``base``; None if they can."""
    if not (base / "cgroup.procs").is_file():
        return f"{base} is not a cgroup v2 directory"
    if not os.access(base / "cgroup.procs", os.W_OK):
        return f"{base}/cgroup.procs is not writable (not root, and no delegated scope)"
    probe = base / f"{PREFIX}{os.getpid()}-probe"
    try:
        probe.mkdir()
    except FileExistsError:
        pass
    except OSError as exc:
        return f"cannot create a cgroup under {base}: {exc.strerror or exc}"
    try:
        if not (probe / "cgroup.kill").exists():
            return f"no cgroup.kill under {base} (Linux 5.14 or later is needed)"
    finally:
        with contextlib.suppress(OSError):
            probe.rmdir()
    return None


def find_base(mountinfo: str, proc_cgroup: str) -> tuple[Path | None, str]:
    """The writable cgroup v2 directory for backends' cgroups, or None and the reason why not."""
    mounts = cgroup2_mounts(mountinfo)
    if not mounts:
        return None, "no cgroup2 file system is mounted (cgroup v1 only)"
    own = own_cgroup(proc_cgroup)
    if own is None:
        return None, "this process has no cgroup v2 path in /proc/self/cgroup"
    bases = candidates(mounts, own)
    if not bases:
        return None, f"this process's cgroup {own} is outside every cgroup2 mount"
    reasons = []
    for base in bases:
        reason = check_base(base)
        if reason is None:
            return base, f"one cgroup v2 per backend under {base}, ended with cgroup.kill"
        reasons.append(reason)
    return None, "; ".join(reasons)


def read_self() -> tuple[str, str]:
    """(mountinfo, cgroup) of this process; empty strings where /proc lacks them."""
    texts = []
    for name in ("/proc/self/mountinfo", "/proc/self/cgroup"):
        try:
            texts.append(Path(name).read_text())
        except OSError:
            texts.append("")
    return texts[0], texts[1]


def make(base: Path, model: str) -> Path:
    """A new, empty cgroup for one start of ``model``; raises OSError."""
    name = _UNSAFE.sub("_", model)[:40]
    path = base / f"{PREFIX}{os.getpid()}-{next(_sequence)}-{name}"
    path.mkdir()
    return path


def owner(name: str) -> int | None:
    """The gateway pid in a backend cgroup's name (``modelswap-<pid>-<n>-...``); None if the
    name is not one of ours."""
    match = _NAME.match(name)
    return int(match.group(1)) if match else None


def sweep_stale(base: Path) -> int:
    """Remove the empty cgroups of gateways that are no longer alive; how many went.

    Only empty ones: rmdir of a populated cgroup fails (EBUSY), so this never ends a process —
    a dead gateway's live leftovers are for the orphan watchdog and the backend record."""
    removed = 0
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            pid = owner(entry.name)
            if pid is None or psutil.pid_exists(pid):
                continue
            with contextlib.suppress(OSError):
                entry.rmdir()
                removed += 1
    return removed


def end(path: Path, ceiling: float = 5.0) -> bool:
    """Kill everything in the cgroup, wait (up to ``ceiling``) until it is empty, remove it.

    The gateway's fallback for when the keeper could not do it; True if the cgroup is gone."""
    if not path.is_dir():
        return True
    keeper_program.cgroup_kill(str(path))
    deadline = time.monotonic() + ceiling
    while keeper_program.cgroup_populated(str(path)) and time.monotonic() < deadline:
        time.sleep(0.02)
    with contextlib.suppress(OSError):
        path.rmdir()
    return not path.exists()
