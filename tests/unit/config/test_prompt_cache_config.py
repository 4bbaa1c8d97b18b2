"""``promptCache``: llama.cpp's slots kept across a swap (issue 30) — off unless switched on,
per model or for all; its disk budget and ceilings."""

from __future__ import annotations

import pytest

from modelswap.config import config_json_schema, load_config_text
from modelswap.config.resolved import PromptCacheSettings
from modelswap.errors import ConfigError

MODELS = (
    "models:\n"
    "  a:\n    cmd: server --port ${PORT}\n"
    "  b:\n    promptCache: true\n    cmd: server --port ${PORT}\n"
    "  c:\n    promptCache: false\n    cmd: server --port ${PORT}\n"
)


def test_off_unless_a_model_or_the_top_level_says() -> None:
    config = load_config_text(MODELS, environ={})
    assert {m: c.prompt_cache for m, c in config.models.items()} == {
        "a": False,
        "b": True,
        "c": False,
    }
    assert config.prompt_cache == PromptCacheSettings()
    on = load_config_text("promptCache: {enabled: true}\n" + MODELS, environ={})
    assert {m: c.prompt_cache for m, c in on.models.items()} == {"a": True, "b": True, "c": False}


def test_budget_and_ceilings() -> None:
    text = "promptCache: {diskBudget: 2GiB, saveTimeout: 3, restoreTimeout: 4.5}\n" + MODELS
    settings = load_config_text(text, environ={}).prompt_cache
    assert settings == PromptCacheSettings(False, 2 * 1024**3, 3.0, 4.5)


@pytest.mark.parametrize(
    ("top", "path"),
    [
        ("promptCache: {diskBudget: lots}", "promptCache.diskBudget"),
        ("promptCache: {saveTimeout: 0}", "promptCache.saveTimeout"),
        ("promptCache: {keep: true}", "promptCache.keep"),
    ],
)
def test_a_bad_value_names_the_key(top: str, path: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config_text(top + "\n" + MODELS, environ={})
    assert [p for p, _ in info.value.problems] == [path]


def test_the_schema_documents_it() -> None:
    schema = config_json_schema()
    assert schema["properties"]["promptCache"]["$ref"] == "#/$defs/RawPromptCache"
    top = schema["$defs"]["RawPromptCache"]["properties"]
    assert top["enabled"]["default"] is False
    assert set(top) == {"enabled", "diskBudget", "saveTimeout", "restoreTimeout"}
    model = schema["$defs"]["RawModel"]["properties"]["promptCache"]
    assert "restore" in model["description"]
