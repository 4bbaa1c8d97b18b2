"""vLLM sleep mode: an evicted sleepMode model sleeps (same process) and wakes on demand."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from tests.e2e.conftest import Gateway, fake_cmd

from modelswap.config import load_config_text
from modelswap.errors import ConfigError

pytestmark = pytest.mark.e2e


def model(name: str) -> str:
    cmd = fake_cmd("--flavor vllm --load-delay 0.3 --enable-sleep-mode")
    return f"  {name}:\n    sleepMode: true\n    cmd: {cmd}\n"


def chat(gw: Gateway, name: str) -> str:
    status, headers, body = gw.post(
        "/v1/chat/completions",
        json.dumps({"model": name, "messages": [{"role": "user", "content": "hi"}]}).encode(),
    )
    assert status == 200, body
    return headers["X-Fake-Pid"]


def test_evicted_sleep_mode_model_sleeps_and_wakes_in_the_same_process(
    gateway: Callable[[str], Gateway],
) -> None:
    gw = gateway(model("a") + model("b"))
    pid_a = chat(gw, "a")
    pid_b = chat(gw, "b")
    running = gw.running()
    assert running["a"]["state"] == "sleeping"
    assert running["b"]["state"] == "ready"
    assert pid_a != pid_b
    # a wakes in the same process (no new start); b goes to sleep in its turn.
    assert chat(gw, "a") == pid_a
    running = gw.running()
    assert running["a"]["state"] == "ready"
    assert running["b"]["state"] == "sleeping"
    log = gw.log()
    assert log.count("a: stopped -> starting") == 1
    assert "a: sleeping -> ready" in log
    assert chat(gw, "b") == pid_b


def test_sleep_mode_without_the_server_flag_is_a_config_error() -> None:
    text = "models:\n  a:\n    sleepMode: true\n    cmd: vllm serve m --port ${PORT}\n"
    with pytest.raises(ConfigError) as info:
        load_config_text(text)
    message = "needs a vLLM server started with --enable-sleep-mode (add it to cmd)"
    assert info.value.problems == [("models.a.sleepMode", message)]
    ok = load_config_text(text.replace("--port", "--enable-sleep-mode --port"), environ={})
    assert ok.models["a"].env["VLLM_SERVER_DEV_MODE"] == "1"
