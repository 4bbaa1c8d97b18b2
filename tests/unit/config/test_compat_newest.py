"""llama-swap's newest keys (issue 29), loaded in-process: every config of
tests/data/llamaswap/newest/ (one per page of llama-swap's knowledge base) passes
``modelswap check``, and each key is read as its page says. The gateway serving them is
tests/e2e/test_llamaswap_newest.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from modelswap.cli import main
from modelswap.config import Config, load_config, load_config_text
from modelswap.config.security import open_switches, security_report
from modelswap.errors import ConfigError
from modelswap.upstream_sessions import make_session

REPO = Path(__file__).resolve().parents[3]
NEWEST = REPO / "tests" / "data" / "llamaswap" / "newest"
ENV = {
    "FAKE_PYTHON": "/usr/bin/python3",
    "FAKE_BACKEND": "/srv/fake.py",
    "PEER_URL": "http://127.0.0.1:9",
}


def load(text: str) -> Config:
    return load_config_text(textwrap.dedent(text), environ=ENV)


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return info.value.problems


@pytest.mark.parametrize("path", sorted(NEWEST.glob("*.yaml")), ids=lambda p: p.name)
def test_every_page_config_passes_check(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    assert main(["check", str(path)]) == 0, capsys.readouterr()
    load_config(path, environ=ENV)


# ---- soft defaults (api-integration/soft-defaults.md) ---------------------------------------


def test_soft_keys_become_default_params_and_hard_spellings_win() -> None:
    config = load(
        """\
        models:
          m:
            cmd: srv --port ${PORT}
            filters:
              setParams: {seed: 1, "temperature?": 0.7, max_tokens: 9, "max_tokens?": 5}
        """
    )
    filters = config.models["m"].filters
    assert dict(filters.set_params) == {"seed": 1, "max_tokens": 9}
    assert dict(filters.default_params) == {"temperature": 0.7}
    assert not [m for m in config.compat if m.warning]


def test_a_dotted_param_key_is_sent_as_written_and_said_to_differ() -> None:
    """llama-swap reads `a.b` as a path into nested objects; modelswap sends one key named
    `a.b` — never silently: the load warns, hard and soft spellings alike."""
    config = load(
        """\
        models:
          m:
            cmd: srv --port ${PORT}
            filters:
              setParams: {"chat_template_kwargs.enable_thinking": false, "a.b?": 1, seed: 2}
        """
    )
    filters = config.models["m"].filters
    assert dict(filters.set_params) == {"chat_template_kwargs.enable_thinking": False, "seed": 2}
    assert dict(filters.default_params) == {"a.b": 1}
    warned = {m.source: m.note for m in config.compat if m.warning}
    assert set(warned) == {
        'models.m.filters.setParams["chat_template_kwargs.enable_thinking"]',
        'models.m.filters.setParams["a.b?"]',
    }
    assert all("nested object" in note for note in warned.values())


def test_soft_keys_by_name_are_that_names_defaults() -> None:
    config = load(
        """\
        models:
          m:
            cmd: srv --port ${PORT}
            filters:
              setParamsByID:
                "${MODEL_ID}:x": {temperature: 0.2, "max_tokens?": 32768}
        """
    )
    layer = config.models["m"].alias_filters["m:x"]
    assert dict(layer.set_params) == {"temperature": 0.2}
    assert dict(layer.default_params) == {"max_tokens": 32768}


def test_soft_keys_on_a_peer() -> None:
    config = load(
        """\
        peers:
          p: {proxy: "http://127.0.0.1:9", models: [far], filters: {setParams: {"n?": 2}}}
        """
    )
    assert dict(config.peers["p"].filters.default_params) == {"n": 2}
    assert dict(config.peers["p"].filters.set_params) == {}


def test_model_is_protected_with_or_without_the_question_mark() -> None:
    found = problems(
        """\
        models:
          m:
            cmd: srv --port ${PORT}
            filters: {setParams: {"model?": other}}
        """
    )
    assert ("models.m.filters.setParams.model?", "`model` cannot be filtered") in found


def test_a_soft_key_and_default_params_for_the_same_name_is_refused() -> None:
    found = problems(
        """\
        models:
          m:
            cmd: srv --port ${PORT}
            filters: {setParams: {"n?": 1}, defaultParams: {n: 2}}
        """
    )
    assert any("defaultParams sets 'n' too" in message for _, message in found), found


# ---- globalConcurrencyLimit (routing/capacity-and-queues.md) --------------------------------


def test_global_concurrency_limit_is_read_and_explained() -> None:
    config = load("globalConcurrencyLimit: 8\nmodels:\n  m: {cmd: 'srv --port ${PORT}'}\n")
    assert config.scheduling.global_concurrency_limit == 8
    assert ("globalConcurrencyLimit", "same") in [(m.source, m.kind) for m in config.compat]
    default = load("models:\n  m: {cmd: 'srv --port ${PORT}'}\n")
    assert default.scheduling.global_concurrency_limit == 0
    found = problems("globalConcurrencyLimit: -1\nmodels:\n  m: {cmd: 'srv --port ${PORT}'}\n")
    assert found[0][0] == "globalConcurrencyLimit"


# ---- security.cors (api-integration/cors.md) ------------------------------------------------

MODEL = "models:\n  m: {cmd: 'srv --port ${PORT}'}\n"


def test_cors_block_resolves_with_llama_swaps_defaults() -> None:
    config = load(
        "security:\n  cors:\n    allowedOrigins: [https://Dash.example.com]\n"
        "    exposedHeaders: [X-Request-Id]\n" + MODEL
    )
    cors = config.security.cors
    assert cors is not None
    assert cors.origins == frozenset({"https://dash.example.com"})
    assert (cors.any_origin, cors.allow_credentials, cors.max_age) == (False, False, 86400)
    assert cors.allowed_methods == ("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
    assert (cors.allowed_headers, cors.exposed_headers) == ((), ("X-Request-Id",))
    assert config.security.cors_origins == ()
    assert load(MODEL).security.cors is None  # modelswap's default: no CORS at all


@pytest.mark.parametrize(
    ("block", "path", "words"),
    [
        ("{allowedOrigins: ['https://a.example/']}", "allowedOrigins[0]", "path"),
        ("{allowedOrigins: ['a.example']}", "allowedOrigins[0]", "scheme://host"),
        ("{allowedOrigins: ['https://u@a.example']}", "allowedOrigins[0]", "user"),
        ("{allowedOrigins: [' https://a.example']}", "allowedOrigins[0]", "spaces"),
        ("{allowedOrigins: ['https://a.example?x=1']}", "allowedOrigins[0]", "query"),
        ("{allowedOrigins: ['*'], allowCredentials: true}", "allowCredentials", "'*'"),
        ("{allowedOrigins: ['*'], allowPrivateNetwork: true}", "allowPrivateNetwork", "'*'"),
        ("{allowedOrigins: ['*']}", "allowedOrigins", "apiKeys"),
        ("{allowCredentials: true}", "allowedOrigins", "required"),
        ("{allowedOrigins: []}", "allowedOrigins", "required"),
        (
            "{allowedOrigins: ['https://a.example'], allowedMethods: ['GET POST']}",
            "allowedMethods[0]",
            "method",
        ),
        (
            "{allowedOrigins: ['https://a.example'], allowedHeaders: ['a b']}",
            "allowedHeaders[0]",
            "header",
        ),
        ("{allowedOrigins: ['https://a.example'], maxAge: -1}", "maxAge", ""),
    ],
)
def test_cors_configs_that_cannot_work_are_refused(block: str, path: str, words: str) -> None:
    found = problems(f"security:\n  cors: {block}\n" + MODEL)
    assert any(p == f"security.cors.{path}" and words in m for p, m in found), found


def test_cors_star_with_keys_is_an_open_switch_and_cors_origins_is_one_or_the_other() -> None:
    config = load("apiKeys: [k-0001]\nsecurity:\n  cors: {allowedOrigins: ['*']}\n" + MODEL)
    assert config.security.cors is not None
    assert config.security.cors.any_origin
    assert any(s.startswith("security.cors.allowedOrigins") for s in open_switches(config))
    assert security_report(config)["cors_origins"] == ["*"]
    both = "security:\n  corsOrigins: ['https://a.example']\n  cors: {allowedOrigins: ['https://a.example']}\n"
    assert ("security.cors", "security.corsOrigins is set too: keep one") in problems(both + MODEL)


# ---- disableKeepAlives and timeouts (connectivity/proxy-timeouts.md) ------------------------


def test_disable_keep_alives_and_every_timeout_key_map_onto_the_relay() -> None:
    config = load(
        """\
        models:
          m:
            cmd: srv --port ${PORT}
            disableKeepAlives: true
            timeouts: {connect: 0, keepalive: 15, responseHeader: 0, tlsHandshake: 5,
                       expectContinue: 1, idleConn: 60}
        """
    )
    t = config.models["m"].timeouts
    assert (t.connect, t.first_byte) == (0, 0)  # 0: no limit
    assert (t.keepalive, t.tls_handshake, t.idle_conn) == (15, 5, 60)
    assert t.disable_keep_alives is True
    assert t.pooled == (15, 60, True)  # its own session: force_close
    warned = {m.source: m.note for m in config.compat if m.warning}
    assert list(warned) == ["models.m.timeouts.expectContinue"]  # no 100 Continue to wait for
    assert load("models:\n  m: {cmd: 'srv --port ${PORT}'}\n").models["m"].timeouts.pooled is None


async def test_a_session_without_reuse_closes_every_connection() -> None:
    session = make_session(None, 60.0, True)
    try:
        assert session.connector is not None
        assert session.connector.force_close
    finally:
        await session.close()


# ---- the August corpus's last refusals ------------------------------------------------------


def test_unload_timeout_zero_is_the_top_levels_then_the_default() -> None:
    config = load(
        """\
        unloadTimeout: 0
        models:
          a: {cmd: 'srv --port ${PORT}', unloadTimeout: 0}
          b: {cmd: 'srv --port ${PORT}', unloadTimeout: 3}
        """
    )
    default = load("models:\n  m: {cmd: 'srv --port ${PORT}'}\n").models["m"].stop_grace
    assert config.models["a"].stop_grace == default
    assert config.models["b"].stop_grace == 3
    two = load("unloadTimeout: 2\nmodels:\n  a: {cmd: 'srv --port ${PORT}', unloadTimeout: 0}\n")
    assert two.models["a"].stop_grace == 2
    assert not [m for m in two.compat if m.warning]


def test_performance_enable_is_read_as_disabled() -> None:
    off = load("performance: {enable: false, maxAge: 1h, gc: 5m}\n" + MODEL)
    assert off.observability.performance is False
    assert sorted(m.source for m in off.compat if m.warning) == [
        "performance.gc",
        "performance.maxAge",
    ]
    assert load("performance: {enable: true}\n" + MODEL).observability.performance is True
    found = problems("performance: {enable: true, disabled: true}\n" + MODEL)
    assert ("performance.enable", "performance.disabled is set too: keep one") in found


def test_profile_pins_may_name_selectors_and_peer_models() -> None:
    config = load(
        """\
        selectors:
          fast: {targets: [m]}
        peers:
          remote: {proxy: "http://127.0.0.1:9", models: [far]}
          found: {proxy: "http://127.0.0.1:8", discover: true}
        profiles:
          day: {pins: {chat: fast, big: remote/far, bare: far, any: found/whatever, own: m}}
        models:
          m: {cmd: 'srv --port ${PORT}'}
        """
    )
    assert dict(config.scheduling.profiles["day"]) == {
        "chat": "fast",
        "big": "remote/far",
        "bare": "far",
        "any": "found/whatever",
        "own": "m",
    }
    found = problems("profiles:\n  day: {pins: {x: nowhere}}\n" + MODEL)
    assert found == [
        ("profiles.day.pins.x", "'nowhere' is not a model id, alias, selector or peer model")
    ]


def test_an_empty_profile_pin_is_read_as_not_served() -> None:
    # llama-swap's loader accepts `pin: ""` and serves nothing under it (issue 38): the same as
    # null, never "'' is not a model id".
    config = load(
        """\
        profiles:
          day: {pins: {chat: "", own: m, gone: null}}
        hooks:
          on_startup: {profile: day}
        models:
          m: {cmd: 'srv --port ${PORT}'}
        """
    )
    assert dict(config.scheduling.profiles["day"]) == {"chat": None, "own": "m", "gone": None}
    assert config.scheduling.profile == "day"


# ---- selectors as llama-swap's newest schema writes them ------------------------------------


def test_selector_settings_spillover_is_reservations_and_metadata_warns() -> None:
    config = load(
        """\
        selectors:
          fast:
            strategy: spillover
            targets: [m]
            settings: {spillover: 3}
            metadata: {x: 1}
        models:
          m: {cmd: 'srv --port ${PORT}'}
        """
    )
    assert config.selectors["fast"].reservations == 3
    assert [m.source for m in config.compat if m.warning] == ["selectors.fast.metadata"]


def test_log_to_stdout_lists_are_read_and_http_warns() -> None:
    assert load("logToStdout: 'proxy, upstream'\n" + MODEL).log_to_stdout == "both"
    config = load("logToStdout: 'upstream,http'\n" + MODEL)
    assert config.log_to_stdout == "upstream"
    assert [m.source for m in config.compat if m.warning] == ["logToStdout.http"]
    assert load("logToStdout: http\n" + MODEL).log_to_stdout == "none"
    assert problems("logToStdout: 'proxy,files'\n" + MODEL)[0][0] == "logToStdout"


# ---- ui.activity.session_id -----------------------------------------------------------------


def test_session_headers_default_to_llama_swaps_and_ui_names_them() -> None:
    assert load(MODEL).observability.session_headers == ("X-Session-ID", "X-Litellm-Session-Id")
    config = load("ui: {activity: {session_id: [X-Conversation]}, theme: dark}\n" + MODEL)
    assert config.observability.session_headers == ("X-Conversation",)
    assert [m.source for m in config.compat if m.warning] == ["ui.theme"]
    found = problems(
        "ui: {activity: {session_id: [X-A]}}\nactivity: {sessionHeaders: [X-B]}\n" + MODEL
    )
    assert found == [("ui.activity.session_id", "activity.sessionHeaders is set too")]
