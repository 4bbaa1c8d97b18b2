"""The fit planner end to end: the real llama.cpp server (SmolLM2 at -c 2048) started through
the gateway, its logged KV size against the plan in ``/running``, ``GET /api/plan`` and the
``modelswap plan`` command on the same GGUF file."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

import pytest
from tests.e2e.conftest import REPO, Gateway, chat, llamacpp_cmd, request, smollm2_gguf

pytestmark = pytest.mark.e2e


def test_plan_against_the_real_llamacpp_receipt(gateway: Callable[[str], Gateway]) -> None:
    gw = gateway(f"  smollm2:\n    cmd: {llamacpp_cmd(2048)}\n")
    assert "smollm2" not in gw.running()  # stopped: no row, no plan

    reply = chat(gw, "smollm2", max_tokens=2)
    assert reply.status == 200, reply.body
    gw.wait_for(lambda: "plan_error_pct" in gw.running()["smollm2"])
    row = gw.running()["smollm2"]
    # llama.cpp logged "llama_kv_cache: size = 45.00 MiB (2048 cells, 30 layers, 1/1 seqs)";
    # the plan read 30 layers × 3 KV heads × 64 from the GGUF header.
    assert row["capacity"]["kv_cache_mib"] == 45.0  # type: ignore[index]
    assert row["plan"]["figures"]["kv_cache_mib"] == {  # type: ignore[index]
        "planned": 45.0,
        "reported": 45.0,
        "error_pct": 0.0,
    }
    assert row["plan_error_pct"] == 0.0

    planned = request(gw, "GET", "/api/plan?model=smollm2").json()
    assert planned["model_id"] == "smollm2"
    assert planned["engine"] == "llamacpp"
    assert planned["context"] == 2048
    assert planned["kv_bytes_per_token"] == 2 * 30 * 3 * 64 * 2
    assert planned["kv_bytes_at_context"] == 45 * 1024**2
    assert planned["model"]["format"] == "gguf"
    longer = request(gw, "GET", "/api/plan?model=smollm2&max_model_len=8192").json()
    assert longer["kv_bytes_at_context"] == 180 * 1024**2
    assert request(gw, "GET", "/api/plan").status == 400
    assert request(gw, "GET", "/api/plan?model=smollm2&max_model_len=x").status == 400
    assert request(gw, "GET", "/api/plan?model=nope").status == 404

    # The command line gives the same figure for the same file, without a server.
    done = subprocess.run(
        [sys.executable, "-m", "modelswap", "plan", smollm2_gguf(), "--max-model-len", "2048"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "KV at context  45.00 MiB for one sequence" in done.stdout
    assert "layers         30: 30 full-attention (3 KV heads × 64)" in done.stdout
