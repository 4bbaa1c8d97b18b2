"""The orphan reaper: no backend may outlive modelswap, even when modelswap is SIGKILLed.

The first line of defence is each backend's keeper (:mod:`modelswap.supervisor.keeper_program`),
which notices the gateway's death itself and ends its tree; this watchdog is the second, for a
keeper that was killed along with the gateway. It watches the keepers' trees (the roots registered).

A parent-death signal reaches only direct children and a process group kill misses helpers that
called ``setsid()``. So modelswap starts this small watchdog once, in its own session, with a
pipe on its stdin. modelswap writes ``+PID`` (or ``+PID<TAB>CGROUP[<TAB>TAG]``: the backend's
cgroup where it has one, the tag in its environment, :func:`tree.new_tag`) and ``-PID`` lines as
backends start and stop; the watchdog keeps a fresh snapshot of each registered backend's whole
process tree. When the pipe reaches end-of-file (modelswap exited, however it died), every
process it knows of and every member of those cgroups gets SIGTERM; after a short grace each
cgroup gets ``cgroup.kill``, every process it knows of SIGKILL, and every process still carrying
a registered tag SIGKILL too; it waits (bounded) until each cgroup is empty, removes it, and
exits. The ``cgroup.kill`` and the tags are what end a helper no snapshot saw, had the keeper
been killed before its own.

A cgroup is taken only if it is one the gateway made: a direct child of a cgroup v2 directory
that holds the gateway's own cgroup, named ``modelswap-<gateway pid>-...``, written plainly
(absolute, no ``..``, no symlink); any other path is ignored.

Run as ``python -m modelswap.supervisor.reaper``; :class:`Reaper` is the gateway's side.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path

import psutil

from modelswap.supervisor import cgroups, keeper_program, tree

SCAN_INTERVAL = 0.2
GRACE_SECONDS = 1.5
CGROUP_CEILING = 5.0  # only ends a hang: a killed cgroup empties within milliseconds
READY_LINE = b"modelswap-reaper ready"


class Reaper:
    """modelswap's handle on the watchdog process. Methods never block for long and never raise."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Start the watchdog and wait for its hello, so a watchdog that cannot run (e.g.
        modelswap not importable by ``sys.executable``) fails loudly here, not silently later."""
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "modelswap.supervisor.reaper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
        )
        assert self._proc.stdout is not None
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        hello = self._proc.stdout.readline() if ready else b""
        if hello.strip() != READY_LINE:
            self._proc.kill()
            self._proc.communicate()
            self._proc = None
            raise RuntimeError(
                f"the orphan watchdog ({sys.executable} -m modelswap.supervisor.reaper) "
                "did not start"
            )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def register(self, pid: int, cgroup: Path | None = None, *, tag: str = "") -> None:
        """Watch ``pid``'s tree and, if given, the cgroup its backend runs in and the tag in its
        environment."""
        if pid <= 1 or pid == os.getpid():
            raise ValueError(f"refusing to watch pid {pid}: not a backend")
        path = "" if cgroup is None else str(cgroup)
        if "\n" in path or "\t" in path:
            path = ""  # cannot be said on one line; the keeper still ends that cgroup
        if tag:
            self._send(f"+{pid}\t{path}\t{tag}\n")
        else:
            self._send(f"+{pid}\t{path}\n" if path else f"+{pid}\n")

    def unregister(self, pid: int) -> None:
        self._send(f"-{pid}\n")

    def _send(self, line: str) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        with contextlib.suppress(OSError):
            self._proc.stdin.write(os.fsencode(line))
            self._proc.stdin.flush()

    def close(self) -> None:
        """Close the pipe: the watchdog reaps whatever is still registered, then exits."""
        if self._proc is None:
            return
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=GRACE_SECONDS + 2)
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        self._proc = None


def _members(path: Path) -> set[tree.ProcKey]:
    """The processes in the cgroup now, as (pid, create_time)."""
    keys: set[tree.ProcKey] = set()
    for pid in keeper_program.cgroup_pids(str(path)):
        with contextlib.suppress(psutil.Error):
            keys.add((pid, psutil.Process(pid).create_time()))
    return keys


def _reap(
    known: dict[int, set[tree.ProcKey]], groups: Collection[Path] = (), tags: Collection[str] = ()
) -> None:
    everything: set[tree.ProcKey] = set()
    for root, keys in known.items():
        everything |= keys | tree.snapshot(root)
        tree.signal_group(root, signal.SIGTERM)
    for path in groups:
        everything |= _members(path)
    tree.signal_all(everything, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while time.monotonic() < deadline and (
        tree.alive(everything) or any(keeper_program.cgroup_populated(str(path)) for path in groups)
    ):
        time.sleep(0.05)
    # cgroup.kill first: a keeper SIGKILLed below may not have written its own yet, and a helper
    # that no snapshot saw is still in its cgroup.
    for path in groups:
        keeper_program.cgroup_kill(str(path))
    for root in known:
        everything |= tree.snapshot(root)  # helpers that reparented to the keeper meanwhile
        tree.signal_group(root, signal.SIGKILL)
    tree.signal_all(everything, signal.SIGKILL)
    for tag in tags:  # helpers that daemonised after the last snapshot, their keeper killed
        tree.end_tagged(tag)
    deadline = time.monotonic() + CGROUP_CEILING
    for path in groups:  # the keeper removes its cgroup once it is empty; it may be dead
        cgroups.end(path, max(0.0, deadline - time.monotonic()))


def gateway_cgroup_bases(gateway: int) -> list[Path]:
    """The cgroup v2 directories that hold ``gateway``'s own cgroup (one per cgroup2 mount that
    shows it): where the gateway makes its backends' cgroups."""
    mountinfo, _ = cgroups.read_self()
    try:
        own = cgroups.own_cgroup(Path(f"/proc/{gateway}/cgroup").read_text())
    except OSError:
        return []
    return [] if own is None else cgroups.candidates(cgroups.cgroup2_mounts(mountinfo), own)


def allowed_cgroup(text: str, bases: Collection[Path], gateway: int) -> Path | None:
    """The cgroup named in a ``+`` line if the gateway made it, else None: a direct child of
    one of ``bases``, named ``modelswap-<gateway>-...``, written plainly (absolute, no ``..``,
    no ``//``, no symlink on the way) and a cgroup directory."""
    path = Path(text)
    if not path.is_absolute() or ".." in path.parts or str(path) != text:
        return None
    if path.parent not in bases or cgroups.owner(path.name) != gateway:
        return None
    if os.path.realpath(path) != text or not (path / "cgroup.procs").is_file():
        return None
    return path


class _Watch:
    """What the watchdog knows: each registered root's tree, and its backend's cgroup."""

    def __init__(self, gateway: int) -> None:
        self.gateway = gateway
        self.known: dict[int, set[tree.ProcKey]] = {}
        self.groups: dict[int, Path] = {}
        self.tags: dict[int, str] = {}

    def apply(self, line: str) -> None:
        head, _, rest = line.strip("\n").partition("\t")
        cgroup, _, tag = rest.partition("\t")
        head = head.strip()
        if len(head) < 2 or not head[1:].isdigit():
            return
        pid = int(head[1:])
        if pid <= 1 or pid in (os.getpid(), self.gateway):
            return  # never init, the watchdog itself or the gateway
        if head[0] == "+":
            self.known[pid] = self.known.get(pid, set()) | tree.snapshot(pid)
            path = None
            if cgroup:
                path = allowed_cgroup(cgroup, gateway_cgroup_bases(self.gateway), self.gateway)
            if path is not None:
                self.groups[pid] = path
            if tag:
                self.tags[pid] = tag
        elif head[0] == "-":
            self.known.pop(pid, None)
            self.groups.pop(pid, None)
            self.tags.pop(pid, None)

    def scan(self) -> None:
        for root in list(self.known):
            # Union, not replace: a helper whose parent already exited stays known.
            keys = tree.alive(self.known[root]) | tree.snapshot(root)
            self.known[root] = {key for key in keys if key[0] != self.gateway}

    def reap(self) -> None:
        if self.known:
            _reap(self.known, list(self.groups.values()), list(self.tags.values()))


def run() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only end-of-file ends the watch
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    watch = _Watch(os.getppid())
    sys.stdout.buffer.write(READY_LINE + b"\n")
    sys.stdout.flush()
    fd = sys.stdin.fileno()
    buffer = b""
    while True:
        ready, _, _ = select.select([fd], [], [], SCAN_INTERVAL)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            *lines, buffer = (buffer + chunk).split(b"\n")
            for line in lines:
                watch.apply(os.fsdecode(line))
        watch.scan()
    watch.reap()


if __name__ == "__main__":
    run()
