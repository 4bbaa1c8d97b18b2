"""Processes and ports for the suite: free ports, HTTP probes, waiting, stopping by PID, and
reading a process's CPU time and memory from /proc (Linux)."""

from __future__ import annotations

import contextlib
import http.client
import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil


def rss_bytes(procs: list[psutil.Process]) -> int:
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            total += proc.memory_info().rss
    return total


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """CPU time used so far: the scheduler's nanosecond count summed over every thread
    (``/proc/PID/task/*/schedstat``); psutil's 10 ms ticks where that cannot be read."""
    total = 0.0
    for proc in procs:
        try:
            for task in Path(f"/proc/{proc.pid}/task").iterdir():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    total += int((task / "schedstat").read_text().split()[0]) / 1e9
        except OSError:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
    return total


def reset_peak_rss(procs: list[psutil.Process]) -> bool:
    """Reset the kernel's high-water mark (VmHWM) of each process; False where not allowed."""
    ok = True
    for proc in procs:
        try:
            Path(f"/proc/{proc.pid}/clear_refs").write_text("5")
        except OSError:
            ok = False
    return ok


def peak_rss_bytes(procs: list[psutil.Process]) -> int:
    total = 0
    for proc in procs:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1]) * 1024
    return total


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_port(count: int = 8) -> int:
    """A ``startPort`` whose next ``count`` ports can be listened on now, below the ephemeral
    range: a port from :func:`free_port` is an ephemeral one, which the load clients' own
    connections may take before a backend restarted on it binds (tests/e2e/conftest.py's
    free_port_range, for the same reason)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        start = rng.randrange(10000, max(10001, low - count))
        try:
            for port in range(start, start + count):
                with socket.socket() as sock:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind(("127.0.0.1", port))
                    sock.listen(1)
        except OSError:
            continue
        return start
    raise RuntimeError("no free port range below the ephemeral range")


def http_status(port: int, path: str, timeout: float = 2.0) -> int | None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    except OSError:
        return None
    finally:
        conn.close()


def http_post(port: int, path: str, body: bytes = b"", timeout: float = 60.0) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def tool_version(cmd: list[str]) -> str | None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (done.stdout + done.stderr).strip().splitlines()
    return text[0].strip() if text else None


def wait_until(
    check: Callable[[], bool],
    what: str,
    *,
    timeout: float = 90.0,
    proc: subprocess.Popen[bytes] | None = None,
    log: Path | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:] if log and log.exists() else ""
            raise RuntimeError(f"{what} exited with {proc.returncode} while starting:\n{tail}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become ready within {timeout:g} s")
        time.sleep(0.02)


def stop(proc: subprocess.Popen[bytes], grace: float = 15.0) -> None:
    """SIGTERM the process (its group: it was started in a session of its own), then SIGKILL."""
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
        return
    except subprocess.TimeoutExpired:
        pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5)
