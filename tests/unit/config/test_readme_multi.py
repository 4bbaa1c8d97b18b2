"""The examples of docs/multiple-machines.md, docs/config-guide.md ("Changing the config live")
and docs/deploying.md load, and mean what those pages say they mean. Pure: no sockets, no
processes."""

from __future__ import annotations

import re
from pathlib import Path

from modelswap.config import load_config_text

REPO = Path(__file__).resolve().parents[3]
ENV = {"FRONT_KEY": "front-secret", "GPU_BOX_KEY": "gpu-secret"}


def examples(page: str, heading: str | None = None) -> list[str]:
    """The YAML blocks of docs/<page>, or of its section <heading> (a "## " heading)."""
    text = (REPO / "docs" / page).read_text()
    if heading is not None:
        text = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```yaml\n(.*?)```", text, re.S)


def test_multiple_machines_example() -> None:
    (example,) = examples("multiple-machines.md")
    config = load_config_text(example, environ=ENV)
    gpu, cpu = config.peers["gpu-box"], config.peers["cpu-box"]
    assert gpu.discover
    assert gpu.api_key == "gpu-secret"
    assert (gpu.breaker_failures, gpu.breaker_cooldown) == (3, 30)
    assert cpu.models == ("whisper", "bge-m3")
    assert cpu.api_key is None
    assert (cpu.timeouts.connect, cpu.timeouts.first_byte) == (2, 120)
    assert config.models["qwen-small"].fallback == ("gpu-box/qwen-small",)
    assert {"front-secret", "gpu-secret"} <= config.secrets


def test_changing_the_config_live_example() -> None:
    (example,) = examples("config-guide.md", "Changing the config live")
    before = load_config_text(example, environ={})
    with_alias = load_config_text(example.replace("[chat]", "[chat, assistant]"), environ={})
    bigger = load_config_text(example.replace("-c 8192", "-c 16384"), environ={})
    model = before.models["qwen"]
    # An alias edit leaves every field a running process depends on as it was …
    assert with_alias.models["qwen"].cmd == model.cmd
    assert with_alias.models["qwen"].aliases == ("chat", "assistant")
    # … a context edit changes the command (so the model restarts when idle).
    assert bigger.models["qwen"].cmd != model.cmd
    assert "16384" in bigger.models["qwen"].cmd


def test_many_gateways_one_dns_name_example() -> None:
    (example,) = examples("deploying.md")
    config = load_config_text(example, environ={"MODELSWAP_PEER_KEY": "peer-secret"})
    pool = config.peers["cluster"]
    assert pool.dns is not None
    assert (pool.dns.name, pool.dns.port, pool.dns.interval) == ("modelswap-headless", 8080, 10)
    assert pool.api_key == "peer-secret"
    assert config.models["qwen3-8b"].fallback == ("cluster/qwen3-8b",)
