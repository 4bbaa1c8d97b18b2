"""``modelswap plan --config FILE --together`` (issue 39) on config.example.yaml and two held
llama-swap configs: the sets it prints are honoured by the gateway — requests driven through
every member of a set leave them all running (no eviction inside a set) — on fake backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.e2e.conftest import (
    FAKE_BACKEND,
    REPO,
    Gateway,
    chat,
    fake_cmd_text,
    free_port_range,
    launch_gateway,
    stop_gateway,
)

pytestmark = pytest.mark.e2e

HELD = REPO / "tests" / "data" / "llamaswap"
FAKE_ENV = {"FAKE_PYTHON": sys.executable, "FAKE_BACKEND": str(FAKE_BACKEND)}


def together(config: Path, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "modelswap",
            "plan",
            "--config",
            str(config),
            "--together",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**os.environ, **env},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.fixture
def gateways() -> Iterator[list[Gateway]]:
    started: list[Gateway] = []
    yield started
    for gw in started:
        stop_gateway(gw)


def runnable(text: str, tmp_path: Path) -> Path:
    """The held config with its own ports and state directory (tests run side by side)."""
    path = tmp_path / "runnable.yaml"
    path.write_text(f"startPort: {free_port_range(8)}\nstateDir: {tmp_path / 'state'}\n{text}")
    return path


def drive(gw: Gateway, sets: list[list[str]]) -> None:
    """Each set in turn: a request to every member, then all of them run side by side."""
    for members in sets:
        for model in members:
            reply = chat(gw, model)
            assert reply.status == 200, reply.body
        running = gw.running()
        assert set(members) <= set(running), (members, sorted(running))
        for model in members:
            assert running[model]["state"] == "ready", running[model]


@pytest.mark.parametrize("held", ["routing.yaml", "matrix.yaml"])
def test_the_sets_of_a_held_config_are_honoured(
    held: str, tmp_path: Path, gateways: list[Gateway]
) -> None:
    config = runnable((HELD / held).read_text(), tmp_path)
    result = together(config, FAKE_ENV)
    expected = {
        "routing.yaml": [["chat", "embed"], ["big"]],
        "matrix.yaml": [["gemma-model", "voxtral-model"], ["qwen-model", "voxtral-model"]],
    }[held]
    assert result["sets"] == expected
    # The printed YAML loads as a config's scheduling, and says the same.
    pinned = yaml.safe_load(result["yaml"])
    assert set(pinned) <= {"groups", "matrix"}
    gw = launch_gateway(config, tmp_path / "gw.log", gateways, env=FAKE_ENV)
    drive(gw, result["sets"])


def test_the_sets_of_config_example_are_honoured(tmp_path: Path, gateways: list[Gateway]) -> None:
    home = tmp_path / "home"
    key = home / ".config" / "modelswap" / "editor.key"
    key.parent.mkdir(parents=True)
    key.write_text("editor-key-from-file\n")
    env = {"HOME": str(home), "MODELSWAP_ADMIN_KEY": "admin-key-0001", "VLLM_API_KEY": "v-0001"}
    result = together(REPO / "config.example.yaml", env)
    example = yaml.safe_load((REPO / "config.example.yaml").read_text())
    models = list(example["models"])
    assert sorted(m for s in result["sets"] for m in s) == sorted(models)
    # Its models as fake backends, with its scheduling keys (none: one model at a time).
    scheduling = {k: example[k] for k in ("groups", "matrix", "resources") if k in example}
    fakes = {m: {"cmd": fake_cmd_text()} for m in models}
    config = runnable(yaml.safe_dump({**scheduling, "models": fakes}, sort_keys=False), tmp_path)
    assert together(config, {})["sets"] == result["sets"]
    gw = launch_gateway(config, tmp_path / "gw.log", gateways)
    drive(gw, result["sets"])


def test_the_printed_yaml_pins_the_same_sets(tmp_path: Path) -> None:
    # routing.yaml's groups via the printed YAML alone (its own groups dropped) give back the
    # same sets: what a user pastes is what was listed.
    text = (HELD / "routing.yaml").read_text()
    result = together(runnable(text, tmp_path), FAKE_ENV)
    held = yaml.safe_load(text)
    models = {m: {"cmd": fake_cmd_text()} for m in held["models"]}
    pinned = tmp_path / "pinned.yaml"
    pinned.write_text(yaml.safe_dump({"models": models}, sort_keys=False) + result["yaml"])
    assert together(pinned, {})["sets"] == result["sets"]
