"""The benchmark suite still runs, and every target answers every scenario correctly.

``bench/suite.py --quick`` against direct, the python floor and modelswap (no nginx, no
LiteLLM): a few seconds. Timings are not asserted — only that each scenario produced figures
for each target, that every answer was checked (status, text, chunk count and order) and right,
and that each of the issue's goals got a verdict.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGETS = ("direct", "floor", "modelswap")

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("bench") / "results.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "suite.py"), "--quick",
         "--targets", ",".join(TARGETS), "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=100, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "### Goals" in done.stdout
    return json.loads(out.read_text())


def answered(cell: dict) -> None:
    assert cell["checked"] > 0, cell
    assert cell["failed"] == 0, cell["errors"]


def test_every_answer_was_right(results: dict) -> None:
    assert results["problems"] == []
    for name in TARGETS:
        assert results["targets"][name]["skipped"] is None


def test_latency_and_throughput(results: dict) -> None:
    latency = results["scenarios"]["latency"]["c1"]
    for name in TARGETS:
        answered(latency[name])
        assert latency[name]["metrics"]["p50"][0] > 0
        assert "added_p50" in latency[name]["metrics"]
    for case in ("c32", "c128"):
        for name in TARGETS:
            cell = results["scenarios"]["throughput"][case][name]
            answered(cell)
            assert cell["metrics"]["rps"][0] > 0


def test_streams_relay_every_chunk(results: dict) -> None:
    streams = results["scenarios"]["streams"]
    for mode in ("paced", "unpaced"):
        for concurrency in (1, 32, 128):
            for name in TARGETS:
                cell = streams[f"{mode} c{concurrency}"][name]
                answered(cell)
                assert cell["checked"] == concurrency  # one check per stream
                assert cell["metrics"]["chunks_per_s"][0] > 0
                assert cell["metrics"]["ttfc_p50"][0] > 0
                if name != "direct":
                    assert cell["metrics"]["cpu_per_chunk"][0] >= 0


def test_large_bodies_arrive_whole(results: dict) -> None:
    for case in ("1 MiB", "16 MiB"):
        for name in TARGETS:
            cell = results["scenarios"]["bodies"][case][name]
            answered(cell)  # the answer names the length of the text that arrived
            if name != "direct":
                assert cell["metrics"]["peak_rss"][0] > 0


def test_cold_swap_and_footprint(results: dict) -> None:
    cold = results["scenarios"]["cold"]["fake backend"]
    answered(cold["direct"])
    answered(cold["modelswap"])
    assert cold["direct"]["metrics"]["healthy"][0] > 0
    assert "share" in cold["modelswap"]["metrics"]
    rss = results["scenarios"]["footprint"]["rss"]
    for name in ("floor", "modelswap"):
        assert rss[name]["metrics"]["idle"][0] > 0
        assert rss[name]["metrics"]["load_peak"][0] > 0
        assert "growth" in rss[name]["metrics"]
        answered(results["scenarios"]["footprint"]["runs"][name])


def test_every_goal_got_a_verdict(results: dict) -> None:
    verdicts = {g["goal"]: g["verdict"] for g in results["goals"]}
    assert len(verdicts) >= 20
    for goal, verdict in verdicts.items():
        if "LiteLLM" in goal:
            assert verdict == "n/a", goal  # LiteLLM is not part of the smoke run
        else:
            assert verdict in ("pass", "FAIL"), goal
