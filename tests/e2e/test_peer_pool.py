"""A pool of peers found in DNS, through a real gateway: ``peers.cluster.discover: {dns,
port, nameserver}`` pointed at a DNS server the test runs on loopback, and recording peers on
127.0.0.2 and 127.0.0.3 that share one port — as the pods behind a Kubernetes headless Service.
Records added and removed: members appear and go in ``/api/peers``, their models in
``/v1/models`` (once, as ``cluster/<model>``), and requests follow them."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.e2e.conftest import Gateway, chat, fake_cmd
from tests.fakes.pool_fakes import DnsServer, RecordingPeer, port_free_on

pytestmark = pytest.mark.e2e

HOSTS = ["127.0.0.2", "127.0.0.3"]


@pytest.fixture
def dns_server(tmp_path: Path) -> Iterator[DnsServer]:
    server = DnsServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def members(tmp_path: Path) -> Iterator[dict[str, RecordingPeer]]:
    """Recording peers on 127.0.0.2 (serves qwen) and 127.0.0.3 (qwen and llama), one port."""
    port = port_free_on(HOSTS)
    started = {
        "127.0.0.2": RecordingPeer("127.0.0.2", port, "qwen", tmp_path / "peer-2.jsonl"),
        "127.0.0.3": RecordingPeer("127.0.0.3", port, "qwen,llama", tmp_path / "peer-3.jsonl"),
    }
    yield started
    for peer in started.values():
        peer.stop()


def pool_gateway(
    gateway: Callable[..., Gateway], dns_server: DnsServer, port: int, models: str = ""
) -> Gateway:
    return gateway(
        models or f"  local:\n    cmd: {fake_cmd()}\n",
        extra_top=(
            "peers:\n  cluster:\n"
            f"    discover: {{dns: pool.test, port: {port}, interval: 0.2, "
            f"nameserver: '{dns_server.nameserver}'}}\n"
            "    discoverInterval: 0.5\n"
        ),
    )


def peer_rows(gw: Gateway) -> dict[str, dict[str, object]]:
    return {str(row["id"]): row for row in gw.get_json("/api/peers")["peers"]}  # type: ignore[union-attr]


def model_ids(gw: Gateway) -> list[str]:
    return [str(row["id"]) for row in gw.get_json("/v1/models")["data"]]  # type: ignore[union-attr]


def answered_by(members: dict[str, RecordingPeer]) -> dict[str, list[str]]:
    return {
        host: [json.loads(str(r["body"]))["model"] for r in peer.requests()]
        for host, peer in members.items()
    }


def test_members_appear_and_go_with_the_records_and_requests_follow(
    gateway: Callable[..., Gateway],
    dns_server: DnsServer,
    members: dict[str, RecordingPeer],
) -> None:
    port = members["127.0.0.2"].port
    dns_server.set_records({"pool.test": ["127.0.0.2"]})
    gw = pool_gateway(gateway, dns_server, port)
    gw.wait_for(lambda: "cluster/qwen" in model_ids(gw))
    rows = peer_rows(gw)
    assert rows["cluster"]["members"] == ["cluster@127.0.0.2"]
    assert rows["cluster@127.0.0.2"]["proxy"] == f"http://127.0.0.2:{port}"
    assert rows["cluster@127.0.0.2"]["breaker"] == "closed"
    assert rows["cluster@127.0.0.2"]["pool"] == "cluster"
    first = chat(gw, "cluster/qwen")
    assert first.status == 200, first.body
    assert answered_by(members) == {"127.0.0.2": ["qwen"], "127.0.0.3": []}

    dns_server.set_records({"pool.test": ["127.0.0.2", "127.0.0.3"]})  # a pod joins
    gw.wait_for(lambda: "cluster/llama" in model_ids(gw))
    assert model_ids(gw).count("cluster/qwen") == 1  # a pool's model is listed once
    assert chat(gw, "llama").status == 200  # a bare name only the pool serves
    for _ in range(2):
        assert chat(gw, "cluster/qwen").status == 200  # in turns: one each
    assert answered_by(members) == {"127.0.0.2": ["qwen", "qwen"], "127.0.0.3": ["llama", "qwen"]}

    dns_server.set_records({"pool.test": ["127.0.0.3"]})  # a pod leaves
    gw.wait_for(lambda: "cluster@127.0.0.2" not in peer_rows(gw))
    for _ in range(2):
        assert chat(gw, "cluster/qwen").status == 200
    assert answered_by(members)["127.0.0.2"] == ["qwen", "qwen"]  # nothing more went there

    dns_server.set_records({})  # the name is gone: no member, no model
    gw.wait_for(lambda: not any(i.startswith("cluster/") for i in model_ids(gw)))
    assert peer_rows(gw)["cluster"]["members"] == []
    assert chat(gw, "cluster/qwen").status == 404
    assert "peer pool cluster: 0 members; left: cluster@127.0.0.3" in gw.log()


def test_a_local_model_that_fails_falls_back_to_the_pool(
    gateway: Callable[..., Gateway],
    dns_server: DnsServer,
    members: dict[str, RecordingPeer],
) -> None:
    port = members["127.0.0.2"].port
    dns_server.set_records({"pool.test": ["127.0.0.3"]})
    local = f"  qwen:\n    cmd: {fake_cmd('--fail-start')}\n    fallback: [cluster/qwen]\n"
    gw = pool_gateway(gateway, dns_server, port, local)
    gw.wait_for(lambda: "cluster/qwen" in model_ids(gw))
    reply = chat(gw, "qwen")  # the local qwen cannot start: another node's gateway answers
    assert reply.status == 200, reply.body
    assert json.loads(reply.body)["choices"][0]["message"]["content"] == "from-peer:qwen"
    assert answered_by(members)["127.0.0.3"] == ["qwen"]
