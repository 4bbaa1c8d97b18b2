"""Peers and fallbacks in the configuration: addresses, keys, listed vs discovered models, and
fallback targets checked against models, aliases and peers. Pure: no sockets."""

from __future__ import annotations

import textwrap

import pytest

from modelswap.config import Config, load_config_text
from modelswap.errors import ConfigError

MODELS = "models:\n  m:\n    cmd: srv --port ${PORT}\n    aliases: [m-alias]\n"


def load(text: str, environ: dict[str, str] | None = None) -> Config:
    return load_config_text(textwrap.dedent(text), environ=environ or {})


def problems(text: str, environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load(text, environ)
    return info.value.problems


def test_a_peer_with_listed_models_and_a_key_from_the_environment() -> None:
    config = load(
        MODELS
        + textwrap.dedent(
            """
        peers:
          box:
            proxy: http://10.0.0.2:8080/
            apiKeyEnv: BOX_KEY
            models: [qwen, llama]
            timeouts: {connect: 2, firstByte: 30}
            breaker: {failures: 5, cooldown: 10}
        """
        ),
        {"BOX_KEY": "s3cret-box"},
    )
    peer = config.peers["box"]
    assert peer.proxy == "http://10.0.0.2:8080"  # no trailing slash: paths are appended
    assert peer.api_key == "s3cret-box"
    assert "s3cret-box" in config.secrets
    assert "s3cret-box" not in repr(peer)
    assert peer.models == ("qwen", "llama")
    assert not peer.discover
    assert (peer.timeouts.connect, peer.timeouts.first_byte) == (2, 30)
    assert (peer.breaker_failures, peer.breaker_cooldown) == (5, 10)


@pytest.mark.parametrize(
    ("peer", "path", "words"),
    [
        ("{proxy: 'ftp://x', models: [a]}", "peers.box.proxy", "http(s) URL"),
        ("{proxy: 'http://x'}", "peers.box", "exactly one of models"),
        ("{proxy: 'http://x', models: [a], discover: true}", "peers.box", "exactly one of"),
        ("{proxy: 'http://x', models: [a], apiKeyEnv: NOPE}", "peers.box.apiKeyEnv", "not set"),
        ("{proxy: 'http://x', models: [a], apiKey: k, apiKeyEnv: K}", "peers.box", "not both"),
    ],
)
def test_bad_peers_are_reported_with_their_key_path(peer: str, path: str, words: str) -> None:
    found = problems(MODELS + f"peers:\n  box: {peer}\n")
    assert any(p == path and words in message for p, message in found), found


def test_a_peer_id_may_not_shadow_a_model_or_contain_a_slash() -> None:
    found = problems(MODELS + "peers:\n  m: {proxy: 'http://x', models: [a]}\n")
    assert found[0][0] == "peers.m"
    assert "also a model id" in found[0][1]
    found = problems(MODELS + "peers:\n  a/b: {proxy: 'http://x', models: [a]}\n")
    assert "contain '/'" in found[0][1]


def test_fallback_targets_must_exist() -> None:
    text = (
        "models:\n"
        "  a:\n    cmd: srv --port ${PORT}\n    fallback: [b-alias, box/x, y, far/anything]\n"
        "  b:\n    cmd: srv --port ${PORT}\n    aliases: [b-alias]\n"
        "peers:\n  box: {proxy: 'http://x', models: [x, y]}\n"
        "  far: {proxy: 'http://y', discover: true}\n"
    )
    assert load(text).models["a"].fallback == ("b-alias", "box/x", "y", "far/anything")
    bad = text.replace("fallback: [b-alias,", "fallback: [a, box/zzz, nowhere, b-alias,")
    found = problems(bad)
    assert found == [
        ("models.a.fallback[0]", "'a' is this model itself"),
        ("models.a.fallback[1]", "peer 'box' does not list 'zzz' (its models: x, y)"),
        ("models.a.fallback[2]", "'nowhere' is neither a model, an alias nor a peerID/model name"),
    ]
