"""Plan versus receipt: configured command lines, the comparison with the capacity a backend
printed (real captured logs), and the per-start plan cache driven by real events."""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import pytest
from tests.e2e.conftest import smollm2_gguf
from tests.unit.planner.conftest import GIB, LOGS, PLANNER

from modelswap.backends.capacity import parse_capacity
from modelswap.backends.logtext import split_segments
from modelswap.events import EventBus
from modelswap.planner.accuracy import PlanCache, compare, running_fields
from modelswap.planner.from_config import (
    check_line,
    find_model_path,
    inputs_from_argv,
    plan_command,
)
from modelswap.states import ProcessState


def receipt_of(log: str):  # type: ignore[no-untyped-def]
    return parse_capacity(split_segments((LOGS / log).read_bytes().decode("utf-8")))


def llama_argv(ctx: int = 2048, extra: str = "") -> list[str]:
    return shlex.split(
        f"python -m modelswap.launchers.llamacpp -m {smollm2_gguf()} --port 5800 -c {ctx} "
        f"-np 1 -t 2 {extra}"
    )


def test_vllm_command_line_becomes_plan_inputs() -> None:
    folder = PLANNER / "qwen3.6-27b"
    argv = shlex.split(
        f"vllm serve {folder} --max-model-len 200001 --kv-cache-dtype fp8 "
        "--gpu-memory-utilization 0.98 --max-num-seqs 8 -tp 2 "
        '--speculative-config \'{"method":"mtp","num_speculative_tokens":2}\''
    )
    assert find_model_path(argv) == folder
    assert inputs_from_argv(argv, "vllm") == {
        "engine": "vllm",
        "max_model_len": 200_001,
        "max_num_seqs": 8,
        "utilization": 0.98,
        "tensor_parallel": 2,
        "kv_dtype": "fp8",
        "spec_tokens": 2,
    }
    plan = plan_command(argv, {"gpu_bytes": 32 * GIB})
    assert plan is not None
    assert plan.kv_dtype == "fp8"
    assert plan.inputs.tensor_parallel == 2


def test_llamacpp_command_line_and_missing_paths() -> None:
    plan = plan_command(llama_argv(4096, "-ctk q8_0"))
    assert plan is not None
    assert (plan.inputs.engine, plan.context, plan.kv_dtype) == ("llamacpp", 4096, "q8_0")
    assert plan_command(["vllm", "serve", "Qwen/Qwen3.6-27B"]) is None  # a hub id: not local
    assert check_line(["vllm", "serve", "/no/such/model"]) is None
    line = check_line(llama_argv())
    assert line == "weights 92.10 MiB, KV 22.50 KiB/token (f16), 45.00 MiB at 2,048 tokens"


def test_smollm2_plan_matches_the_captured_llamacpp_log() -> None:
    # llamacpp-cpu-smollm2.log: the real server at -c 2048 printed
    # "llama_kv_cache: size = 45.00 MiB (2048 cells, 30 layers, 1/1 seqs)".
    plan = plan_command(llama_argv())
    receipt = receipt_of("llamacpp-cpu-smollm2.log")
    assert plan is not None
    assert receipt is not None
    fields = running_fields(plan, receipt)
    assert fields == {
        "plan": {
            "verdict": "unknown (no GPU memory given: sizes only)",
            "figures": {"kv_cache_mib": {"planned": 45.0, "reported": 45.0, "error_pct": 0.0}},
        },
        "plan_error_pct": 0.0,
    }


def test_27b_llamacpp_plan_matches_the_logged_kv_of_four_sequences() -> None:
    folder = PLANNER / "qwen3.6-27b"
    argv = shlex.split(f"llama-server -m {folder} -c 524288 -np 4 -ctk q8_0 -ctv q8_0")
    plan = plan_command(argv)
    assert plan is not None
    figures = compare(plan, receipt_of("llamacpp-success.log"))
    assert figures["kv_cache_mib"] == {"planned": 17408.0, "reported": 17408.0, "error_pct": 0.0}


def test_vllm_comparison_uses_the_reported_kv_memory() -> None:
    folder = PLANNER / "llama-3.1-8b"
    argv = shlex.split(f"vllm serve {folder} --max-model-len 16384")
    plan = plan_command(argv, {"gpu_bytes": int(79.19 * GIB)})
    assert plan is not None
    figures = compare(plan, receipt_of("vllm-old-success.log"))
    assert list(figures) == ["kv_cache_gib", "kv_cache_tokens", "weights_gib"]
    assert figures["kv_cache_tokens"] == {
        "planned": 446_624.0,
        "reported": 446_624,
        "error_pct": 0.0,
    }
    assert abs(figures["weights_gib"]["error_pct"]) < 0.3
    # The plan's default allowance (2.17 GiB) is 0.41 GiB more than this older vLLM took.
    assert figures["kv_cache_gib"]["error_pct"] == pytest.approx(-0.8, abs=0.2)


def test_no_fields_without_a_plan_or_a_receipt() -> None:
    plan = plan_command(llama_argv())
    assert running_fields(None, receipt_of("llamacpp-cpu-smollm2.log")) == {}
    assert running_fields(plan, None) == {}


async def test_plan_cache_plans_each_start_once(tmp_path: Path) -> None:
    commands = {"smol": llama_argv(), "hub": ["vllm", "serve", "org/model"]}
    cache = PlanCache(commands.get)
    bus = EventBus()
    bus.add_listener(cache.on_event)
    bus.publish("process.state", model="smol", old=ProcessState.STOPPED, new=ProcessState.STARTING)
    bus.publish("process.state", model="hub", old=ProcessState.STOPPED, new=ProcessState.STARTING)
    for _ in range(200):
        if cache.get("smol") is not None:
            break
        await asyncio.sleep(0.01)
    first = cache.get("smol")
    assert first is not None
    assert first.kv_bytes_at_context == 45 * 1024**2
    assert cache.get("hub") is None  # not a local model: no plan, no error
    # Other transitions keep the plan; the next start replaces it.
    bus.publish("process.state", model="smol", old=ProcessState.STARTING, new=ProcessState.READY)
    assert cache.get("smol") is first
    commands["smol"] = llama_argv(4096)
    bus.publish("process.state", model="smol", old=ProcessState.STOPPED, new=ProcessState.STARTING)
    assert cache.get("smol") is None
    for _ in range(200):
        if cache.get("smol") is not None:
            break
        await asyncio.sleep(0.01)
    second = cache.get("smol")
    assert second is not None
    assert second.context == 4096
    await cache.close()
