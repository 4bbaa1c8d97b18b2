"""The container image's entrypoint (``python -m modelswap.container``): which config it serves,
where the demo's key comes from, what it passes to ``modelswap serve``, and that the demo config
it writes loads — with its key — as modelswap reads it. Pure: no container, no process."""

from __future__ import annotations

import sys

import pytest

from modelswap.config import load_config_text
from modelswap.config.security import exposure_problem
from modelswap.container import KEY_FILE, demo_config_text, serve_argv

SERVE = [sys.executable, "-m", "modelswap", "serve"]


class Files:
    """The files that exist in the pretend container, and the demo configs written."""

    def __init__(self, *present: str) -> None:
        self.present = set(present)
        self.written: list[str] = []

    def is_file(self, path: str) -> bool:
        return path in self.present

    def write(self, text: str) -> str:
        self.written.append(text)
        return f"/tmp/demo-{len(self.written)}.yaml"


def test_a_mounted_config_is_served_on_0_0_0_0() -> None:
    files = Files("/config/config.yaml")
    argv, hint = serve_argv(["--log-level", "debug"], {}, files.is_file, files.write)
    assert argv == [
        *SERVE,
        "--listen",
        "0.0.0.0:8080",
        "--config",
        "/config/config.yaml",
        "--log-level",
        "debug",
    ]
    assert hint is None
    assert files.written == []


def test_the_listen_address_and_the_config_path_come_from_the_environment() -> None:
    files = Files("/etc/ms.yaml")
    environ = {"MODELSWAP_LISTEN": "[::]:9000", "MODELSWAP_CONFIG": "/etc/ms.yaml"}
    argv, _ = serve_argv([], environ, files.is_file, files.write)
    assert argv == [*SERVE, "--listen", "[::]:9000", "--config", "/etc/ms.yaml"]
    argv, _ = serve_argv(["--listen", "0.0.0.0:1", "-c", "/x.yaml"], {}, files.is_file, files.write)
    assert argv == [*SERVE, "--listen", "0.0.0.0:1", "-c", "/x.yaml"]  # the caller's own


def test_another_command_is_run_instead() -> None:
    files = Files()
    argv, hint = serve_argv(
        ["modelswap", "check", "/config/config.yaml"], {}, files.is_file, files.write
    )
    assert argv == ["modelswap", "check", "/config/config.yaml"]
    assert hint is None


def test_the_demo_takes_its_key_from_a_mounted_secret_first() -> None:
    files = Files(KEY_FILE)
    argv, hint = serve_argv([], {"MODELSWAP_API_KEY": "ignored"}, files.is_file, files.write)
    assert argv == [*SERVE, "--listen", "0.0.0.0:8080", "--config", "/tmp/demo-1.yaml"]
    assert hint is None
    assert f'"keyFile": "{KEY_FILE}"' in files.written[0]


def test_the_demo_takes_its_key_from_the_environment_and_loads_with_it() -> None:
    files = Files()
    _, hint = serve_argv(
        [], {"MODELSWAP_API_KEY": "env-key-0123456789"}, files.is_file, files.write
    )
    assert hint is None
    config = load_config_text(files.written[0], environ={"MODELSWAP_API_KEY": "env-key-0123456789"})
    (key,) = config.api_keys
    assert key.secret == "env-key-0123456789"
    assert key.scopes == frozenset({"inference", "read", "admin"})
    assert set(config.models) == {"smollm2", "smollm2-long", "smollm2-embed"}
    assert sys.executable in config.models["smollm2"].cmd  # the macros are written out
    assert exposure_problem("0.0.0.0", config.api_keys, False) is None


def test_without_a_key_the_demo_is_refused_and_the_hint_says_how_to_give_one() -> None:
    files = Files()
    _, hint = serve_argv([], {}, files.is_file, files.write)
    assert hint is not None
    for way in (KEY_FILE, "MODELSWAP_API_KEY", "--allow-unauthenticated-network"):
        assert way in hint
    config = load_config_text(files.written[0], environ={})
    assert config.api_keys == ()
    assert exposure_problem("0.0.0.0", config.api_keys, False) is not None  # serve refuses
    _, hint = serve_argv(["--allow-unauthenticated-network"], {}, files.is_file, files.write)
    assert hint is None  # asked for: no hint (modelswap logs the open switch itself)


@pytest.mark.parametrize("key", [None, {"name": "container", "keyFile": "/run/k"}])
def test_the_demo_config_text_is_the_packaged_demo(key: dict[str, object] | None) -> None:
    text = demo_config_text(key)
    assert text.startswith("# The built-in demo configuration")
    assert ("apiKeys:" in text) == (key is not None)
