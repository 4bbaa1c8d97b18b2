"""Configs llama-swap accepts that modelswap used to refuse (issue 17): one fixture per cause in
tests/data/llamaswap/accepted/, each loaded in-process with what it means checked. The
gateway serving them is tests/e2e/test_llamaswap_compat.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from modelswap.cli import main
from modelswap.config import Config, load_config, load_config_text
from modelswap.config.security import open_switches, security_report
from modelswap.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
ACCEPTED = REPO / "tests" / "data" / "llamaswap" / "accepted"
ENV = {
    "FAKE_PYTHON": "/usr/bin/python3",
    "FAKE_BACKEND": "/srv/fake.py",
    "PEER_API_KEY": "peer-key",
    "FAKE_GLOBAL_TTL": "120",
}


def load(name: str) -> Config:
    return load_config(ACCEPTED / name, environ=ENV)


@pytest.mark.parametrize("path", sorted(ACCEPTED.glob("*.yaml")), ids=lambda p: p.name)
def test_every_fixture_loads(path: Path) -> None:
    load(path.name)


def test_peers_only_and_null_models() -> None:
    assert dict(load("peers-only.yaml").models) == {}
    assert set(load("peers-only.yaml").peers) == {"gpu-box"}
    assert dict(load("models-null.yaml").models) == {}


def test_a_key_that_only_holds_anchors_is_accepted() -> None:
    model = load("anchors-key.yaml").models["model1"]
    assert model.ttl == 300
    assert model.cmd[:2] == ("/usr/bin/python3", "/srv/fake.py")


def test_other_unknown_keys_are_still_errors_with_did_you_mean() -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text("modles:\n  m: {cmd: 'srv --port ${PORT}'}\n")
    assert ("modles", "unknown key (did you mean models?)") in info.value.problems
    # a value that holds an anchor among plain values is not "only anchors"
    text = "extra: {a: &a 1, b: 2}\nmodels:\n  m: {cmd: 'srv --port ${PORT}', ttl: *a}\n"
    with pytest.raises(ConfigError) as info:
        load_config_text(text)
    assert info.value.problems[0][0] == "extra"


def test_macros_in_number_fields_expand_before_types_are_checked() -> None:
    config = load("macro-numbers.yaml")
    model = config.models["model1"]
    assert config.start_port == 5800
    assert model.port == 5800
    assert model.ttl == 300
    assert model.timeouts.connect == 7
    other = load_config_text(
        "globalTTL: ${env.FAKE_GLOBAL_TTL}\nmodels:\n  m: {cmd: 'srv --port ${PORT}'}\n",
        environ=ENV,
    )
    assert other.models["m"].ttl == 120


def test_a_number_field_that_is_not_a_number_after_expansion_is_still_an_error() -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text("macros: {t: soon}\nglobalTTL: ${t}\nmodels:\n  m: {cmd: 'srv ${PORT}'}\n")
    assert info.value.problems == [("globalTTL", "expected a number, got a string")]


def test_port_in_set_params_by_id_names() -> None:
    model = load("port-in-set-params-by-id.yaml").models["model1"]
    name = f"model1-{model.port}"
    assert name in model.aliases
    assert dict(model.alias_filters[name].set_params) == {"temperature": 0.1}


def test_env_inside_a_longer_string_is_a_secret() -> None:
    config = load("env-inside-string.yaml")
    assert config.peers["box"].api_key == "Bearer-peer-key"
    assert "Bearer-peer-key" in config.secrets or "peer-key" in config.secrets


def test_a_remote_proxy_is_allowed_and_reported(caplog: pytest.LogCaptureFixture) -> None:
    config = load("remote-proxy.yaml")
    switches = open_switches(config)
    assert any("'bridged'" in s and "172.17.0.1" in s for s in switches), switches
    assert security_report(config)["open_switches"] == switches


def test_cmd_stop_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = load("cmd-stop-snake.yaml")
    assert config.models["model1"].cmd_stop is None
    assert "models.model1.cmd_stop is not implemented and is ignored" in caplog.text


def test_an_alias_equal_to_its_own_id_is_dropped() -> None:
    model = load("alias-is-own-id.yaml").models["model1"]
    assert model.aliases == ("gpt-4o-mini",)


def test_a_group_without_members_constrains_nothing() -> None:
    assert load("group-no-members.yaml").scheduling.groups == ()


def test_preload_naming_a_selector_preloads_its_first_target() -> None:
    config = load("preload-selector.yaml")
    assert config.scheduling.preload == ("model1",)
    assert set(config.selectors) == {"coding-model"}
    mapped = {m.source: m for m in config.compat}
    assert mapped["hooks.on_startup.preload[0]"].target == "models.model1"


def test_check_does_not_assume_the_default_listen_port(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(ACCEPTED / "backend-on-8080.yaml")
    assert main(["check", path]) == 0
    assert main(["check", "--listen", "127.0.0.1:9000", path]) == 0
    assert main(["check", "--listen", "127.0.0.1:8080", path]) == 2
    assert "own listen port" in capsys.readouterr().err


def test_selectors_are_read_and_checked() -> None:
    config = load_config_text(
        (REPO / "tests" / "data" / "llamaswap" / "selectors.yaml").read_text(), environ=ENV
    )
    spill = config.selectors["spill"]
    assert (spill.strategy, spill.targets, spill.reservations) == (
        "spillover",
        ("small", "box/remote-model"),
        2,
    )
    with pytest.raises(ConfigError) as info:
        load_config_text(
            "selectors:\n  small: {targets: [small]}\n  s: {targets: [ghost, box/x, s]}\n"
            "models:\n  small: {cmd: 'srv --port ${PORT}'}\n"
            "peers:\n  box: {proxy: 'http://127.0.0.1:9', models: [y]}\n"
        )
    assert info.value.problems == [
        ("selectors.small", "'small' is already a model, alias or peer"),
        ("selectors.small.targets[0]", "a selector cannot name itself"),
        ("selectors.s.targets[0]", "'ghost' is neither a model, an alias nor a peerID/model name"),
        ("selectors.s.targets[1]", "peer 'box' does not list 'x'"),
        ("selectors.s.targets[2]", "a selector cannot name itself"),
    ]


def test_a_selector_spelled_otherwise_warns_and_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING):
        config = load_config_text(
            "selectors:\n  s: {strategy: random, targets: [m]}\nmodels:\n  m: {cmd: 'x ${PORT}'}\n"
        )
    assert dict(config.selectors) == {}
    assert "llama-swap key selectors.s is not implemented" in caplog.text


def test_scope_hint_only_when_no_key_may_read_or_administer() -> None:
    from modelswap.config.security import scope_hint

    assert scope_hint(load("string-key.yaml")) is not None
    assert scope_hint(load("alias-is-own-id.yaml")) is None  # no keys at all
    keyed = load_config_text(
        "apiKeys: [{key: k-123456789, scopes: [inference, read]}]\n"
        "models:\n  m: {cmd: 'srv ${PORT}'}\n"
    )
    assert scope_hint(keyed) is None


def test_profiles_are_read_and_checked() -> None:
    config = load_config_text(
        (REPO / "tests" / "data" / "llamaswap" / "profiles.yaml").read_text(), environ=ENV
    )
    profiles = {name: dict(pins) for name, pins in config.scheduling.profiles.items()}
    assert profiles == {"pair": {"chat": "small", "code": "big"}, "solo": {"other": "other"}}
    assert dict(config.scheduling.profile_descriptions) == {"pair": "two at once"}
    assert config.scheduling.profile == "pair"
    with pytest.raises(ConfigError) as info:
        load_config_text(
            "profiles: {p: [m, ghost]}\nhooks: {on_startup: {profile: q}}\n"
            "models:\n  m: {cmd: 'srv ${PORT}'}\n"
        )
    assert info.value.problems == [
        ("profiles.p[1]", "'ghost' is not a model id, alias, selector or peer model"),
        ("hooks.onStartup.profile", "'q' is not a profile"),
    ]
