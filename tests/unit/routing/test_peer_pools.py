"""Peer pools in the directory: each address a DNS name resolves to is a member peer with its
own models and its own breaker; members come and go with the records; ``pool/model`` goes to
a member that serves it, in turns, skipping open breakers; this gateway never counts itself.

The resolver is a dict (what DNS would answer now) and the clock a number: no sockets, no
sleeps. Model lists are recorded as discovery records them (``record_models``)."""

from __future__ import annotations

from dataclasses import replace

import aiohttp
import pytest

from modelswap.config.resolved import DnsDiscovery, Peer
from modelswap.errors import AmbiguousModelError
from modelswap.routing.dns import DnsError
from modelswap.routing.peer_directory import PeerDirectory
from modelswap.routing.pools import choose_member, member_addresses, member_url

POOL = Peer(
    id="cluster",
    proxy="http://pool.test:8080",
    api_key="pool-key",
    discover=True,
    dns=DnsDiscovery("pool.test", 8080),
    breaker_failures=2,
    breaker_cooldown=30.0,
)


class FakeDns:
    """What the name resolves to now; an exception to raise instead."""

    def __init__(self) -> None:
        self.answer: tuple[str, ...] | Exception = ()

    async def __call__(self, dns: DnsDiscovery) -> tuple[str, ...]:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _no_session() -> aiohttp.ClientSession:
    raise AssertionError("these tests read no model list over HTTP")


@pytest.fixture
def dns() -> FakeDns:
    return FakeDns()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def directory(dns: FakeDns, clock: Clock) -> PeerDirectory:
    return PeerDirectory({"cluster": POOL}, _no_session, clock, own_port=9999, resolver=dns)


async def resolve(directory: PeerDirectory, dns: FakeDns, *addresses: str) -> None:
    dns.answer = addresses
    await directory.resolve_pool(directory.peers["cluster"])


def serve(directory: PeerDirectory, member: str, *models: str) -> None:
    directory.record_models(directory.members("cluster")[member], models)


async def test_each_address_is_a_member_with_the_pools_settings(
    directory: PeerDirectory, dns: FakeDns
) -> None:
    await resolve(directory, dns, "10.0.0.5", "fd00::7")
    members = directory.members("cluster")
    assert list(members) == ["cluster@10.0.0.5", "cluster@fd00::7"]
    v4, v6 = members.values()
    assert (v4.proxy, v6.proxy) == ("http://10.0.0.5:8080", "http://[fd00::7]:8080")
    assert (v4.api_key, v4.pool, v4.dns, v4.discover) == ("pool-key", "cluster", None, True)
    assert directory.breaker(v4.id) is not directory.breaker(v6.id)  # a breaker per address


async def test_members_come_and_go_with_the_records(directory: PeerDirectory, dns: FakeDns) -> None:
    await resolve(directory, dns, "10.0.0.5", "10.0.0.6")
    serve(directory, "cluster@10.0.0.5", "qwen")
    serve(directory, "cluster@10.0.0.6", "qwen", "llama")
    assert directory.models("cluster") == ("qwen", "llama")
    await resolve(directory, dns, "10.0.0.6", "10.0.0.7")  # .5 left, .7 joined
    assert list(directory.members("cluster")) == ["cluster@10.0.0.6", "cluster@10.0.0.7"]
    assert directory.models("cluster") == ("qwen", "llama")  # .7 has not said yet
    with pytest.raises(KeyError):
        directory.breaker("cluster@10.0.0.5")
    await resolve(directory, dns)  # no records (NXDOMAIN): no members
    assert directory.members("cluster") == {}
    assert directory.lookup("cluster/qwen") is None
    assert directory.routes() == []


async def test_a_failed_resolution_keeps_the_members_and_says_why(
    directory: PeerDirectory, dns: FakeDns
) -> None:
    await resolve(directory, dns, "10.0.0.5")
    dns.answer = DnsError("no answer for pool.test within 5 s")
    await directory.resolve_pool(directory.peers["cluster"])
    assert list(directory.members("cluster")) == ["cluster@10.0.0.5"]
    (pool_row, member_row) = directory.status()
    assert pool_row["dns_error"] == "no answer for pool.test within 5 s"
    assert member_row["pool"] == "cluster"
    await resolve(directory, dns, "10.0.0.5")
    assert "dns_error" not in directory.status()[0]


async def test_this_gateway_is_not_its_own_member(dns: FakeDns, clock: Clock) -> None:
    pool = replace(POOL, dns=DnsDiscovery("pool.test", 9999))  # the port this gateway serves
    directory = PeerDirectory({"cluster": pool}, _no_session, clock, own_port=9999, resolver=dns)
    await resolve(directory, dns, "127.0.0.1", "192.0.2.10")  # ours, and someone else's
    assert list(directory.members("cluster")) == ["cluster@192.0.2.10"]


def test_only_a_local_address_at_our_own_port_is_us() -> None:
    assert member_addresses(["127.0.0.1", "192.0.2.1"], 8080, 8080) == (
        ["192.0.2.1"],
        ["127.0.0.1"],
    )
    assert member_addresses(["127.0.0.1"], 8080, 9090) == (["127.0.0.1"], [])
    assert member_addresses(["127.0.0.1"], 8080, None) == (["127.0.0.1"], [])


async def test_pool_names_go_to_a_member_that_serves_the_model_in_turns(
    directory: PeerDirectory, dns: FakeDns
) -> None:
    await resolve(directory, dns, "10.0.0.5", "10.0.0.6", "10.0.0.7")
    serve(directory, "cluster@10.0.0.5", "qwen")
    serve(directory, "cluster@10.0.0.6", "qwen")
    serve(directory, "cluster@10.0.0.7", "llama")
    chosen = [directory.lookup("cluster/qwen") for _ in range(4)]
    assert [r.peer.id for r in chosen if r] == ["cluster@10.0.0.5", "cluster@10.0.0.6"] * 2
    assert {r.model for r in chosen if r} == {"qwen"}
    bare = directory.lookup("llama")  # one pool serves it: a bare name works too
    assert bare is not None
    assert (bare.peer.id, bare.label) == ("cluster@10.0.0.7", "cluster@10.0.0.7/llama")
    direct = directory.lookup("cluster@10.0.0.6/qwen")  # one member by its own id
    assert direct is not None
    assert direct.peer.id == "cluster@10.0.0.6"
    assert directory.lookup("cluster/nothing") is None
    # The catalog lists a pool's models once, by the pool's name.
    assert [r.label for r in directory.routes()] == ["cluster/qwen", "cluster/llama"]


async def test_an_open_breaker_sends_the_pools_requests_to_the_others(
    directory: PeerDirectory, dns: FakeDns, clock: Clock
) -> None:
    await resolve(directory, dns, "10.0.0.5", "10.0.0.6")
    serve(directory, "cluster@10.0.0.5", "qwen")
    serve(directory, "cluster@10.0.0.6", "qwen")
    broken = directory.breaker("cluster@10.0.0.5")
    broken.failure(clock.now)
    broken.failure(clock.now)  # breaker.failures: 2
    assert broken.state == "open"
    picks = {r.peer.id for r in (directory.lookup("cluster/qwen") for _ in range(4)) if r}
    assert picks == {"cluster@10.0.0.6"}
    directory.breaker("cluster@10.0.0.6").failure(clock.now)
    directory.breaker("cluster@10.0.0.6").failure(clock.now)
    route = directory.lookup("cluster/qwen")  # all open: one of them (it answers 503 at once)
    assert route is not None
    clock.now += 31  # past the cooldown, .6's probe succeeds: it takes the requests again
    directory.breaker("cluster@10.0.0.6").success()
    picks = {r.peer.id for r in (directory.lookup("cluster/qwen") for _ in range(3)) if r}
    assert picks == {"cluster@10.0.0.6"}


async def test_a_bare_name_two_owners_serve_is_ambiguous(dns: FakeDns, clock: Clock) -> None:
    box = Peer(id="box", proxy="http://10.0.0.2:8080", models=("qwen",))
    directory = PeerDirectory(
        {"cluster": POOL, "box": box}, _no_session, clock, own_port=9999, resolver=dns
    )
    await resolve(directory, dns, "10.0.0.5", "10.0.0.6")
    serve(directory, "cluster@10.0.0.5", "qwen")
    serve(directory, "cluster@10.0.0.6", "qwen")  # two members of one pool: one owner
    with pytest.raises(AmbiguousModelError) as info:
        directory.lookup("qwen")
    assert info.value.candidates == ["cluster/qwen", "box/qwen"]


async def test_a_reload_keeps_members_while_the_name_stays(
    directory: PeerDirectory, dns: FakeDns, clock: Clock
) -> None:
    await resolve(directory, dns, "10.0.0.5")
    serve(directory, "cluster@10.0.0.5", "qwen")
    breaker = directory.breaker("cluster@10.0.0.5")
    directory.reconfigure({"cluster": replace(POOL, api_key="new-key", breaker_failures=7)})
    member = directory.members("cluster")["cluster@10.0.0.5"]
    assert member.api_key == "new-key"  # the new settings …
    assert directory.breaker(member.id) is breaker  # … the same breaker and list
    assert breaker.threshold == 7
    assert directory.models("cluster") == ("qwen",)
    directory.reconfigure({"cluster": replace(POOL, dns=DnsDiscovery("other.test", 8080))})
    assert directory.members("cluster") == {}  # another name: resolved afresh
    directory.reconfigure({})
    assert directory.status() == []


def test_member_urls_bracket_ipv6() -> None:
    dns = DnsDiscovery("pool.test", 8443, scheme="https")
    assert member_url(dns, "10.1.2.3") == "https://10.1.2.3:8443"
    assert member_url(dns, "fd00::1") == "https://[fd00::1]:8443"


def test_no_candidates_no_member() -> None:
    assert choose_member([], 0.0, 0) is None
