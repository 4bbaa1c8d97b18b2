"""Peer pools found in DNS (``peers.<id>.discover: {dns, port, …}``) in the configuration:
what they resolve to, and every mistake reported with its key path. Pure: no sockets."""

from __future__ import annotations

import textwrap

import pytest

from modelswap.config import load_config_text
from modelswap.config.export import export_config
from modelswap.config.peer_dns import parse_nameserver
from modelswap.config.resolved import DnsDiscovery
from modelswap.config.schema import config_json_schema
from modelswap.errors import ConfigError
from modelswap.redact import Redactor

MODELS = "models:\n  m:\n    cmd: srv --port ${PORT}\n    fallback: [cluster/qwen]\n"


def problems(peers_yaml: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_config_text(MODELS + textwrap.dedent(peers_yaml), environ={})
    return info.value.problems


def test_a_pool_resolves_to_its_dns_discovery_and_a_proxy_that_describes_it() -> None:
    config = load_config_text(
        MODELS
        + textwrap.dedent(
            """
            peers:
              cluster:
                discover: {dns: modelswap-headless.ai.svc.cluster.local., port: 8080}
                apiKeyEnv: CLUSTER_KEY
                breaker: {failures: 2, cooldown: 5}
            """
        ),
        environ={"CLUSTER_KEY": "cluster-secret-key"},
    )
    pool = config.peers["cluster"]
    assert pool.dns == DnsDiscovery("modelswap-headless.ai.svc.cluster.local", 8080)
    assert pool.dns.interval == 10.0
    assert pool.dns.nameserver is None
    assert pool.proxy == "http://modelswap-headless.ai.svc.cluster.local:8080"
    assert pool.discover  # its members' models are discovered: cluster/qwen is accepted
    assert pool.api_key == "cluster-secret-key"
    assert config.models["m"].fallback == ("cluster/qwen",)


def test_discover_true_still_means_read_the_peers_model_list() -> None:
    config = load_config_text(
        MODELS + "peers:\n  cluster: {proxy: 'http://10.0.0.2:8080', discover: true}\n",
        environ={},
    )
    assert config.peers["cluster"].discover
    assert config.peers["cluster"].dns is None


def test_every_setting_of_a_pool() -> None:
    config = load_config_text(
        MODELS + "peers:\n  cluster:\n    discover: {dns: pool.test, port: 9000, interval: 2.5, "
        "scheme: https, nameserver: '[::1]:5353'}\n",
        environ={},
    )
    dns = config.peers["cluster"].dns
    assert dns == DnsDiscovery("pool.test", 9000, 2.5, "https", ("::1", 5353))
    exported = export_config(config, Redactor(config.secrets))["peers"]["cluster"]
    assert exported["discover"] == {
        "dns": "pool.test",
        "port": 9000,
        "interval": 2.5,
        "scheme": "https",
        "nameserver": "[::1]:5353",
    }


@pytest.mark.parametrize(
    ("discover", "path", "words"),
    [
        ("{dns: 'http://pool.test', port: 80}", "peers.cluster.discover.dns", "is a URL"),
        ("{dns: 'pool.test:8080', port: 80}", "peers.cluster.discover.dns", "discover.port"),
        ("{dns: 'bad..name', port: 80}", "peers.cluster.discover.dns", "not a DNS name"),
        ("{dns: '-x.test', port: 80}", "peers.cluster.discover.dns", "not a valid label"),
        ("{dns: '', port: 80}", "peers.cluster.discover.dns", "empty"),
        ("{dns: pool.test}", "peers.cluster.discover.port", "required key is missing"),
        ("{dns: pool.test, port: 0}", "peers.cluster.discover.port", "greater than or equal"),
        ("{dns: pool.test, port: 70000}", "peers.cluster.discover.port", "less than"),
        ("{dns: pool.test, port: 80, interval: 0}", "peers.cluster.discover.interval", "greater"),
        ("{dns: pool.test, port: 80, scheme: ftp}", "peers.cluster.discover.scheme", "'http'"),
        (
            "{dns: pool.test, port: 80, nameserver: dns.local}",
            "peers.cluster.discover.nameserver",
            "not an IP",
        ),
        ("{dns: pool.test, port: 80, ttl: 5}", "peers.cluster.discover.ttl", "unknown key"),
        ("{dns: 5, port: 80}", "peers.cluster.discover.dns", "expected a string"),
        ("'sure'", "peers.cluster.discover", "true or false"),
    ],
)
def test_bad_pools_are_reported_with_their_key_path(discover: str, path: str, words: str) -> None:
    found = problems(f"peers:\n  cluster:\n    discover: {discover}\n")
    assert any(p == path and words in message for p, message in found), found


def test_a_pool_has_no_proxy_no_list_and_no_peer_named_like_its_members() -> None:
    found = problems(
        """
        peers:
          cluster:
            proxy: http://10.0.0.2:8080
            models: [qwen]
            discover: {dns: pool.test, port: 8080}
          cluster@10.0.0.9: {proxy: 'http://10.0.0.9:8080', models: [x]}
        """
    )
    paths = {p: message for p, message in found}
    assert "not used with discover.dns" in paths["peers.cluster.proxy"]
    assert "exactly one of models" in paths["peers.cluster"]
    assert "members of the pool 'cluster'" in paths['peers["cluster@10.0.0.9"]']


def test_a_plain_peer_still_needs_its_proxy() -> None:
    found = problems("peers:\n  box: {models: [qwen]}\n")
    assert ("peers.box.proxy", "required key is missing") in found


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("10.96.0.10", ("10.96.0.10", 53)),
        ("127.0.0.1:5353", ("127.0.0.1", 5353)),
        ("fd00::a", ("fd00::a", 53)),
        ("[fd00::a]:5353", ("fd00::a", 5353)),
        ("[::1]", ("::1", 53)),
        ("dns.local", None),
        ("127.0.0.1:0", None),
        ("127.0.0.1:x", None),
        ("[::1]5353", None),
    ],
)
def test_nameservers_are_ip_addresses_with_an_optional_port(
    text: str, parsed: tuple[str, int] | None
) -> None:
    assert parse_nameserver(text) == parsed


def test_the_json_schema_describes_both_forms_of_discover() -> None:
    schema = config_json_schema()
    peer = schema["$defs"]["RawPeer"]["properties"]
    kinds = {option.get("type") or option.get("$ref") for option in peer["discover"]["anyOf"]}
    assert kinds == {"boolean", "#/$defs/RawDnsDiscovery"}
    dns = schema["$defs"]["RawDnsDiscovery"]
    assert dns["required"] == ["dns", "port"]
    assert set(dns["properties"]) == {"dns", "port", "interval", "scheme", "nameserver"}
