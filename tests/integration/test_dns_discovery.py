"""DNS discovery against a DNS server the test runs on loopback (``tests/fakes/dns_server.py``):
the resolver's answers (A and AAAA, NXDOMAIN, SERVFAIL, a truncated UDP answer asked again over
TCP, a server that is not there), then a directory whose pool members — recording peers on
127.0.0.2 and 127.0.0.3, one port — appear and go as the records are added and removed."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import aiohttp
import pytest
from tests.fakes.pool_fakes import DnsServer, RecordingPeer, port_free_on

from modelswap.config.resolved import DnsDiscovery, Peer
from modelswap.routing.dns import DnsError, resolve_addresses
from modelswap.routing.peer_directory import PeerDirectory

pytestmark = pytest.mark.integration

HANG = 60.0


@pytest.fixture
def dns_server(tmp_path: Path) -> Iterator[DnsServer]:
    server = DnsServer(tmp_path)
    yield server
    server.stop()


def on(server: DnsServer, name: str, port: int = 8080) -> DnsDiscovery:
    host, _, ns_port = server.nameserver.partition(":")
    return DnsDiscovery(name, port, interval=0.1, nameserver=(host, int(ns_port)))


async def test_a_and_aaaa_records_are_the_addresses(dns_server: DnsServer) -> None:
    dns_server.set_records({"pool.test": ["127.0.0.3", "::1", "127.0.0.2"], "v6.test": ["::1"]})
    assert await resolve_addresses(on(dns_server, "pool.test")) == ("127.0.0.2", "127.0.0.3", "::1")
    assert await resolve_addresses(on(dns_server, "POOL.test.")) == (
        "127.0.0.2",
        "127.0.0.3",
        "::1",
    )
    assert await resolve_addresses(on(dns_server, "v6.test")) == ("::1",)  # no A: an empty A answer
    asked = {(q["name"], q["type"]) for q in dns_server.questions()}
    assert {("pool.test", 1), ("pool.test", 28)} <= asked


async def test_a_name_that_does_not_exist_has_no_addresses(dns_server: DnsServer) -> None:
    assert await resolve_addresses(on(dns_server, "gone.test")) == ()


async def test_a_failing_server_is_an_error(dns_server: DnsServer) -> None:
    dns_server.set_records({"broken.test": "SERVFAIL"})
    with pytest.raises(DnsError, match="SERVFAIL"):
        await resolve_addresses(on(dns_server, "broken.test"))


async def test_a_truncated_udp_answer_is_asked_again_over_tcp(tmp_path: Path) -> None:
    many = [f"127.0.1.{n}" for n in range(1, 61)]  # 60 records: ~1 KB, over a 512-byte limit
    server = DnsServer(tmp_path, udp_limit=512)
    try:
        server.set_records({"big.test": many})
        assert await resolve_addresses(on(server, "big.test")) == tuple(many)
        transports = [q["transport"] for q in server.questions() if q["type"] == 1]
        assert transports == ["udp", "tcp"]
    finally:
        server.stop()


async def test_a_nameserver_that_is_not_there_is_an_error_not_a_hang() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # released: nothing answers there (ICMP: unreachable)
    # Bounded by DNS_TIMEOUT: a refused datagram may arrive before the resolver listens for it,
    # so the resolver asks again until its lifetime ends, then it is an error, not a hang.
    with pytest.raises(DnsError, match=r"x\.test"):
        await resolve_addresses(DnsDiscovery("x.test", 80, nameserver=("127.0.0.1", port)))


async def test_the_system_resolver_reads_etc_hosts() -> None:
    assert "127.0.0.1" in await resolve_addresses(DnsDiscovery("localhost", 80))


# ---- a directory whose pool follows the records ----------------------------------------------


@pytest.fixture
def peers(tmp_path: Path) -> Iterator[Callable[[str, int, str], RecordingPeer]]:
    started: list[RecordingPeer] = []

    def start(host: str, port: int, models: str) -> RecordingPeer:
        peer = RecordingPeer(host, port, models, tmp_path / f"{host}.jsonl")
        started.append(peer)
        return peer

    yield start
    for peer in started:
        peer.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


async def test_members_appear_and_go_with_the_records(
    dns_server: DnsServer,
    peers: Callable[[str, int, str], RecordingPeer],
    session: aiohttp.ClientSession,
) -> None:
    port = port_free_on(["127.0.0.2", "127.0.0.3"])
    peers("127.0.0.2", port, "qwen")
    peers("127.0.0.3", port, "qwen,llama")
    pool = Peer(id="cluster", proxy="", discover=True, dns=on(dns_server, "pool.test", port))
    directory = PeerDirectory({"cluster": pool}, lambda: session, own_port=None)
    task = asyncio.create_task(directory.run())
    try:
        dns_server.set_records({"pool.test": ["127.0.0.2"]})
        await eventually(lambda: directory.models("cluster") == ("qwen",), "the first member")
        dns_server.set_records({"pool.test": ["127.0.0.2", "127.0.0.3"]})
        await eventually(lambda: directory.models("cluster") == ("qwen", "llama"), "the second")
        assert list(directory.members("cluster")) == [f"cluster@127.0.0.{n}" for n in (2, 3)]
        route = directory.lookup("cluster/llama")
        assert route is not None
        assert route.peer.proxy == f"http://127.0.0.3:{port}"
        dns_server.set_records({"pool.test": ["127.0.0.3"]})
        await eventually(
            lambda: list(directory.members("cluster")) == ["cluster@127.0.0.3"], ".2 gone"
        )
        dns_server.set_records({})  # the name is gone (NXDOMAIN): so are the members
        await eventually(lambda: directory.members("cluster") == {}, "every member gone")
        assert directory.models("cluster") == ()
        dns_server.set_records({"pool.test": "SERVFAIL", "x": []})
        await eventually(lambda: "dns_error" in directory.status()[0], "the failure reported")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
