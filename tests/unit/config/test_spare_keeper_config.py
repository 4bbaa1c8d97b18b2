"""``spareKeeper``: one keeper started ahead of the next backend start (on unless switched off)."""

from __future__ import annotations

import textwrap

import pytest

from modelswap.config import config_json_schema, load_config_text
from modelswap.errors import ConfigError

MODELS = "models:\n  m:\n    cmd: server --port ${PORT}\n"


def test_on_unless_switched_off() -> None:
    assert load_config_text(MODELS, environ={}).spare_keeper is True
    off = load_config_text("spareKeeper: false\n" + MODELS, environ={})
    assert off.spare_keeper is False


def test_a_bad_value_names_the_key() -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(textwrap.dedent("spareKeeper: sometimes\n") + MODELS, environ={})
    assert [path for path, _ in info.value.problems] == ["spareKeeper"]


def test_the_schema_documents_it() -> None:
    prop = config_json_schema()["properties"]["spareKeeper"]
    assert prop["type"] == "boolean"
    assert prop["default"] is True
