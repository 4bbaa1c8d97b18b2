from __future__ import annotations

import json

import pytest

from modelswap.errors import BadRequestError
from modelswap.http.relay.extract import extract_model, parse_request, replace_model

BOUNDARY = "----modelswapBoundary7"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


def form(*parts: tuple[str, bytes, str | None]) -> bytes:
    out = b""
    for name, value, filename in parts:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
        out += value + b"\r\n"
    return out + f"--{BOUNDARY}--\r\n".encode()


def test_extract_json_model() -> None:
    assert extract_model("application/json", b'{"model": "qwen", "x": 1}') == "qwen"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty"),
        (b"{bad", "not valid JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"messages": []}', "no `model`"),
        (b'{"model": 3}', "non-empty string"),
        (b'{"model": "  "}', "non-empty string"),
        (b"\xff\xfe", "not valid JSON"),
    ],
)
def test_extract_json_errors_are_bad_requests(body: bytes, message: str) -> None:
    with pytest.raises(BadRequestError, match=message):
        extract_model("application/json", body)


def test_extract_multipart_model_field_next_to_a_binary_file() -> None:
    body = form(("file", b"\x00\x01RIFF\r\n--not-a-boundary", "a.wav"), ("model", b"whisper", None))
    assert extract_model(MULTIPART, body) == "whisper"


def test_extract_multipart_without_model_or_boundary() -> None:
    with pytest.raises(BadRequestError, match="no `model`"):
        extract_model(MULTIPART, form(("file", b"x", "a.wav")))
    with pytest.raises(BadRequestError, match="boundary"):
        extract_model("multipart/form-data", b"")


def test_replace_model_in_json_keeps_every_other_field() -> None:
    body = b'{"model": "alias", "messages": [{"role": "user", "content": "h\xc3\xa9"}]}'
    out = json.loads(replace_model("application/json", body, "served/name"))
    assert out == {"model": "served/name", "messages": [{"role": "user", "content": "hé"}]}


def test_replace_model_in_multipart_changes_only_that_field() -> None:
    audio = b"\x00\x01\x02binary\r\n\r\nstuff"
    body = form(("model", b"alias", None), ("file", audio, "a.wav"))
    out = replace_model(MULTIPART, body, "whisper-large")
    assert extract_model(MULTIPART, out) == "whisper-large"
    assert out == form(("model", b"whisper-large", None), ("file", audio, "a.wav"))


def test_parse_request_parses_json_once_and_keeps_the_raw_bytes() -> None:
    raw = b'{"model": "qwen", "stream": true, "messages": []}'
    parsed = parse_request("application/json; charset=utf-8", raw)
    assert parsed.raw is raw
    assert parsed.model == "qwen"
    assert parsed.stream is True
    assert parsed.data == {"model": "qwen", "stream": True, "messages": []}
    assert parse_request("application/json", b'{"model": "q", "stream": "true"}').stream is False


def test_parse_request_on_a_form_has_no_json_and_never_streams() -> None:
    body = form(("model", b"whisper", None), ("file", b"RIFF", "a.wav"))
    parsed = parse_request(MULTIPART, body)
    assert (parsed.model, parsed.data, parsed.stream) == ("whisper", None, False)


# ---- hostile bodies: bounded names, bounded depth, one value per key -------------------------


def test_a_model_name_over_256_bytes_is_invalid_model_and_echoed_short() -> None:
    name = "m" * 10_000_000
    with pytest.raises(BadRequestError) as caught:
        parse_request("application/json", json.dumps({"model": name}).encode())
    assert caught.value.code == "invalid_model"
    assert caught.value.param == "model"
    message = str(caught.value)
    assert "m" * 64 in message
    assert "m" * 65 not in message
    assert len(message) < 200


def test_the_name_limit_counts_bytes_not_characters() -> None:
    assert parse_request("application/json", json.dumps({"model": "m" * 256}).encode())
    with pytest.raises(BadRequestError, match="longer than 256 bytes"):
        parse_request("application/json", json.dumps({"model": "é" * 129}).encode())


def test_a_long_multipart_model_is_refused_too() -> None:
    body = form(("model", b"w" * 300, None), ("file", b"RIFF", "a.wav"))
    with pytest.raises(BadRequestError) as caught:
        parse_request(MULTIPART, body)
    assert caught.value.code == "invalid_model"


def test_a_duplicate_top_level_model_is_refused() -> None:
    with pytest.raises(BadRequestError) as caught:
        parse_request("application/json", b'{"model": "a", "model": "b"}')
    assert caught.value.code == "duplicate_key"
    assert "`model`" in str(caught.value)


def test_any_duplicate_top_level_key_is_refused() -> None:
    # A filter (stripParams, setParams) and the backend must read the same `stream`.
    with pytest.raises(BadRequestError) as caught:
        parse_request("application/json", b'{"model": "a", "stream": false, "stream": true}')
    assert caught.value.code == "duplicate_key"


def test_two_multipart_model_fields_are_refused() -> None:
    body = form(("model", b"a", None), ("model", b"b", None))
    with pytest.raises(BadRequestError) as caught:
        parse_request(MULTIPART, body)
    assert caught.value.code == "duplicate_key"


def test_a_deeply_nested_body_is_a_clear_400() -> None:
    body = b'{"model": "m", "x": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    with pytest.raises(BadRequestError) as caught:
        parse_request("application/json", body)
    assert caught.value.code == "json_too_deep"
    assert "nested deeper than 128 levels" in str(caught.value)


def test_a_part_head_too_long_to_be_a_field_is_not_read_as_one() -> None:
    # A real part head is a few hundred bytes; a megabyte one is not parsed for its name.
    padding = "X-Padding: " + "p" * 8000
    head = f'--{BOUNDARY}\r\n{padding}\r\nContent-Disposition: form-data; name="model"\r\n\r\n'
    body = head.encode() + b"qwen\r\n" + f"--{BOUNDARY}--\r\n".encode()
    with pytest.raises(BadRequestError, match="no `model` field"):
        parse_request(MULTIPART, body)
