"""Every startup log in tests/data/startup-logs against its ``.expected.json``.

Logs are read as bytes and decoded without newline translation, so tqdm's ``\\r`` redraws and
ANSI colour codes reach the parsers exactly as a backend printed them.

``.expected.json`` keys: ``code`` (null for a successful start; "exited" for a failure with no
known cause), ``evidence`` (the line as printed, ANSI codes removed, whitespace stripped),
``numbers``, and optionally ``summary_contains`` / ``fix_contains`` (substrings), ``receipt``
(see test_capacity.py) and ``fit_notices``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from modelswap.backends.diagnose import diagnose_exit, diagnose_text, fit_notices
from modelswap.backends.logtext import split_segments

LOGS = Path(__file__).resolve().parents[2] / "data" / "startup-logs"
CASES = sorted(LOGS.glob("*.log"))


def read_log(path: Path) -> str:
    return path.read_bytes().decode("utf-8")


def expected(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.with_suffix(".expected.json").read_text())
    return data


def test_the_corpus_is_complete() -> None:
    assert len(CASES) >= 20
    for path in CASES:
        assert path.with_suffix(".expected.json").is_file(), path.name
    codes = {expected(path)["code"] for path in CASES}
    assert codes >= {
        "utilization_guard",
        "kv_cache_too_small",
        "no_kv_cache_memory",
        "mamba_cache_blocks",
        "cuda_oom",
        "profiling_race",
        "port_in_use",
        "model_load_error",
        "exited",
        None,
    }
    # The formats the parsers must tolerate really are in the corpus.
    raw = b"".join(path.read_bytes() for path in CASES)
    assert b"\x1b[" in raw
    assert b"\r" in raw


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_diagnose_text_finds_the_root_cause(path: Path) -> None:
    want = expected(path)
    got = diagnose_text(read_log(path))
    if want["code"] in (None, "exited"):
        assert got is None
        return
    assert got is not None
    assert got.code == want["code"]
    assert got.evidence == want["evidence"]
    assert got.numbers == pytest.approx(want["numbers"])
    assert set(got.numbers) == set(want["numbers"])
    for part in want.get("summary_contains", []):
        assert part in got.summary
    for part in want.get("fix_contains", []):
        assert got.fix is not None
        assert part in got.fix
    # Never the wrapper printed after the root cause.
    assert got.evidence is not None
    assert "Engine core initialization failed" not in got.evidence
    assert "\x1b" not in got.evidence


@pytest.mark.parametrize(
    "path",
    [p for p in CASES if expected(p)["code"] is not None],
    ids=[p.stem for p in CASES if expected(p)["code"] is not None],
)
def test_diagnose_exit_agrees_on_the_code(path: Path) -> None:
    want = expected(path)
    # The supervisor's ring buffer splits on \r and \n before the diagnoser sees the tail.
    lines = split_segments(read_log(path))
    got = diagnose_exit(lines, 1, during="startup")
    assert got.code == want["code"]
    assert got.evidence == want["evidence"]
    assert got.summary.startswith("The backend exited with code 1 during startup.")
    assert got.numbers == pytest.approx({**want["numbers"], "returncode": 1.0})
    assert "See root cause above" not in got.summary
    assert "please check the stack trace above" not in got.summary


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_fit_notices(path: Path) -> None:
    assert fit_notices(read_log(path).splitlines()) == expected(path).get("fit_notices", [])
