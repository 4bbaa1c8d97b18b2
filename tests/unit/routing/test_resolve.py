"""Did-you-mean suggestions: useful for typos, bounded for hostile names."""

from __future__ import annotations

from modelswap.routing.resolve import close_names

KNOWN = ["qwen2.5-coder", "llama-3.1-8b", "smollm2"]


def test_a_typo_gets_its_model() -> None:
    assert close_names("qwen2.5-codr", KNOWN) == ["qwen2.5-coder"]


def test_a_name_longer_than_any_model_name_gets_no_suggestion() -> None:
    # difflib's cost is the product of the lengths: a 1 MB name must not reach it.
    assert close_names("smollm2" + "x" * 1_000_000, KNOWN) == []


def test_a_configured_name_over_the_limit_is_never_suggested() -> None:
    assert close_names("a" * 10, ["a" * 300]) == []
