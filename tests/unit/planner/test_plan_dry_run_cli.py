"""``modelswap plan --config FILE MODEL`` (the load dry run offline) and ``--together``, in
process: what earlier runs left in stats.json, the state ``--running`` names, the exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from tests.e2e.conftest import smollm2_gguf

from modelswap.cli import main

GIB = 1024**3


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(f"stateDir: {tmp_path / 'state'}\n{text}")
    return path


def stats(tmp_path: Path, models: dict[str, dict[str, object]]) -> None:
    folder = tmp_path / "state"
    folder.mkdir(exist_ok=True)
    (folder / "stats.json").write_text(json.dumps({"version": 1, "models": models}))


TWO = "models:\n  a: {cmd: 'srv --port ${PORT}'}\n  b: {cmd: 'srv --port ${PORT}'}\n"


def test_the_dry_run_reads_what_earlier_runs_measured(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config(tmp_path, TWO)
    stats(
        tmp_path,
        {
            "a": {
                "start_seconds": [4.0, 6.0, 5.0],
                "peak_bytes": {"ram": 3 * GIB},
                "run_peak_bytes": {"ram": [2 * GIB, 3 * GIB]},
            }
        },
    )
    assert main(["plan", "--config", str(path), "a", "--running", "b", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [(e["model"], e["why"]) for e in data["evict"]] == [
        ("b", "exclusive: one model at a time")
    ]
    assert data["time"]["start_seconds"] == 5.0
    assert data["time"]["start_source"] == "measured"
    ram = data["memory"]["resources"]["ram"]
    assert (ram["source"], ram["runs"], ram["bytes"]) == ("measured", 2, int(2.5 * GIB))

    assert main(["plan", "--config", str(path), "a"]) == 0
    text = capsys.readouterr().out
    assert "a fits now" in text
    assert "evicts nothing" in text
    assert "start 5.0 (measured; " in text


def test_a_model_measured_over_its_budget_does_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config(tmp_path, "resources: {ram: 4GiB}\n" + TWO)
    stats(tmp_path, {"a": {"peak_bytes": {"ram": 6 * GIB}, "run_peak_bytes": {"ram": [6 * GIB]}}})
    assert main(["plan", "--config", str(path), "a"]) == 1
    out = capsys.readouterr().out
    assert "fits this machine: NO" in out
    assert "problem: ram: needs 6.00 GiB (measured), more than the whole budget of 4.00 GiB" in out


def test_the_planner_estimates_a_model_with_a_local_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gguf = smollm2_gguf()
    path = config(
        tmp_path,
        f"resources: {{gpu0: 1GiB}}\nmodels:\n  s: {{cmd: 'llama-server -m {gguf} -c 2048 "
        "--port ${PORT}'}\n",
    )
    assert main(["plan", "--config", str(path), "s", "--gpu", "8GiB", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    gpu = data["memory"]["resources"]["gpu0"]
    planner = data["memory"]["planner"]
    assert gpu["source"] == "planner"
    assert gpu["bytes"] == planner["total_bytes"]
    assert planner["kv_bytes"] == 45 * 1024**2  # the KV llama.cpp logs for SmolLM2 at -c 2048
    assert planner["verdict"] == "fits"
    assert data["fits_machine"]["fits"] is True


def test_bad_input_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = config(tmp_path, TWO)
    assert main(["plan", "--config", str(path), "a", "--running", "nope"]) == 2
    assert "--running: no model 'nope'" in capsys.readouterr().err
    budgets = config(
        tmp_path,
        "resources: {gpu0: 24GiB}\nmodels:\n"
        + "".join(
            f"  {m}: {{cmd: 'srv --port ${{PORT}}', uses: {{gpu0: 10GiB}}}}\n" for m in "abc"
        ),
    )
    assert main(["plan", "--config", str(budgets), "--together", "--as", "groups"]) == 2
    assert "overlap" in capsys.readouterr().err


def test_together_prints_yaml_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = config(
        tmp_path,
        TWO + "  c: {cmd: 'srv --port ${PORT}'}\ngroups:\n  g: {swap: false, members: [a, b]}\n",
    )
    assert main(["plan", "--config", str(path), "--together"]) == 0
    out = capsys.readouterr().out
    assert "  {a, b}\n  {c}\n" in out
    assert "c evicts a: group (ungrouped) is exclusive" in out
    printed = out[out.index("groups:") :]
    assert yaml.safe_load(printed)["groups"]["together-1"]["members"] == ["a", "b"]
