"""llama-swap compatibility (issue 9): llama-swap's spellings are read into modelswap's, its keys
modelswap does not implement warn exactly once, and unknown keys are still errors. No sockets,
no processes: every fixture in tests/data/llamaswap/ and every YAML example of docs/llamaswap.md
("Coming from llama-swap") is loaded here."""

from __future__ import annotations

import logging
import re
import textwrap
from pathlib import Path

import pytest

from modelswap.cli import main
from modelswap.config import Config, load_config, load_config_text
from modelswap.config.compat import explain, translate, warning_text
from modelswap.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "data" / "llamaswap"
ENV = {
    "FAKE_PYTHON": "/usr/bin/python3",
    "FAKE_BACKEND": "/srv/fake.py",
    "API_KEY_1": "sk-from-env",
    "PEER_API_KEY": "peer-key",
    "LLAMA_SWAP_KEY": "sk-readme",
    "GPU_BOX_KEY": "gpu-box-key",
    "HOME_DIR": "/home/me",
}
SERVER = "cmd: srv --port ${PORT}"
SERVER_FLOW = "{cmd: 'srv --port ${PORT}'}"


def load(text: str, environ: dict[str, str] | None = None) -> Config:
    return load_config_text(textwrap.dedent(text), environ=ENV if environ is None else environ)


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return info.value.problems


def model(body: str, *, top: str = "") -> Config:
    """A config with one model ``m`` whose keys are ``body`` (plus top-level ``top``)."""
    inner = textwrap.indent(textwrap.dedent(body), "    ")
    return load(f"{textwrap.dedent(top)}models:\n  m:\n{inner}")


def model_problems(body: str) -> list[tuple[str, str]]:
    inner = textwrap.indent(textwrap.dedent(body), "    ")
    return problems(f"models:\n  m:\n{inner}")


def mapped(config: Config) -> dict[str, tuple[str | None, str]]:
    """source key path -> (target key path, kind)."""
    return {m.source: (m.target, m.kind) for m in config.compat}


def warned(config: Config) -> list[str]:
    return [m.source for m in config.compat if m.warning]


# --- fixtures and the llama-swap page's examples load ---------------------------------------


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_fixture_loads_and_maps(path: Path) -> None:
    config = load_config(path, environ=ENV)
    assert config.models
    assert config.compat  # each fixture uses llama-swap keys
    assert all(m.kind in ("same", "rewritten", "ignored", "differs") for m in config.compat)


LLAMASWAP_PAGE = REPO / "docs" / "llamaswap.md"  # "Coming from llama-swap"


def readme_examples() -> list[str]:
    """The YAML examples of docs/llamaswap.md (the README's "Coming from llama-swap" once)."""
    return re.findall(r"```yaml\n(.*?)```", LLAMASWAP_PAGE.read_text(), re.S)


def test_readme_examples_load_as_documented() -> None:
    examples = readme_examples()
    assert len(examples) == 3
    first = load(examples[0])
    assert warned(first) == ["logRequests"]
    assert first.models["qwen3-30b"].send_loading_state is True
    assert first.models["nomic-embed"].send_loading_state is False
    qwen = first.models["qwen3-30b"]
    assert qwen.cmd[-2:] == ("--ctx-size", "16384")
    assert qwen.filters.strip_params == ("temperature", "top_p", "top_k")
    assert qwen.alias_filters["qwen3-30b:nothink"].set_params == {
        "chat_template_kwargs": {"enable_thinking": False}
    }
    assert qwen.ttl == 600
    assert qwen.name == "Qwen3 30B A3B (16384 tokens)"
    assert first.scheduling.preload == ("nomic-embed",)
    assert first.api_keys[0].secret == "sk-readme"
    second = load(examples[1])
    assert warned(second) == []
    assert second.models["coder"].timeouts.keepalive == 30  # TCP keep-alive probes
    assert second.models["coder"].priority == 10
    assert second.peers["gpu-box"].api_key == "gpu-box-key"
    assert [g.name for g in second.scheduling.groups] == ["coding"]
    spl = load(examples[2])  # the Swap Policy Language
    assert warned(spl) == []
    assert spl.policies is not None
    assert list(spl.policies.library) == ["authenticated"]
    assert spl.policies.on_request is not None
    assert list(spl.policies.models) == ["qwen-coder"]


def test_readme_spl_errors_are_the_real_ones() -> None:
    text = LLAMASWAP_PAGE.read_text()
    shown = text.split("modelswap: invalid configuration in config.yaml:\n", 1)[1]
    shown_lines = [line.strip() for line in shown.split("```", 1)[0].strip().splitlines()]
    broken = (
        readme_examples()[2]
        .replace("default max_tokens to 4096", "default max_tokens 4096")
        .replace("apply authenticated", "apply authenticatd")
    )
    with pytest.raises(ConfigError) as info:
        load(broken)
    assert [f"{path}: {message}" for path, message in info.value.problems] == shown_lines


def test_readme_explain_excerpt_is_the_real_output() -> None:
    section = LLAMASWAP_PAGE.read_text()
    excerpt = section.split("`modelswap check --explain` on it ends with:\n\n```\n", 1)[1]
    excerpt = excerpt.split("```", 1)[0].rstrip("\n")
    assert explain(load(readme_examples()[0]).compat).endswith(excerpt)


# --- shared keys ----------------------------------------------------------------------------


def test_shared_keys_are_read_as_the_same_keys() -> None:
    config = load(
        """\
        healthCheckTimeout: 90
        logLevel: warn
        startPort: 7000
        globalTTL: 30
        models:
          m:
            cmd: srv --port ${PORT}
            cmdStop: kill ${PID}
            aliases: [a]
            env: ["X=1"]
            checkEndpoint: /ready
            unlisted: true
            useModelName: upstream
            concurrencyLimit: 2
        """
    )
    m = config.models["m"]
    assert (config.start_timeout, config.log_level, config.start_port) == (90, "warn", 7000)
    assert (m.ttl, m.aliases, dict(m.env), m.check_endpoint) == (30, ("a",), {"X": "1"}, "/ready")
    assert (m.unlisted, m.upstream_name, m.concurrency_limit) == (True, "upstream", 2)
    kinds = mapped(config)
    assert kinds["healthCheckTimeout"] == ("healthCheckTimeout", "same")
    assert kinds["models.*.concurrencyLimit"] == ("models.*.concurrencyLimit", "same")
    assert warned(config) == []


def test_macros_may_be_booleans_and_use_other_macros() -> None:
    config = model(
        "cmd: srv --port ${PORT} ${args}",
        top="""\
        macros:
          ctx: 4096
          flag: true
          args: "--ctx ${ctx} --flag ${flag} --quiet ${quiet}"
          quiet: false
        """,
    )
    assert config.models["m"].cmd[-6:] == ("--ctx", "4096", "--flag", "true", "--quiet", "false")


def test_metadata_expands_macros_and_keeps_their_types() -> None:
    config = model(
        """\
        cmd: srv --port ${PORT}
        macros: {temp: 0.7, enabled: true, label: "x"}
        metadata:
          port: ${PORT}
          temp: ${temp}
          enabled: ${enabled}
          label: ${label}
          id: ${MODEL_ID}
          text: "${MODEL_ID} on ${PORT} at ${temp}"
          nested: [{a: "${temp}"}, 3, null, "$${literal}"]
          home: ${env.HOME_DIR}
        """,
        top="startPort: 6000\n",
    )
    assert dict(config.models["m"].metadata) == {
        "port": 6000,
        "temp": 0.7,
        "enabled": True,
        "label": "x",
        "id": "m",
        "text": "m on 6000 at 0.7",
        "nested": [{"a": 0.7}, 3, None, "${literal}"],
        "home": "/home/me",
    }


def test_metadata_with_an_unknown_macro_names_its_path() -> None:
    found = model_problems(f"{SERVER}\nmetadata: {{a: [1, '${{nope}}']}}")
    assert found == [("models.m.metadata.a[1]", "${nope} is not a known macro")]


def test_string_api_keys_read_the_environment() -> None:
    config = load(f"apiKeys: ['${{env.API_KEY_1}}', plain]\nmodels:\n  m: {SERVER_FLOW}\n")
    assert [k.secret for k in config.api_keys] == ["sk-from-env", "plain"]
    assert "sk-from-env" in config.secrets
    found = problems(f"apiKeys: ['${{env.MISSING}}']\nmodels:\n  m: {SERVER_FLOW}\n")
    assert ("apiKeys[0]", "${env.MISSING}: environment variable MISSING is not set") in found


# --- rewritten keys -------------------------------------------------------------------------


def test_ttl_minus_one_means_global_ttl() -> None:
    config = model(f"{SERVER}\nttl: -1", top="globalTTL: 42\n")
    assert config.models["m"].ttl == 42
    assert mapped(config)["models.m.ttl"] == ("globalTTL", "rewritten")


@pytest.mark.parametrize("key", ["strip_params", "stripParams"])
def test_strip_params_string_becomes_a_list_without_model(key: str) -> None:
    config = model(f"{SERVER}\nfilters: {{{key}: ' top_k,model, top_p,,top_k '}}")
    assert config.models["m"].filters.strip_params == ("top_k", "top_p")
    assert mapped(config)["models.m.filters.stripParams"][1] == "rewritten"
    assert (key == "strip_params") == ("models.m.filters.strip_params" in mapped(config))


def test_strip_params_in_both_spellings_is_a_problem() -> None:
    found = model_problems(f"{SERVER}\nfilters: {{strip_params: a, stripParams: [b]}}")
    assert found == [("models.m.filters.strip_params", "stripParams is set too: keep one")]


def test_set_params_by_id_becomes_aliases_with_their_own_filters() -> None:
    config = model(
        f"""\
        {SERVER}
        aliases: [fast]
        filters:
          setParams: {{t: 1}}
          setParamsByID:
            "${{MODEL_ID}}": {{effort: medium}}
            "${{MODEL_ID}}:high": {{effort: high}}
            fast: {{max_tokens: 2}}
        """
    )
    m = config.models["m"]
    assert m.aliases == ("fast", "m:high")
    assert [dict(layer.set_params) for layer in m.filters_for("m")] == [
        {"t": 1},
        {"effort": "medium"},
    ]
    assert [dict(layer.set_params) for layer in m.filters_for("m:high")][1] == {"effort": "high"}
    assert [dict(layer.set_params) for layer in m.filters_for("fast")][1] == {"max_tokens": 2}
    assert config.resolve("m:high") is m
    target = mapped(config)["models.m.filters.setParamsByID.${MODEL_ID}:high"]
    assert target == ("models.m.aliasFilters.m:high.setParams", "rewritten")


def test_set_params_by_id_names_take_only_model_id() -> None:
    found = model_problems(f"{SERVER}\nfilters: {{setParamsByID: {{'${{x}}:a': {{t: 1}}}}}}")
    assert found == [
        (
            "models.m.filters.setParamsByID.${x}:a",
            "only ${MODEL_ID} and ${PORT} may be used in these names",
        )
    ]


def test_alias_filters_accept_the_models_own_id() -> None:
    config = model(f"{SERVER}\naliasFilters: {{m: {{setParams: {{t: 1}}}}}}")
    assert {m.kind for m in config.compat} == {"same"}  # modelswap's own spelling
    assert dict(config.models["m"].filters_for("m")[0].set_params) == {"t": 1}


def test_aliases_written_as_mappings_keep_their_id_and_warn_for_the_rest() -> None:
    config = model(f"{SERVER}\naliases: [a, {{id: b, name: B, unlisted: true}}]")
    assert config.models["m"].aliases == ("a", "b")
    assert warned(config) == ["models.m.aliases[1].name", "models.m.aliases[1].unlisted"]
    assert model_problems(f"{SERVER}\naliases: [{{name: B}}]") == [
        ("models.m.aliases[0]", "an alias written as a mapping needs an id")
    ]


def test_timeouts_are_renamed_and_zero_is_no_limit() -> None:
    config = model(
        f"{SERVER}\ntimeouts: {{connect: 0, responseHeader: 45, keepalive: 30, idleConn: 90}}"
    )
    t = config.models["m"].timeouts
    assert (t.connect, t.first_byte) == (0.0, 45.0)  # 0: no limit, as in llama-swap
    kinds = mapped(config)
    assert kinds["models.m.timeouts.responseHeader"] == ("models.m.timeouts.firstByte", "rewritten")
    assert kinds["models.*.timeouts.connect"] == ("models.*.timeouts.connect", "same")
    assert warned(config) == []
    assert (t.keepalive, t.idle_conn, t.tls_handshake) == (30.0, 90.0, None)  # applied
    assert kinds["models.*.timeouts.keepalive"] == ("models.*.timeouts.keepalive", "same")


def test_hooks_on_startup_preload_and_its_aliases() -> None:
    config = load(
        f"""\
        models:
          a: {{cmd: 'srv --port ${{PORT}}', aliases: [alias-a]}}
          b: {SERVER_FLOW}
        profiles:
          coding: {{pins: {{code: a}}}}
        hooks:
          on_startup:
            profile: coding
            preload: [alias-a, b]
        """
    )
    assert config.scheduling.preload == ("a", "b")
    assert config.scheduling.profile == "coding"
    kinds = mapped(config)
    assert kinds["hooks.on_startup.preload"] == ("hooks.onStartup.preload", "rewritten")
    assert kinds["hooks.on_startup.preload[0]"] == ("models.a", "rewritten")
    assert warned(config) == []
    found = problems(
        f"models:\n  a: {SERVER_FLOW}\nhooks: {{on_startup: {{preload: [a]}}, onStartup: {{}}}}\n"
    )
    assert found == [("hooks.on_startup", "hooks.onStartup is set too: keep one")]


def test_store_path_is_the_activity_log() -> None:
    config = model(SERVER, top="store: {path: /var/lib/ls.sqlite, other: 1}\n")
    assert config.observability.activity_path == "/var/lib/ls.sqlite"
    assert warned(config) == ["store.other"]
    found = problems(f"store: {{path: a}}\nactivity: {{path: b}}\nmodels:\n  m: {SERVER_FLOW}\n")
    assert found == [("store.path", "activity.path is set too: keep one of the two")]


def test_routing_block_gives_groups_and_priorities() -> None:
    config = load(
        f"""\
        routing:
          router:
            use: group
            settings:
              groups:
                g: {{swap: false, members: [a, b]}}
          scheduler:
            use: fifo
            settings: {{fifo: {{priority: {{a: 7}}}}}}
        models:
          a: {SERVER_FLOW}
          b: {SERVER_FLOW}
        """
    )
    assert [(g.name, g.members, g.swap) for g in config.scheduling.groups] == [
        ("g", ("a", "b"), False)
    ]
    assert (config.models["a"].priority, config.models["b"].priority) == (7, 0)
    assert warned(config) == []


@pytest.mark.parametrize(
    ("routing", "expected"),
    [
        ("5", [("routing", "expected a mapping, got an integer")]),
        (
            "{router: {use: solver}}",
            [("routing.router.use", "expected group or matrix, got 'solver'")],
        ),
        ("{scheduler: {use: lifo}}", [("routing.scheduler.use", "expected fifo, got 'lifo'")]),
        ("{engine: {}}", [("routing.engine", "unknown key (known: router, scheduler)")]),
        (
            "{scheduler: {settings: {fifo: {priority: {zz: 1}}}}}",
            [("routing.scheduler.settings.fifo.priority.zz", "'zz' is not a model id")],
        ),
        (
            "{router: {settings: {groups: {}}}}\ngroups: {}",
            [("routing.router.settings.groups", "groups is set too: keep one")],
        ),
    ],
)
def test_routing_problems_name_their_key(routing: str, expected: list[tuple[str, str]]) -> None:
    assert problems(f"routing: {routing}\nmodels:\n  m: {SERVER_FLOW}\n") == expected


def test_routing_matrix_is_read() -> None:
    matrix = "{vars: {a: m}, sets: {s: a}}"
    config = model(
        SERVER, top=f"routing: {{router: {{use: matrix, settings: {{matrix: {matrix}}}}}}}\n"
    )
    assert warned(config) == []
    assert config.scheduling.matrix == (frozenset({"m"}),)
    spelled_otherwise = model(SERVER, top="matrix: {solver: x}\n")
    assert (warned(spelled_otherwise), spelled_otherwise.scheduling.matrix) == (["matrix"], None)


def test_peers_key_from_the_environment_and_tailcat_peers() -> None:
    config = model(
        SERVER,
        top="""\
        peers:
          box:
            proxy: http://127.0.0.1:9999
            apiKey: ${env.PEER_API_KEY}
            models: [big]
            filters: {stripParams: "top_k, top_p"}
            timeouts: {responseHeader: 30, tlsHandshake: 5}
          tc:
            proxy: tailcat://tcTOKEN
            models: [x]
        """,
    )
    peer = config.peers["box"]
    assert (peer.api_key, peer.filters.strip_params) == ("peer-key", ("top_k", "top_p"))
    assert peer.timeouts.first_byte == 30
    assert set(config.peers) == {"box"}
    assert mapped(config)["peers.box.apiKey"] == ("peers.box.apiKeyEnv", "rewritten")
    assert warned(config) == ["peers.tc"]
    assert config.peers["box"].timeouts.tls_handshake == 5  # applied to an https peer


def test_peer_key_with_other_macros_is_a_problem() -> None:
    found = problems(
        f"peers: {{p: {{proxy: 'http://127.0.0.1:1', apiKey: 'sk-${{env.K}}', models: [x]}}}}\n"
        f"models:\n  m: {SERVER_FLOW}\n"
    )
    assert found == [("peers.p.apiKey", "environment variable K is not set")]


def test_unload_timeout_is_the_stop_grace() -> None:
    config = model(f"{SERVER}\nunloadTimeout: 3\n", top="unloadTimeout: 7\n")
    assert (warned(config), config.models["m"].stop_grace) == ([], 3)
    assert model(SERVER, top="unloadTimeout: 7\n").models["m"].stop_grace == 7
    assert model(SERVER).models["m"].stop_grace is None  # the gateway's 5 s


def test_performance_is_read_as_llamaswap_writes_it() -> None:
    config = model(SERVER, top="performance: {disabled: false, every: 1m30s}\n")
    assert warned(config) == []
    assert config.observability.performance is True
    assert config.observability.performance_every == 90.0
    off = model(SERVER, top="performance: {disabled: true}\n").observability
    assert (off.performance, off.performance_every) == (False, 5.0)  # llama-swap's default
    assert model(SERVER, top="performance: {every: 2}\n").observability.performance_every == 2


@pytest.mark.parametrize(
    ("every", "message"),
    [
        ("fast", "'fast' is not a duration: seconds, or text like 5s, 1m30s, 500ms"),
        ("500ms", "must be greater than or equal to 1"),
        ("true", "expected a number, got a boolean"),
    ],
)
def test_a_bad_performance_interval_names_its_key(every: str, message: str) -> None:
    found = problems(f"performance: {{every: {every}}}\nmodels:\n  m: {SERVER_FLOW}\n")
    assert found == [("performance.every", message)]


def test_include_aliases_in_list() -> None:
    listed = model(SERVER, top="includeAliasesInList: true\n")
    assert (warned(listed), listed.include_aliases_in_list) == ([], True)
    hidden = model(SERVER, top="includeAliasesInList: false\n")
    assert (warned(hidden), hidden.include_aliases_in_list) == ([], False)
    assert model(SERVER).include_aliases_in_list is False  # llama-swap's default


# --- what warns, and what is still an error -------------------------------------------------

UNSUPPORTED_TOP = (
    "logRequests: true\nui: {theme: x}\nmatrix: {solver: x}\ntailcat: {}\n"
    "selectors: {s: {models: [m]}}\n"
)
UNSUPPORTED_MODEL = "compat: {ignoreWebsockets: true}\ntimeouts: {expectContinue: 1}\n"


def test_each_unsupported_key_warns_exactly_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="modelswap.config.compat"):
        config = model(f"{SERVER}\n{UNSUPPORTED_MODEL}", top=UNSUPPORTED_TOP)
    keys = warned(config)
    top = {line.split(":")[0] for line in UNSUPPORTED_TOP.splitlines()} - {"selectors", "ui"}
    assert top | {"selectors.s", "ui.theme"} <= set(keys)
    assert "models.m.compat" in keys
    assert "models.m.timeouts.expectContinue" in keys
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == len(keys) == len(set(keys))
    for key in keys:
        line = next(m for m in messages if f" {key} " in m)
        assert messages.count(line) == 1
        assert line.startswith(f"llama-swap key {key} is not implemented and is ignored: ")
    assert all(r.levelno == logging.WARNING for r in caplog.records)


def test_warnings_are_logged_once_per_load(caplog: pytest.LogCaptureFixture) -> None:
    text = (FIXTURES / "kitchen-sink.yaml").read_text()
    with caplog.at_level(logging.WARNING, logger="modelswap.config.compat"):
        config = load_config_text(text, environ=ENV)
    expected = [warning_text(m) for m in config.compat if m.warning]
    # unloadTimeout, sendLoadingState (twice each), selectors, capabilities, profiles,
    # upstream.ignorePaths: read since issue 17; performance since issue 19; logTimeFormat,
    # logToStdout, metricsMaxInMemory, captureBuffer, timeouts.keepalive|tlsHandshake|idleConn;
    # policies, hooks.on_request and models.*.filters.policy since issue 29 (SPL), and
    # ui.activity.session_id (issue 29)
    assert len(expected) == 6
    assert [r.getMessage() for r in caplog.records] == expected


def test_a_failed_load_logs_no_warnings(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), pytest.raises(ConfigError):
        load("logRequests: true\nmodels:\n  m: {cmd: srv}\n")  # no ${PORT}: invalid
    assert caplog.records == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "sendLoadingStat: true\n",
            ("sendLoadingStat", "unknown key (did you mean sendLoadingState?)"),
        ),
        ("matrixx: {}\n", ("matrixx", "unknown key (did you mean matrix?)")),
        ("globalTtl: 5\n", ("globalTtl", "unknown key (did you mean globalTTL?)")),
    ],
)
def test_unknown_keys_are_still_errors(text: str, expected: tuple[str, str]) -> None:
    assert problems(f"{text}models:\n  m: {SERVER_FLOW}\n") == [expected]


def test_unknown_model_and_filter_keys_are_still_errors() -> None:
    found = model_problems(f"{SERVER}\nsendLoadingState: true\nttll: 5\nfilters: {{strip: a}}")
    assert sorted(found) == [
        ("models.m.filters.strip", "unknown key"),
        ("models.m.ttll", "unknown key (did you mean ttl?)"),
    ]


def test_translate_leaves_its_input_alone() -> None:
    data = {"models": {"m": {"cmd": "x", "filters": {"strip_params": "a"}}}, "matrix": {}}
    result = translate(data)
    assert data == {"models": {"m": {"cmd": "x", "filters": {"strip_params": "a"}}}, "matrix": {}}
    assert result.data == {
        "models": {"m": {"cmd": "x", "filters": {"stripParams": ["a"]}}},
        "matrix": {},  # read (an empty matrix: every model runs alone)
    }


# --- explain --------------------------------------------------------------------------------


def test_explain_lists_keys_by_how_they_were_read() -> None:
    config = model(
        f"{SERVER}\nttl: -1\ncompat: {{x: 1}}\ntimeouts: {{connect: 0}}",
        top="logLevel: info\n",
    )
    assert explain(config.compat).splitlines() == [
        "llama-swap keys: 5 found",
        "",
        "read as-is (the same key in modelswap):",
        "  logLevel: same values: debug, info, warn, error",
        "  models.*.cmd: same meaning ('#' lines and '\\' continuations allowed)",
        "  models.*.timeouts.connect: seconds to open the connection (0: no limit)",
        "",
        "rewritten:",
        "  models.m.ttl -> globalTTL: -1: the model uses globalTTL",
        "",
        "warnings (1):",
        "  llama-swap key models.m.compat is not implemented and is ignored: there are no "
        "upstream compatibility switches",
        "",
        "not acted on (1 keys, each once):",
        "  models.*.compat: there are no upstream compatibility switches",
    ]
    assert explain(()) == "llama-swap keys: none found"


def test_explain_lists_each_key_not_acted_on_once() -> None:
    text = (
        "models:\n"
        "  a: {cmd: 'srv ${PORT}', compat: {x: 1}, timeouts: {expectContinue: 1}}\n"
        "  b: {cmd: 'srv ${PORT}', compat: {x: 2}, timeouts: {expectContinue: 2}}\n"
    )
    summary = explain(load(text).compat).split("not acted on (2 keys, each once):\n", 1)[1]
    assert [line.split(":")[0].strip() for line in summary.splitlines()] == [
        "models.*.compat",
        "models.*.timeouts.expectContinue",
    ]


def test_check_explain_prints_the_mapping(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    assert main(["check", str(FIXTURES / "matrix.yaml"), "--explain"]) == 0
    out = capsys.readouterr().out
    assert "gemma-model" in out
    assert "\nllama-swap keys: " in out
    assert "  matrix: vars, sets, evict_costs" in out
    assert main(["check", str(FIXTURES / "matrix.yaml")]) == 0
    assert "llama-swap keys" not in capsys.readouterr().out
