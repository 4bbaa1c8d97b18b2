"""Fixtures for the fit planner: real published configs (tests/data/planner/*/config.json)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelswap.planner.hf import read_hf_folder
from modelswap.planner.shape import ModelShape

DATA = Path(__file__).resolve().parents[2] / "data"
PLANNER = DATA / "planner"
LOGS = DATA / "startup-logs"
GIB = 1024**3
MIB = 1024**2
KIB = 1024


def model(name: str, **kwargs: object) -> ModelShape:
    return read_hf_folder(PLANNER / name, **kwargs)  # type: ignore[arg-type]


@pytest.fixture
def q27() -> ModelShape:
    """Qwen3.5/3.6-27B: 64 layers, 16 full attention (4 KV heads × 256), 48 GDN."""
    return model("qwen3.6-27b")
