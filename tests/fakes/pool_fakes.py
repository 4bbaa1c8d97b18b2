"""Starting what a peer-pool test needs, as real processes on loopback: the DNS server
(``dns_server.py``) whose records the test rewrites, and recording peers that share one port on
several loopback addresses (127.0.0.2, 127.0.0.3 …), as the pods behind a headless Service do.

Every process is kept by its handle and ended by it (never by name).
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

FAKES = Path(__file__).resolve().parent
HANG = 60.0


class DnsServer:
    """``udp_limit``: UDP answers larger than this are truncated (TC), whatever EDNS offers."""

    def __init__(self, directory: Path, udp_limit: int | None = None) -> None:
        self.records = directory / "records.json"
        self.log = directory / "dns-questions.jsonl"
        port_file = directory / "dns.port"
        self.set_records({})
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(FAKES / "dns_server.py"),
                "--port-file",
                str(port_file),
                "--records",
                str(self.records),
                "--log",
                str(self.log),
                *(["--udp-limit", str(udp_limit)] if udp_limit else []),
            ],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + HANG
        while not port_file.exists():
            assert self.proc.poll() is None, "the DNS server exited"
            assert time.monotonic() < deadline, "the DNS server did not start"
            time.sleep(0.02)
        self.port = int(port_file.read_text())

    @property
    def nameserver(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set_records(self, table: dict[str, object]) -> None:
        """Replace every record at once (the server reads the file for each question)."""
        tmp = self.records.with_suffix(".tmp")
        tmp.write_text(json.dumps(table))
        tmp.replace(self.records)

    def questions(self) -> list[dict[str, object]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def stop(self) -> None:
        stop(self.proc)


class RecordingPeer:
    def __init__(self, host: str, port: int, models: str, record: Path) -> None:
        self.host, self.port, self.record = host, port, record
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(FAKES / "recording_peer.py"),
                "--host",
                host,
                "--port",
                str(port),
                "--models",
                models,
                "--record",
                str(record),
            ],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + HANG
        while not _listening(host, port):
            assert self.proc.poll() is None, f"the peer on {host}:{port} exited"
            assert time.monotonic() < deadline, f"the peer on {host}:{port} did not listen"
            time.sleep(0.02)

    def requests(self, path: str = "/v1/chat/completions") -> list[dict[str, object]]:
        if not self.record.exists():
            return []
        rows = [json.loads(line) for line in self.record.read_text().splitlines()]
        return [row for row in rows if row["path"] == path]

    def stop(self) -> None:
        stop(self.proc)


def port_free_on(hosts: list[str]) -> int:
    """A TCP port free on every one of ``hosts`` now, below the ephemeral range (where a busy
    machine's outgoing connections would take it first; see tests/e2e/conftest.py)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(10000, max(10001, low - 1))
        if all(_bindable(host, port) for host in hosts):
            return port
    raise AssertionError(f"no port is free on all of {hosts}")


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(1)
        except OSError:
            return False
        return True


def _listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


def stop(proc: subprocess.Popen[bytes]) -> None:
    """End one process this module started, by its handle."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=HANG)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
