"""The client-key targets of the benchmark suite (issue 40) run and answer right: modelswap
with keys and no quota, and with keys that each have a quota on every limit, beside modelswap
without keys in one run (``bench/suite.py --quick``, latency and throughput only). Timings are
not asserted; the load presents a key, so a refused request would be a wrong answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TARGETS = ("direct", "modelswap", "modelswap-keys", "modelswap-quota")

pytestmark = pytest.mark.e2e


def test_keyed_targets_answer_every_request_right(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "suite.py"), "--quick", "--client", "aiohttp",
         "--targets", ",".join(TARGETS), "--scenarios", "latency,throughput",
         "--json", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=200, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["problems"] == []
    for name in TARGETS:
        assert results["targets"][name]["skipped"] is None
    assert "apiKeys without a quota" in results["targets"]["modelswap-keys"]["description"]
    assert "quota on every limit" in results["targets"]["modelswap-quota"]["description"]
    for case in ("c32", "c128"):
        for name in TARGETS:
            cell = results["scenarios"]["throughput"][case][name]
            assert cell["checked"] > 0, cell
            assert cell["failed"] == 0, cell["errors"]
            if name != "direct":
                assert cell["metrics"]["cpu_per_request"][0] > 0
    for name in TARGETS:
        assert results["scenarios"]["latency"]["c1"][name]["failed"] == 0
