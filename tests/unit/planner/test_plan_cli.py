"""``modelswap plan`` and ``modelswap check`` in-process, and the renderings (table, JSON, bar,
SVG)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from tests.e2e.conftest import smollm2_gguf
from tests.unit.planner.conftest import GIB, PLANNER, model

from modelswap.cli import main
from modelswap.planner.memory import PlanInputs, make_plan
from modelswap.planner.render import SEGMENTS, basin, svg, terminal_bar

Q27 = str(PLANNER / "qwen3.6-27b")
QUESTION = [Q27, "--quantization", "nvfp4", "--gpu", "32GiB", "--utilization", "0.98"]


def test_the_27b_question_is_answered_with_the_fix(capsys: pytest.CaptureFixture[str]) -> None:
    # (How fast it answers is bench/'s question; this checks what it answers.)
    code = main(["plan", *QUESTION, "--max-model-len", "200001"])
    out = capsys.readouterr().out
    assert code == 1  # does not fit
    assert "verdict: DOES NOT FIT" in out
    assert "KV per token        64.00 KiB (65,536 B)" in out
    assert "state per sequence  146.81 MiB" in out
    assert "784 tokens/block" in out
    assert "fix: restart with --max-model-len 174832, or " in out
    assert "█" in out
    assert "over budget by" in out


def test_json_output_and_exit_code_when_it_fits(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            *QUESTION,
            "--max-model-len",
            "200001",
            "--kv-dtype",
            "fp8",
            "--max-num-seqs",
            "8",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["fits"] is True
    assert data["verdict"] == "fits"
    assert data["kv_bytes_per_token"] == 32 * 1024
    assert data["state_bytes_per_sequence"] == 48 * 3_207_168
    assert data["vllm_blocks"]["block_size_tokens"] == 1568
    assert data["budget_bytes"] == pytest.approx(0.98 * 32 * GIB, abs=1)
    assert set(data["basin"]) == {key for key, *_ in SEGMENTS}
    assert data["gpu_source"] == "--gpu"


def test_weights_override_and_svg_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "basin.svg"
    code = main(
        [
            "plan",
            *QUESTION,
            "--max-model-len",
            "200001",
            "--kv-dtype",
            "fp8",
            "--max-num-seqs",
            "8",
            "--weights",
            "22.07GiB",
            "--svg",
            str(target),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "weights             22.07 GiB (--weights)" in out
    root = ET.fromstring(target.read_text())
    assert root.tag.endswith("svg")
    assert "fits at 200001 tokens" in target.read_text()


def test_gguf_plan_without_gpu_is_sizes_only(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", smollm2_gguf(), "--max-model-len", "2048"])
    out = capsys.readouterr().out
    assert code == 0
    assert "KV at context  45.00 MiB for one sequence" in out
    assert "engine         llamacpp" in out
    assert "UNKNOWN (NO GPU MEMORY GIVEN" in out


def test_configured_model_and_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "smollm2-long", "--json"]) == 0  # the demo config
    data = json.loads(capsys.readouterr().out)
    assert data["context"] == 8192
    assert data["engine"] == "llamacpp"
    assert data["kv_bytes_at_context"] == 180 * 1024**2
    assert main(["plan", "--model", "nope"]) == 2
    assert "no model 'nope'" in capsys.readouterr().err
    assert main(["plan", "/no/such/path"]) == 2
    assert main(["plan", Q27, "--kv-dtype", "fp6"]) == 2
    assert "unknown dtype" in capsys.readouterr().err


def test_check_prints_a_plan_line_for_local_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "  plan:  weights 92.10 MiB, KV 22.50 KiB/token (f16), 45.00 MiB at 2,048 tokens" in out
    assert "180.00 MiB at 8,192 tokens" in out


def test_basin_adds_up_to_the_gpu() -> None:
    plan = make_plan(
        model("llama-3.1-8b"), PlanInputs(gpu_bytes=24 * GIB, utilization=0.9, max_model_len=8192)
    )
    parts = basin(plan)
    assert sum(parts.values()) == 24 * GIB
    assert parts["reserve"] == 24 * GIB - plan.budget_bytes  # type: ignore[operator]
    bar, legend = terminal_bar(plan, width=40)
    assert len(bar) == 42
    assert bar.startswith("[")
    assert bar.endswith("]")
    assert "weights 14.96 GiB" in legend
    ET.fromstring(svg(plan))  # well-formed
