"""The worked configurations of docs/sharing.md load as written (a model section added, the
keys' environment variables and files provided) and mean what the page says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modelswap.config import Config, load_config_text
from modelswap.config.resolved import Quota

DOC = Path(__file__).resolve().parents[3] / "docs" / "sharing.md"
MODEL = "models:\n  m:\n    cmd: srv --port ${PORT}\n"


def blocks() -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)


def load_block(text: str, tmp_path: Path) -> Config:
    secrets = tmp_path / "secrets"
    secrets.mkdir(exist_ok=True)
    for name in re.findall(r"/run/secrets/modelswap/(\w+)", text):
        (secrets / name).write_text(f"sk-{name}-0123456789\n")
    text = text.replace("/run/secrets/modelswap/", f"{secrets}/")
    environ = {name: f"sk-{name.lower()}-0123456789" for name in re.findall(r"keyEnv: (\w+)", text)}
    return load_config_text(text + "\n" + MODEL, environ=environ)


def test_the_page_has_its_three_configs() -> None:
    assert len(blocks()) == 3


@pytest.mark.parametrize("index", [0, 1, 2])
def test_each_worked_config_loads(index: int, tmp_path: Path) -> None:
    config = load_block(blocks()[index], tmp_path)
    assert config.api_keys


def test_the_household_nightly_job_is_batch_and_the_phone_is_limited(tmp_path: Path) -> None:
    config = load_block(blocks()[1], tmp_path)
    keys = {k.name: k for k in config.api_keys}
    assert keys["nightly"].priority == "batch"
    assert keys["nightly"].quota == Quota(concurrency=2, tokens_per_day=2_000_000)
    assert keys["phone"].quota == Quota(concurrency=1, requests_per_minute=20)
    assert keys["ana"].quota == Quota(concurrency=4)  # keyDefaults
    assert config.scheduling.max_queue_wait == 120


def test_the_teams_agents_weigh_three_and_the_harness_has_no_rate_limit(tmp_path: Path) -> None:
    config = load_block(blocks()[2], tmp_path)
    keys = {k.name: k for k in config.api_keys}
    assert (keys["agents"].priority, keys["agents"].weight) == ("batch", 3.0)
    assert keys["evals"].quota == Quota(200, 0, 0, 50_000_000)
    assert keys["dev1"].quota == Quota(6, 60, 200_000, 0)
    assert keys["lead"].weight == 2.0
