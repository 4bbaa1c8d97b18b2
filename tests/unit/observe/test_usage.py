"""UsageTracker and request_usage_injection: token usage read from relayed bytes, and the
injected usage-only chunk stripped byte-exactly, however the stream is cut into chunks."""

from __future__ import annotations

import json
from collections.abc import Iterable

import pytest

from modelswap.observe.usage import (
    MAX_BODY,
    UsageTracker,
    request_usage_injection,
    usage_of,
)


def sse(payload: object) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def chunk(**extra: object) -> dict[str, object]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", **extra}


ROLE = sse(chunk(choices=[{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]))
TOKENS = b"".join(
    sse(chunk(choices=[{"index": 0, "delta": {"content": f"tok{i} "}, "finish_reason": None}]))
    for i in range(3)
)
FINISH = sse(chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "length"}]))
USAGE_ONLY = sse(
    chunk(choices=[], usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15})
)
DONE = sse("[DONE]")
KEEPALIVE = b": keepalive\n\n"

# What an OpenAI-compatible server sends with stream_options.include_usage.
OPENAI_STREAM = ROLE + TOKENS + FINISH + USAGE_ONLY + DONE
# The same with a comment and an `event:` line (both legal SSE) around the usage chunk.
DECORATED_STREAM = (
    ROLE + KEEPALIVE + TOKENS + FINISH + b"event: message\n" + USAGE_ONLY + KEEPALIVE + DONE
)
DECORATED_USAGE_EVENT = b"event: message\n" + USAGE_ONLY
# llama.cpp puts `timings` on the last chunk; with include_usage the usage chunk follows.
LLAMACPP_TIMINGS = {"prompt_n": 9, "prompt_ms": 5.0, "predicted_n": 4, "predicted_ms": 20.0}
LLAMACPP_FINISH = sse(
    chunk(
        choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}],
        timings=LLAMACPP_TIMINGS,
    )
)
LLAMACPP_USAGE = sse(
    chunk(
        choices=[],
        usage={"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34},
        timings={**LLAMACPP_TIMINGS, "prompt_n": 1},  # cached prompt: only 1 token processed
    )
)
ANTHROPIC_STREAM = (
    b"event: message_start\n"
    + sse(
        {
            "type": "message_start",
            "message": {"id": "msg_1", "usage": {"input_tokens": 25, "output_tokens": 1}},
        }
    )
    + b"event: content_block_delta\n"
    + sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text", "text": "Hi"}})
    + b"event: message_delta\n"
    + sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 15},
        }
    )
    + b"event: message_stop\n"
    + sse({"type": "message_stop"})
)


def relay(tracker: UsageTracker, pieces: Iterable[bytes]) -> bytes:
    """What the client receives: every feed() result, then finish()."""
    out = b"".join(tracker.feed(piece) for piece in pieces)
    return out + tracker.finish()


def tokens(tracker: UsageTracker) -> tuple[int | None, int | None]:
    return tracker.prompt_tokens, tracker.completion_tokens


def two_way_splits(data: bytes) -> Iterable[list[bytes]]:
    for cut in range(len(data) + 1):
        yield [data[:cut], data[cut:]]


# ------------------------------------------------------------------------------ usage_of


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}}, (3, 5)),
        ({"usage": {"input_tokens": 4, "output_tokens": 9}}, (4, 9)),  # Anthropic
        ({"usage": {"prompt_tokens": 7}}, (7, None)),  # embeddings: prompt only
        ({"usage": {"output_tokens": 15}}, (None, 15)),  # Anthropic message_delta
        ({"timings": {"prompt_n": 11, "predicted_n": 6}}, (11, 6)),  # llama.cpp only
        ({"usage": {}, "timings": {"prompt_n": 11, "predicted_n": 6}}, (11, 6)),  # fallback
        ({"usage": None, "timings": {"prompt_n": 2, "predicted_n": 1}}, (2, 1)),
        (  # usage wins over timings (timings count only the non-cached prompt)
            {"usage": {"prompt_tokens": 30, "completion_tokens": 4}, "timings": {"prompt_n": 1}},
            (30, 4),
        ),
        ({"message": {"usage": {"input_tokens": 25, "output_tokens": 1}}}, (25, 1)),
        ({"usage": {"prompt_tokens": 0, "completion_tokens": 0}}, (0, 0)),
        ({"usage": {"prompt_tokens": -1, "completion_tokens": True}}, None),
        ({"usage": {"prompt_tokens": "3", "completion_tokens": 1.5}}, None),
        ({"choices": []}, None),
        ({}, None),
        ([{"usage": {"prompt_tokens": 1}}], None),
        ("usage", None),
        (None, None),
    ],
)
def test_usage_of(data: object, expected: tuple[int | None, int | None] | None) -> None:
    assert usage_of(data) == expected


# ------------------------------------------------------------------ non-streamed bodies

NON_STREAM_CASES = [
    pytest.param(
        {
            "object": "chat.completion",
            "choices": [{"message": {"role": "assistant", "content": "hi"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
        },
        (10, 2),
        id="openai-usage",
    ),
    pytest.param(
        {
            "choices": [{"message": {"content": "hi"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 2},
            "timings": {"prompt_n": 1, "predicted_n": 2},
        },
        (10, 2),
        id="llamacpp-usage-and-timings",
    ),
    pytest.param(
        {"content": "hi", "timings": {"prompt_n": 8, "predicted_n": 3}},
        (8, 3),
        id="llamacpp-timings-only",
    ),
    pytest.param(
        {"type": "message", "usage": {"input_tokens": 14, "output_tokens": 6}},
        (14, 6),
        id="anthropic",
    ),
    pytest.param({"choices": [{"message": {"content": "hi"}}]}, (None, None), id="no-usage"),
    pytest.param({"error": {"message": "bad"}}, (None, None), id="error-body"),
]


@pytest.mark.parametrize(("body", "expected"), NON_STREAM_CASES)
def test_non_streamed_body_any_chunking(
    body: dict[str, object], expected: tuple[int | None, int | None]
) -> None:
    raw = json.dumps(body).encode()
    for pieces in [[raw], *two_way_splits(raw), [raw[i : i + 1] for i in range(len(raw))]]:
        tracker = UsageTracker(streamed=False, strip_usage_chunk=True)
        assert not tracker.strips  # only streams are ever stripped
        assert relay(tracker, pieces) == raw
        assert tokens(tracker) == expected


@pytest.mark.parametrize(
    "raw",
    [
        b'{"usage": {"prompt_tokens": 3, "completion_tokens": ',  # truncated
        b'{"usage": \xff\xfe}',
        b"",
        b'not json at all, but it says "usage" and "timings"',
    ],
)
def test_non_streamed_unreadable_body_has_no_usage(raw: bytes) -> None:
    tracker = UsageTracker(streamed=False)
    assert relay(tracker, [raw]) == raw
    assert tokens(tracker) == (None, None)


def test_non_streamed_body_is_read_only_up_to_max_body() -> None:
    padding = "x" * MAX_BODY
    raw = json.dumps({"content": padding, "usage": {"prompt_tokens": 1}}).encode()
    tracker = UsageTracker(streamed=False)
    assert relay(tracker, [raw[: len(raw) // 2], raw[len(raw) // 2 :]]) == raw
    assert tokens(tracker) == (None, None)  # usage beyond the first MAX_BODY bytes


# -------------------------------------------------------------------------------- streams

STREAM_CASES = [
    pytest.param(OPENAI_STREAM, USAGE_ONLY, (12, 3), id="openai-include-usage"),
    pytest.param(DECORATED_STREAM, DECORATED_USAGE_EVENT, (12, 3), id="comments-and-event-line"),
    pytest.param(
        ROLE + TOKENS + LLAMACPP_FINISH + LLAMACPP_USAGE + DONE,
        LLAMACPP_USAGE,
        (30, 4),
        id="llamacpp-timings-then-usage",
    ),
    pytest.param(
        ROLE + TOKENS + FINISH + USAGE_ONLY[:-2],  # the stream ends without the blank line
        USAGE_ONLY[:-2],
        (12, 3),
        id="usage-chunk-unterminated-at-eof",
    ),
    pytest.param(
        OPENAI_STREAM.replace(b"\n", b"\r\n"),
        USAGE_ONLY.replace(b"\n", b"\r\n"),
        (12, 3),
        id="crlf-events",
    ),
]


@pytest.mark.parametrize(("stream", "usage_event", "expected"), STREAM_CASES)
def test_stripping_removes_exactly_the_usage_event_at_every_split(
    stream: bytes, usage_event: bytes, expected: tuple[int, int]
) -> None:
    assert stream.count(usage_event) == 1
    wanted = stream.replace(usage_event, b"")
    splits = [[stream], *two_way_splits(stream), [stream[i : i + 1] for i in range(len(stream))]]
    for pieces in splits:
        tracker = UsageTracker(streamed=True, strip_usage_chunk=True)
        assert tracker.strips
        out = relay(tracker, pieces)
        assert out == wanted, [len(p) for p in pieces]
        assert tokens(tracker) == expected


def test_stripping_at_every_three_way_split() -> None:
    stream = FINISH + USAGE_ONLY + DONE
    wanted = FINISH + DONE
    for a in range(len(stream) + 1):
        for b in range(a, len(stream) + 1, 7):
            tracker = UsageTracker(streamed=True, strip_usage_chunk=True)
            assert relay(tracker, [stream[:a], stream[a:b], stream[b:]]) == wanted, (a, b)
            assert tokens(tracker) == (12, 3)


@pytest.mark.parametrize(("stream", "usage_event", "expected"), STREAM_CASES)
def test_without_stripping_the_stream_is_relayed_unchanged_at_every_split(
    stream: bytes, usage_event: bytes, expected: tuple[int, int]
) -> None:
    splits = [[stream], *two_way_splits(stream), [stream[i : i + 1] for i in range(len(stream))]]
    for pieces in splits:
        tracker = UsageTracker(streamed=True, strip_usage_chunk=False)
        assert not tracker.strips
        # Not stripping: every chunk goes on at once, exactly as it came.
        assert [tracker.feed(p) for p in pieces] == pieces
        assert tracker.finish() == b""
        assert tokens(tracker) == expected


def test_anthropic_stream_reads_input_and_output_tokens() -> None:
    for pieces in [[ANTHROPIC_STREAM], *two_way_splits(ANTHROPIC_STREAM)]:
        tracker = UsageTracker(streamed=True)
        assert relay(tracker, pieces) == ANTHROPIC_STREAM
        assert tokens(tracker) == (25, 15)


def test_llamacpp_stream_without_usage_chunk_falls_back_to_timings() -> None:
    stream = ROLE + TOKENS + LLAMACPP_FINISH + DONE
    for strip in (False, True):
        for pieces in [[stream], *two_way_splits(stream)]:
            tracker = UsageTracker(streamed=True, strip_usage_chunk=strip)
            assert relay(tracker, pieces) == stream  # nothing usage-only to strip
            assert tokens(tracker) == (9, 4)


def test_usage_on_chunks_with_choices_is_never_stripped() -> None:
    # vLLM's continuous_usage_stats: usage on every chunk that also carries content.
    with_usage = b"".join(
        sse(
            chunk(
                choices=[{"index": 0, "delta": {"content": "x"}, "finish_reason": None}],
                usage={"prompt_tokens": 5, "completion_tokens": n},
            )
        )
        for n in range(1, 4)
    )
    stream = ROLE + with_usage + DONE
    for pieces in [[stream], *two_way_splits(stream)]:
        tracker = UsageTracker(streamed=True, strip_usage_chunk=True)
        assert relay(tracker, pieces) == stream
        assert tokens(tracker) == (5, 3)


@pytest.mark.parametrize("strip", [False, True])
def test_stream_without_usage_has_none(strip: bool) -> None:
    stream = ROLE + TOKENS + FINISH + DONE
    for pieces in [[stream], *two_way_splits(stream)]:
        tracker = UsageTracker(streamed=True, strip_usage_chunk=strip)
        assert relay(tracker, pieces) == stream
        assert tokens(tracker) == (None, None)


MALFORMED = [
    b'data: {"choices":[],"usage":{"prompt_tokens":1,\n\n',  # cut JSON
    b'data: {"choices":[],"usage": nope}\n\n',
    b'data: \xff\xfe "usage"\n\n',  # not UTF-8
    b'event: x\ndata: ["usage", "timings"]\n\n',  # JSON, not an object
    b'data: "usage"\n\n',
]


@pytest.mark.parametrize("strip", [False, True])
@pytest.mark.parametrize("bad", MALFORMED)
def test_malformed_events_are_passed_on_untouched(bad: bytes, strip: bool) -> None:
    stream = ROLE + bad + FINISH + DONE
    for pieces in [[stream], *two_way_splits(stream)]:
        tracker = UsageTracker(streamed=True, strip_usage_chunk=strip)
        assert relay(tracker, pieces) == stream
        assert tokens(tracker) == (None, None)


def test_malformed_event_before_the_usage_chunk_does_not_hide_it() -> None:
    stream = ROLE + MALFORMED[0] + FINISH + USAGE_ONLY + DONE
    for pieces in [[stream], *two_way_splits(stream)]:
        tracker = UsageTracker(streamed=True, strip_usage_chunk=True)
        assert relay(tracker, pieces) == stream.replace(USAGE_ONLY, b"")
        assert tokens(tracker) == (12, 3)


def test_stripping_holds_back_only_an_incomplete_event() -> None:
    tracker = UsageTracker(streamed=True, strip_usage_chunk=True)
    assert tracker.feed(ROLE) == ROLE  # a complete event goes on at once
    assert tracker.feed(TOKENS[:10]) == b""  # half an event waits for the rest
    assert tracker.feed(TOKENS[10:]) == TOKENS
    assert tracker.feed(USAGE_ONLY) == b""
    assert tracker.feed(DONE) == DONE
    assert tracker.finish() == b""


def test_crlf_framed_stream_is_not_held_back_when_stripping() -> None:
    # SSE allows CRLF line endings (sse-starlette, used by llama-cpp-python, sends them).
    # A complete event must reach the client at once, not at the end of the whole stream.
    tracker = UsageTracker(streamed=True, strip_usage_chunk=True)
    first = ROLE.replace(b"\n", b"\r\n")
    assert tracker.feed(first) == first


def test_crlf_framed_usage_chunk_is_counted_and_stripped() -> None:
    stream = (ROLE + TOKENS + FINISH + USAGE_ONLY + DONE).replace(b"\n", b"\r\n")
    usage_event = USAGE_ONLY.replace(b"\n", b"\r\n")
    tracker = UsageTracker(streamed=True, strip_usage_chunk=True)
    assert relay(tracker, [stream]) == stream.replace(usage_event, b"")
    assert tokens(tracker) == (12, 3)
    plain = UsageTracker(streamed=True)
    assert relay(plain, [stream]) == stream
    assert tokens(plain) == (12, 3)


# ------------------------------------------------------------------ request_usage_injection


def body(**fields: object) -> bytes:
    data = {"model": "m", "messages": [{"role": "user", "content": "hé"}], **fields}
    return json.dumps(data, ensure_ascii=False).encode()


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(body(stream=True, stream_options={"include_usage": True}), id="already-set"),
        pytest.param(
            body(stream=True, stream_options={"include_usage": True, "x": 1}), id="already-set+"
        ),
        pytest.param(body(), id="no-stream"),
        pytest.param(body(stream=False), id="stream-false"),
        pytest.param(body(stream="true"), id="stream-string"),
        pytest.param(body(stream=1), id="stream-one"),
        pytest.param(body(stream=True, stream_options="yes"), id="options-string"),
        pytest.param(body(stream=True, stream_options=[]), id="options-list"),
        pytest.param(body(stream=True, stream_options=True), id="options-bool"),
        pytest.param(b'{"stream": true', id="bad-json"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
        pytest.param(b'[{"stream": true}]', id="array"),
        pytest.param(b"", id="empty"),
    ],
)
def test_request_usage_injection_leaves_these_alone(raw: bytes) -> None:
    assert request_usage_injection(raw) is None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (None, {"include_usage": True}),
        ({}, {"include_usage": True}),
        ({"include_usage": False}, {"include_usage": True}),
        (
            {"continuous_usage_stats": True, "other": [1, 2]},
            {"continuous_usage_stats": True, "other": [1, 2], "include_usage": True},
        ),
    ],
)
def test_request_usage_injection_sets_include_usage_and_keeps_the_rest(
    options: dict[str, object] | None, expected: dict[str, object]
) -> None:
    fields: dict[str, object] = {"stream": True, "max_tokens": 7, "temperature": 0}
    if options is not None:
        fields["stream_options"] = options
    original = json.loads(body(**fields))
    injected = request_usage_injection(body(**fields))
    assert injected is not None
    data = json.loads(injected)
    assert data["stream_options"] == expected
    assert {k: v for k, v in data.items() if k != "stream_options"} == {
        k: v for k, v in original.items() if k != "stream_options"
    }
    assert "hé".encode() in injected  # not re-escaped to \\u00e9


def test_request_usage_injection_with_explicit_null_options() -> None:
    injected = request_usage_injection(b'{"model":"m","stream":true,"stream_options":null}')
    assert injected is not None
    assert json.loads(injected) == {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_request_usage_injection_with_the_parsed_body_splices_without_re_serialising() -> None:
    raw = b'  {"model": "m", "stream": true, "messages": [{"content": "h\\u00e9"}]}'
    injected = request_usage_injection(raw, json.loads(raw))
    assert injected is not None
    assert injected.endswith(raw[3:])  # the client's bytes, untouched (escapes kept)
    assert json.loads(injected)["stream_options"] == {"include_usage": True}
    assert request_usage_injection(raw, {"model": "m"}) is None  # not streamed


def test_a_usage_event_without_choices_is_never_stripped() -> None:
    # Only the chunk modelswap asked for (``choices: []`` + usage) may go; an event that
    # carries usage but no ``choices`` key at all (Anthropic's message_delta, a backend's own
    # final event) is the answer's, and reaches the client whole.
    anthropic = sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 7},
        }
    )
    no_choices = sse({"id": "x", "usage": {"prompt_tokens": 2, "completion_tokens": 5}})
    for event in (anthropic, no_choices):
        stream = FINISH + event + DONE
        tracker = UsageTracker(streamed=True, strip_usage_chunk=True)
        assert relay(tracker, [stream]) == stream


def test_usage_tracker_notices_the_first_generated_text() -> None:
    tracker = UsageTracker(streamed=True)
    role_only = b'data: {"choices":[{"delta":{"role":"assistant","content":null}}]}\n\n'
    empty = b'data: {"choices":[{"delta":{"content":""}}]}\n\n'
    tracker.feed(role_only + empty)
    assert not tracker.saw_text  # no token yet: the TTFT clock still runs
    tracker.feed(b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n')
    assert tracker.saw_text
    anthropic = UsageTracker(streamed=True)
    anthropic.feed(b'event: content_block_delta\ndata: {"delta":{"type":"text_delta","text":"A"}}')
    assert anthropic.saw_text


@pytest.mark.parametrize("strip", [False, True])
def test_a_stream_cut_short_counts_the_text_events_it_relayed_at_every_split(strip: bool) -> None:
    """A client that left mid-stream (issue 41): its tokens are the whole events carrying text
    relayed to it — not the role chunk before them, not an event still cut short."""
    stream = ROLE + KEEPALIVE + TOKENS + TOKENS[:20]  # three tokens whole, a fourth begun
    splits = [[stream], *two_way_splits(stream), [stream[i : i + 1] for i in range(len(stream))]]
    for pieces in splits:
        tracker = UsageTracker(streamed=True, strip_usage_chunk=strip)
        for piece in pieces:
            tracker.feed(piece)
        assert tracker.received() == 3, [len(p) for p in pieces]
    crlf = UsageTracker(streamed=True)
    crlf.feed((ROLE + TOKENS).replace(b"\n", b"\r\n"))
    assert crlf.received() == 3
    anthropic = UsageTracker(streamed=True)
    anthropic.feed(
        b'event: message_start\ndata: {"type":"message_start"}\n\n'
        b'event: content_block_delta\ndata: {"delta":{"type":"text_delta","text":"A"}}\n\n'
        b'event: content_block_delta\ndata: {"delta":{"type":"text_delta","text":"B"}}\n\n'
    )
    assert anthropic.received() == 2
    quiet = UsageTracker(streamed=True)
    quiet.feed(ROLE)
    assert quiet.received() == 0  # nothing generated yet
