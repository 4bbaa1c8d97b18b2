"""Per-key quota, priority class and weight (``apiKeys[].quota``, ``keyDefaults``;
docs/sharing.md): how they resolve, how defaults combine, and how a bad value is named."""

from __future__ import annotations

import textwrap

import pytest

from modelswap.config import Config, load_config_text
from modelswap.config.resolved import KeyDefaults, Quota
from modelswap.errors import ConfigError
from modelswap.routing.clients import ANONYMOUS_NAME, client_for

MODEL = "models:\n  m:\n    cmd: srv --port ${PORT}\n"


def load(top: str) -> Config:
    return load_config_text(textwrap.dedent(top) + "\n" + MODEL, environ={})


def problems(top: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load(top)
    return list(info.value.problems)


def test_a_key_without_quota_has_no_limit_interactive_class_and_weight_one() -> None:
    config = load("apiKeys: [sk-plain-string-key-0001]")
    (key,) = config.api_keys
    assert key.quota == Quota()
    assert not key.quota
    assert (key.priority, key.weight) == ("interactive", 1.0)
    assert config.key_defaults == KeyDefaults()


def test_each_quota_field_a_key_gives_overrides_the_default_field_by_field() -> None:
    config = load(
        """
        keyDefaults:
          quota: {concurrency: 4, requestsPerMinute: 60, tokensPerDay: 1000000}
          priority: batch
          weight: 2
        apiKeys:
          - key: sk-alice-key-0001
            name: alice
            quota: {requestsPerMinute: 0, tokensPerMinute: 900}
            priority: interactive
            weight: 3
          - {key: sk-harness-key-0002, name: harness}
          - sk-plain-string-key-0003
        """
    )
    alice, harness, plain = config.api_keys
    assert alice.quota == Quota(4, 0, 900, 1_000_000)  # 0 given: no limit, not the default
    assert (alice.priority, alice.weight) == ("interactive", 3.0)
    assert harness.quota == Quota(4, 60, 0, 1_000_000)
    assert (harness.priority, harness.weight) == ("batch", 2.0)
    assert plain.quota == harness.quota
    assert plain.priority == "batch"


def test_the_anonymous_client_gets_key_defaults_when_no_keys_are_configured() -> None:
    config = load("keyDefaults: {quota: {requestsPerMinute: 30}, priority: batch, weight: 0.5}")
    client = client_for(None, config.key_defaults)
    assert client.name == ANONYMOUS_NAME
    assert client.quota == Quota(requests_per_minute=30)
    assert (client.priority, client.rank, client.weight) == ("batch", 1, 0.5)


def test_a_keys_client_carries_its_name_never_its_secret() -> None:
    config = load("apiKeys: [{key: sk-secret-value-0001, name: bob, priority: batch}]")
    client = client_for(config.api_keys[0], config.key_defaults)
    assert (client.name, client.rank) == ("bob", 1)
    assert "sk-secret-value-0001" not in repr(client)


@pytest.mark.parametrize(
    ("top", "path", "says"),
    [
        ("apiKeys: [{key: sk-k-0001, weight: 0}]", "apiKeys[0].weight", "greater than 0"),
        ("apiKeys: [{key: sk-k-0001, priority: urgent}]", "apiKeys[0].priority", "batch"),
        (
            "apiKeys: [{key: sk-k-0001, quota: {requestsPerMinute: -1}}]",
            "apiKeys[0].quota.requestsPerMinute",
            "greater than or equal to 0",
        ),
        ("apiKeys: [{key: sk-k-0001, quota: {rpm: 5}}]", "apiKeys[0].quota.rpm", "unknown key"),
        ("keyDefaults: {quota: {tokensPerDay: lots}}", "keyDefaults.quota.tokensPerDay", "integer"),
        ("keyDefaults: {weight: -2}", "keyDefaults.weight", "greater than 0"),
    ],
)
def test_a_bad_quota_value_is_one_problem_naming_its_key_path(
    top: str, path: str, says: str
) -> None:
    found = problems(top)
    assert len(found) == 1, found
    assert found[0][0] == path
    assert says in found[0][1]
