"""The JSON schema (``modelswap schema``) accepts every config ``check`` accepts (issue 17):
each fixture under tests/data/llamaswap/ and each YAML example of README.md and docs/*.md that
loads is validated
with a real JSON Schema validator; and it still catches typos and bad sizes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from modelswap.config import config_json_schema, load_config_text
from modelswap.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
FIXTURES = sorted((REPO / "tests" / "data" / "llamaswap").rglob("*.yaml"))
ENV = {
    "FAKE_PYTHON": "/usr/bin/python3",
    "FAKE_BACKEND": "/srv/fake.py",
    "API_KEY_1": "sk-from-env",
    "PEER_API_KEY": "peer-key",
    "LLAMA_SWAP_KEY": "sk-readme",
    "GPU_BOX_KEY": "gpu-box-key",
    "HOME_DIR": "/home/me",
    "FAKE_GLOBAL_TTL": "120",
    "FRONT_KEY": "front-key",
    "BOX2_KEY": "box2-key",
}


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = config_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def errors(validator: jsonschema.Draft202012Validator, data: Any) -> list[str]:
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(data)]


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: str(p.relative_to(p.parents[1])))
def test_every_fixture_is_valid(validator: jsonschema.Draft202012Validator, path: Path) -> None:
    text = path.read_text()
    load_config_text(text, environ=ENV)  # check accepts it ...
    assert errors(validator, yaml.safe_load(text)) == []  # ... and so does the schema


def readme_configs() -> list[str]:
    """YAML blocks of README.md and the docs/ pages that are whole configs check accepts."""
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    text = "\n".join(page.read_text() for page in pages)
    found = []
    for block in re.findall(r"```yaml\n(.*?)```", text, re.S):
        try:
            data = yaml.safe_load(block)
            load_config_text(block, environ=ENV)
        except (ConfigError, yaml.YAMLError):
            continue
        if isinstance(data, dict):
            found.append(block)
    return found


def test_readme_examples_are_valid(validator: jsonschema.Draft202012Validator) -> None:
    configs = readme_configs()
    assert len(configs) >= 3
    for block in configs:
        assert errors(validator, yaml.safe_load(block)) == [], block


@pytest.mark.parametrize(
    "text",
    [
        "modles: {}\n",  # a typo at the top level
        "models:\n  m: {cmd: x, tll: 5}\n",  # a typo in a model
        "resources: {gpu0: 9 gigs}\nmodels: {}\n",
        "resources: {gpu0: GiB}\nmodels: {}\n",
        "models:\n  m: {cmd: x, uses: {gpu0: '-1GiB'}}\n",
    ],
)
def test_the_schema_still_refuses(validator: jsonschema.Draft202012Validator, text: str) -> None:
    assert errors(validator, yaml.safe_load(text)) != []


@pytest.mark.parametrize("size", ["9GiB", "512 MiB", "1.5GB", "1024", "32gib", "8k", 34359738368])
def test_sizes(validator: jsonschema.Draft202012Validator, size: object) -> None:
    assert errors(validator, {"resources": {"gpu0": size}}) == []
