"""Security settings in the configuration: client keys (key / keyEnv / keyFile, scopes, model
patterns), the exposure policy, open switches, CORS origins, backend locality, limits, and the
redacted export. Pure: no sockets, no processes."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from modelswap.config import Config, config_json_schema, load_config_text
from modelswap.config.export import export_config
from modelswap.config.resolved import ApiKey
from modelswap.config.security import (
    exposure_problem,
    is_loopback_host,
    open_switches,
    security_report,
)
from modelswap.errors import ConfigError
from modelswap.redact import MASK, Redactor

MODEL = "models:\n  m:\n    cmd: srv --port ${PORT}\n"


def load(top: str, environ: dict[str, str] | None = None, models: str = MODEL) -> Config:
    return load_config_text(textwrap.dedent(top) + "\n" + models, environ=environ or {})


def problems(top: str, environ: dict[str, str] | None = None, models: str = MODEL) -> list:
    with pytest.raises(ConfigError) as info:
        load(top, environ, models)
    return info.value.problems


def paths(found: list[tuple[str, str]]) -> list[str]:
    return [path for path, _ in found]


# --- apiKeys: the three ways to give a key, names, scopes, models ---------------------------


def test_a_plain_string_key_has_the_inference_scope_and_every_model() -> None:
    config = load("apiKeys: [sk-plain-string-key-0001]")
    (key,) = config.api_keys
    assert key.name == "key-1"
    assert key.secret == "sk-plain-string-key-0001"
    assert key.scopes == frozenset({"inference"})
    assert key.models == ()
    assert "sk-plain-string-key-0001" in config.secrets


def test_key_keyenv_and_keyfile_entries_resolve(tmp_path: Path) -> None:
    key_file = tmp_path / "key.txt"
    key_file.write_text("  from-file-key-0003  \nsecond line is ignored\n")
    config = load(
        f"""
        apiKeys:
          - {{key: literal-key-0001, name: ops, scopes: [read, admin]}}
          - {{keyEnv: MS_TEST_KEY, name: app, models: ["a*", qwen]}}
          - {{keyFile: {json.dumps(str(key_file))}, name: file}}
        """,
        environ={"MS_TEST_KEY": " env-key-0002 "},
    )
    ops, app, file = config.api_keys
    assert (ops.name, ops.secret, ops.scopes) == ("ops", "literal-key-0001", {"read", "admin"})
    assert (app.secret, app.scopes, app.models) == ("env-key-0002", {"inference"}, ("a*", "qwen"))
    assert (file.name, file.secret) == ("file", "from-file-key-0003")
    assert {"literal-key-0001", "env-key-0002", "from-file-key-0003"} <= config.secrets


@pytest.mark.parametrize(
    ("entry", "environ", "path", "words"),
    [
        ("{name: none}", {}, "apiKeys[0]", "exactly one of key, keyEnv, keyFile"),
        ("{key: a-key-0001, keyEnv: X}", {"X": "b"}, "apiKeys[0]", "exactly one"),
        ("{keyEnv: MS_UNSET_VAR}", {}, "apiKeys[0].keyEnv", "MS_UNSET_VAR is not set"),
        ("{keyEnv: 'not a name'}", {}, "apiKeys[0].keyEnv", "not a variable name"),
        ("{keyFile: /nonexistent/modelswap/key}", {}, "apiKeys[0].keyFile", "cannot read"),
        ("{key: '   '}", {}, "apiKeys[0]", "the key is empty"),
        ("{keyEnv: EMPTY}", {"EMPTY": ""}, "apiKeys[0]", "the key is empty"),
    ],
)
def test_bad_key_entries_name_their_path(
    entry: str, environ: dict[str, str], path: str, words: str
) -> None:
    found = problems(f"apiKeys:\n  - {entry}\n", environ)
    assert any(p == path and words in m for p, m in found), found


def test_an_empty_key_file_is_an_empty_key(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    found = problems(f"apiKeys:\n  - {{keyFile: {json.dumps(str(empty))}}}\n")
    assert ("apiKeys[0]", "the key is empty") in found


def test_duplicate_names_and_duplicate_secrets_are_problems() -> None:
    found = problems(
        """
        apiKeys:
          - {key: same-secret-0001, name: a}
          - {key: same-secret-0001, name: b}
          - {key: other-secret-0002, name: a}
        """
    )
    assert ("apiKeys[1]", "the same key is listed twice") in found
    assert any(p == "apiKeys[2].name" and "'a'" in m for p, m in found), found


def test_an_unknown_scope_is_a_shape_error() -> None:
    found = problems("apiKeys:\n  - {key: k-0001-abcd, scopes: [inference, root]}\n")
    assert any(p.startswith("apiKeys[0]") and "scopes" in p for p in paths(found)), found


def test_problem_messages_never_contain_the_key_values() -> None:
    with pytest.raises(ConfigError) as info:
        load(
            """
            apiKeys:
              - {key: dup-secret-value-77, name: a}
              - {key: dup-secret-value-77, name: a}
            """
        )
    assert "dup-secret-value-77" not in str(info.value)


def test_api_key_repr_and_config_repr_hide_secrets() -> None:
    config = load(
        "apiKeys: [{key: repr-hidden-secret-1, name: n}]",
        models="models:\n  m:\n    cmd: srv --port ${PORT}\n    apiKey: upstream-hidden-2\n",
    )
    assert "repr-hidden-secret-1" not in repr(config.api_keys[0])
    assert "upstream-hidden-2" not in repr(config.models["m"])
    assert "repr-hidden-secret-1" not in repr(config)
    assert "upstream-hidden-2" not in repr(config)


# --- model patterns: ApiKey.allows --------------------------------------------------------------

PATTERN_MODELS = """\
models:
  alpha:
    cmd: srv --port ${PORT}
    aliases: [fast]
  beta:
    cmd: srv --port ${PORT}
  qwen2.5-7b:
    cmd: srv --port ${PORT}
"""


@pytest.mark.parametrize(
    ("patterns", "allowed"),
    [
        ([], {"alpha", "beta", "qwen2.5-7b"}),
        (["a*"], {"alpha"}),
        (["fast"], {"alpha"}),  # an alias pattern grants its model
        (["qwen*", "beta"], {"beta", "qwen2.5-7b"}),
        (["?eta"], {"beta"}),
        (["ALPHA"], set()),  # case-sensitive
        (["nothing*"], set()),
    ],
)
def test_key_model_patterns(patterns: list[str], allowed: set[str]) -> None:
    config = load("", models=PATTERN_MODELS)
    key = ApiKey("k", "secret-0000-0000", frozenset({"inference"}), tuple(patterns))
    assert {m.id for m in config.models.values() if key.allows(m)} == allowed


# --- CORS origins ---------------------------------------------------------------------------


def test_cors_star_without_keys_is_a_config_error() -> None:
    found = problems("security: {corsOrigins: ['*']}")
    assert any(p == "security.corsOrigins" and "apiKeys" in m for p, m in found), found


def test_cors_star_with_keys_is_allowed_and_listed_as_open() -> None:
    config = load("apiKeys: [star-key-0001]\nsecurity: {corsOrigins: ['*']}")
    assert config.security.cors_origins == ("*",)
    assert any(s.startswith("security.corsOrigins") for s in open_switches(config))


def test_cors_origins_must_be_origins() -> None:
    found = problems("security: {corsOrigins: ['https://ok.example', 'app.example']}")
    assert any(p == "security.corsOrigins[1]" and "app.example" in m for p, m in found), found
    config = load("security: {corsOrigins: ['https://ok.example', 'http://127.0.0.1:3000']}")
    assert config.security.cors_origins == ("https://ok.example", "http://127.0.0.1:3000")
    assert open_switches(config) == []


# --- backend locality ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "proxy",
    [
        "http://10.1.2.3:8000",
        "http://example.com:8000",
        "https://api.example.com",
        "http://[2001:db8::1]:8000",
        "http://0.0.0.0:8000",
    ],
)
def test_a_remote_proxy_is_allowed_and_listed_as_an_open_switch(proxy: str) -> None:
    """llama-swap allows any proxy (a docker bridge such as 172.17.0.1 is common): so does
    modelswap, naming the model and the address among the open switches."""
    models = f"models:\n  remote:\n    cmd: srv\n    proxy: {proxy}\n"
    config = load("", models=models)
    switches = open_switches(config)
    assert [s for s in switches if s.startswith("models.remote.proxy")], switches
    host = str(urlsplit(proxy).hostname)
    assert any("'remote'" in s and host in s for s in switches), switches
    allowed = load("", models=models + "    allowRemoteBackend: true\n")
    assert allowed.models["remote"].allow_remote_backend is True
    assert any(s.startswith("models.remote.allowRemoteBackend") for s in open_switches(allowed)), (
        open_switches(allowed)
    )


@pytest.mark.parametrize(
    "proxy",
    [
        "http://127.0.0.1:${PORT}",
        "http://127.0.0.5:${PORT}",
        "http://localhost:${PORT}",
        "http://[::1]:${PORT}",
        "http://user:pw@127.0.0.1:${PORT}",
    ],
)
def test_loopback_proxies_are_fine(proxy: str) -> None:
    config = load("", models=f"models:\n  m:\n    cmd: srv --port ${{PORT}}\n    proxy: {proxy}\n")
    assert config.models["m"].allow_remote_backend is False
    assert open_switches(config) == []


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.5", False),
        ("localhost.example.com", False),
        ("128.0.0.1", False),
        ("", False),
    ],
)
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


# --- the exposure policy -------------------------------------------------------------------

KEY = (ApiKey("k", "exposure-key-0001", frozenset({"inference"})),)


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.5", "10.0.0.1"])
def test_non_loopback_without_keys_is_refused_naming_both_ways_out(host: str) -> None:
    message = exposure_problem(host, (), False)
    assert message is not None
    assert host in message
    assert "apiKeys" in message
    assert "--allow-unauthenticated-network" in message
    assert "security.allowUnauthenticatedNetwork" in message
    # How to give a key without writing it into the file: a mounted secret, or a variable.
    assert "keyFile:" in message
    assert "keyEnv:" in message
    assert exposure_problem(host, KEY, False) is None
    assert exposure_problem(host, (), True) is None


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_is_never_refused(host: str) -> None:
    assert exposure_problem(host, (), False) is None


def test_open_switches_name_every_allow_switch_that_is_on() -> None:
    closed = load("")
    assert open_switches(closed) == []
    assert len(open_switches(closed, allow_flag=True)) == 1
    config = load(
        "listen: 0.0.0.0:8080\napiKeys: [k-0001-abcd]\n"
        "security: {allowUnauthenticatedNetwork: true, corsOrigins: ['*']}",
        models="models:\n  r:\n    cmd: srv\n    proxy: http://10.0.0.9:80\n"
        "    allowRemoteBackend: true\n",
    )
    switches = open_switches(config)
    assert [s.split(":", 1)[0] for s in switches] == [
        "security.allowUnauthenticatedNetwork",
        "security.corsOrigins",
        "models.r.allowRemoteBackend",
    ]
    assert "http://10.0.0.9:80" in switches[2]


def test_security_report_shows_names_scopes_and_limits_never_key_values(tmp_path: Path) -> None:
    key_file = tmp_path / "k"
    key_file.write_text("report-file-secret-3\n")
    config = load(
        f"""
        listen: 0.0.0.0:9999
        maxRequestBodyBytes: 1000
        maxUploadBodyBytes: 2000
        limits: {{headerTimeout: 2.5, maxHeaderBytes: 4096, maxHeaders: 20, maxConnections: 7,
                  maxConnectionsPerClient: 3}}
        apiKeys:
          - report-plain-secret-1
          - {{keyEnv: RK, name: reader, scopes: [read], models: ["m*"]}}
          - {{keyFile: {json.dumps(str(key_file))}, name: boss, scopes: [admin, read]}}
        """,
        environ={"RK": "report-env-secret-2"},
    )
    report = security_report(config)
    text = json.dumps(report)
    for secret in ("report-plain-secret-1", "report-env-secret-2", "report-file-secret-3"):
        assert secret not in text
    assert report["listen"] == "0.0.0.0:9999"
    assert report["loopback_only"] is False
    assert report["authentication"] == "api keys"
    assert report["keys"] == [
        {"name": "key-1", "scopes": ["inference"], "models": ["*"]},
        {"name": "reader", "scopes": ["read"], "models": ["m*"]},
        {"name": "boss", "scopes": ["admin", "read"], "models": ["*"]},
    ]
    assert report["limits"] == {
        "max_request_body_bytes": 1000,
        "max_upload_body_bytes": 2000,
        "header_timeout": 2.5,
        "max_header_bytes": 4096,
        "max_headers": 20,
        "max_connections": 7,
        "max_connections_per_client": 3,
    }
    assert report["open_switches"] == []
    flagged = security_report(config, allow_flag=True)["open_switches"]
    assert isinstance(flagged, list)
    assert flagged[0].startswith("security.allowUnauthenticatedNetwork")


def test_security_report_without_keys_says_every_route_is_open() -> None:
    report = security_report(load(""))
    assert report["loopback_only"] is True
    assert report["keys"] == []
    assert "none" in str(report["authentication"])


# --- limits --------------------------------------------------------------------------------


def test_limit_defaults() -> None:
    limits = load("").limits
    assert (
        limits.header_timeout,
        limits.max_header_bytes,
        limits.max_headers,
        limits.max_connections,
        limits.max_connections_per_client,
    ) == (10.0, 16384, 100, 1024, 64)


def test_the_json_schema_documents_the_connection_share() -> None:
    limits = config_json_schema()["$defs"]["RawLimits"]["properties"]
    share = limits["maxConnectionsPerClient"]
    assert share["default"] == 64
    assert share["minimum"] == 1
    assert "IPv6 /64" in share["description"]
    assert limits["headerTimeout"]["default"] == 10.0


@pytest.mark.parametrize(
    ("top", "path"),
    [
        ("limits: {headerTimeout: 0}", "limits.headerTimeout"),
        ("limits: {maxHeaderBytes: 100}", "limits.maxHeaderBytes"),
        ("limits: {maxHeaders: 0}", "limits.maxHeaders"),
        ("limits: {maxConnections: 0}", "limits.maxConnections"),
        ("limits: {maxConnectionsPerClient: 0}", "limits.maxConnectionsPerClient"),
        ("limits: {maxConnectionsPerClient: many}", "limits.maxConnectionsPerClient"),
        ("limits: {maxConections: 5}", "limits.maxConections"),
        ("maxRequestBodyBytes: 0", "maxRequestBodyBytes"),
        ("maxUploadBodyBytes: -1", "maxUploadBodyBytes"),
        ("security: {allowUnauthenticatedNetwork: 'yes'}", "security.allowUnauthenticatedNetwork"),
        ("security: {allowEverything: true}", "security.allowEverything"),
    ],
)
def test_bad_limits_and_switches_name_their_path(top: str, path: str) -> None:
    assert path in paths(problems(top)), problems(top)


# --- the redacted export (GET /api/config, check --show) ------------------------------------


def test_export_masks_every_secret_and_keeps_the_shape(tmp_path: Path) -> None:
    key_file = tmp_path / "k"
    key_file.write_text("exp-file-secret-3\n")
    environ = {
        "KEY_ENV": "exp-env-key-secret-2",
        "UP": "exp-upstream-secret-4",
        "HF": "exp-hf-env-secret-5",
        "PLAIN": "exp-plain-env-secret-6",
        "CMD": "exp-cmd-env-secret-7",
    }
    models = textwrap.dedent(
        """\
        models:
          m:
            cmd: srv --port ${PORT} --api-key ${env.CMD} --hf-token=exp-cmd-literal-8 -t 4
            apiKey: ${env.UP}
            env:
              HF_TOKEN: ${env.HF}
              SOME_SETTING: ${env.PLAIN}
              API_TOKEN: exp-env-literal-9
              THREADS: "4"
          p:
            cmd: srv --port ${PORT}
            proxy: http://bob:exp-proxy-password-10@127.0.0.1:${PORT}/?api_key=exp-query-11
            apiKey: exp-upstream-literal-12
        """
    )
    config = load(
        f"""
        apiKeys:
          - exp-plain-key-secret-1
          - {{keyEnv: KEY_ENV, name: app}}
          - {{keyFile: {json.dumps(str(key_file))}, name: file, scopes: [read]}}
        """,
        environ,
        models,
    )
    data = export_config(config, Redactor(config.secrets))
    text = json.dumps(data)
    secrets = [
        "exp-plain-key-secret-1",
        *environ.values(),
        "exp-file-secret-3",
        "exp-cmd-literal-8",
        "exp-env-literal-9",
        "exp-proxy-password-10",
        "exp-query-11",
        "exp-upstream-literal-12",
    ]
    leaks = [s for s in secrets if s in text]
    assert not leaks, f"{len(leaks)} of {len(secrets)} secrets leak in the export: {leaks}"
    assert [k["name"] for k in data["apiKeys"]] == ["key-1", "app", "file"]
    assert all(k["key"] == MASK for k in data["apiKeys"])
    assert data["apiKeys"][2]["scopes"] == ["read"]
    m = data["models"]["m"]
    assert m["apiKey"] == MASK
    assert m["cmd"][:3] == ["srv", "--port", str(config.models["m"].port)]
    assert m["cmd"][-2:] == ["-t", "4"]  # what is not secret stays readable
    assert m["env"]["THREADS"] == "4"
    assert data["models"]["p"]["proxy"].startswith("http://***@127.0.0.1:")
    assert data["security"] == {"allowUnauthenticatedNetwork": False, "corsOrigins": []}
    assert data["limits"]["headerTimeout"] == 10.0
    assert data["limits"]["maxConnectionsPerClient"] == 64
