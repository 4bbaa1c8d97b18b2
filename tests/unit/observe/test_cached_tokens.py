"""Cached prompt tokens (observe/usage.cached_of, UsageTracker): what each backend reports."""

from __future__ import annotations

import json

import pytest

from modelswap.observe.usage import UsageTracker, cached_of


@pytest.mark.parametrize(
    ("data", "cached"),
    [
        ({"usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}}, 4),
        ({"usage": {"input_tokens": 9, "cache_read_input_tokens": 6}}, 6),  # Anthropic
        ({"timings": {"prompt_n": 2, "cache_n": 30}}, 30),  # llama.cpp
        ({"message": {"usage": {"input_tokens": 3, "cache_read_input_tokens": 2}}}, 2),
        ({"usage": {"prompt_tokens": 9}}, None),  # said nothing: unknown, not 0
        ({"usage": {"prompt_tokens_details": {"cached_tokens": -1}}}, None),
        ({"timings": {"cache_n": True}}, None),
        ([], None),
    ],
)
def test_cached_of(data: object, cached: int | None) -> None:
    assert cached_of(data) == cached


def test_the_tracker_reads_cached_tokens_from_a_body_and_a_stream() -> None:
    body = {"usage": {"prompt_tokens": 9, "completion_tokens": 2}, "timings": {"cache_n": 7}}
    tracker = UsageTracker(streamed=False)
    tracker.feed(json.dumps(body).encode())
    tracker.finish()
    assert (tracker.prompt_tokens, tracker.cached_tokens) == (9, 7)

    usage = {
        "prompt_tokens": 5,
        "completion_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 3},
    }
    chunk = json.dumps({"choices": [], "usage": usage})
    stream = UsageTracker(streamed=True)
    stream.feed(
        f'data: {{"choices":[{{"delta":{{"content":"hi"}}}}]}}\n\ndata: {chunk}\n\n'.encode()
    )
    stream.finish()
    assert (stream.prompt_tokens, stream.cached_tokens) == (5, 3)
