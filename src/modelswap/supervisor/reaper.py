"""The orphan reaper: no backend may outlive modelswap, even when modelswap is SIGKILLed.

The first line of defence is each backend's keeper (:mod:`modelswap.supervisor.keeper`), which
notices the gateway's death itself and ends its tree; this watchdog is the second, for a keeper
that was killed along with the gateway. It watches the keepers' trees (the roots registered).

A parent-death signal reaches only direct children and a process group kill misses helpers that
called ``setsid()``. So modelswap starts this small watchdog once, in its own session, with a
pipe on its stdin. modelswap writes ``+PID`` / ``-PID`` lines as backends start and stop; the
watchdog keeps a fresh snapshot of each registered backend's whole process tree. When the pipe
reaches end-of-file (modelswap exited, however it died), every process it knows of gets SIGTERM,
then SIGKILL after a short grace, and the watchdog exits.

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

from modelswap.supervisor import tree

SCAN_INTERVAL = 0.2
GRACE_SECONDS = 1.5
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

    def register(self, pid: int) -> None:
        if pid <= 1 or pid == os.getpid():
            raise ValueError(f"refusing to watch pid {pid}: not a backend")
        self._send(f"+{pid}\n")

    def unregister(self, pid: int) -> None:
        self._send(f"-{pid}\n")

    def _send(self, line: str) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        with contextlib.suppress(OSError):
            self._proc.stdin.write(line.encode())
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


def _reap(known: dict[int, set[tree.ProcKey]]) -> None:
    everything: set[tree.ProcKey] = set()
    for root, keys in known.items():
        everything |= keys | tree.snapshot(root)
        tree.signal_group(root, signal.SIGTERM)
    tree.signal_all(everything, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while tree.alive(everything) and time.monotonic() < deadline:
        time.sleep(0.05)
    for root in known:
        tree.signal_group(root, signal.SIGKILL)
    tree.signal_all(everything, signal.SIGKILL)


def _apply(line: str, known: dict[int, set[tree.ProcKey]]) -> None:
    line = line.strip()
    if len(line) < 2 or not line[1:].isdigit():
        return
    pid = int(line[1:])
    if pid <= 1 or pid in (os.getpid(), os.getppid()):
        return  # never init, the watchdog itself or the gateway
    if line[0] == "+":
        known[pid] = known.get(pid, set()) | tree.snapshot(pid)
    elif line[0] == "-":
        known.pop(pid, None)


def run() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only end-of-file ends the watch
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    known: dict[int, set[tree.ProcKey]] = {}
    gateway = os.getppid()
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
            buffer += chunk
            *lines, buffer_text = buffer.decode(errors="replace").split("\n")
            buffer = buffer_text.encode()
            for line in lines:
                _apply(line, known)
        for root in list(known):
            # Union, not replace: a helper whose parent already exited stays known.
            keys = tree.alive(known[root]) | tree.snapshot(root)
            known[root] = {key for key in keys if key[0] != gateway}
    if known:
        _reap(known)


if __name__ == "__main__":
    run()
