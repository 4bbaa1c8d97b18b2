"""Redaction never damages data (issue 32): real llama.cpp / vLLM / OpenAI bodies and startup
logs go through the redactor, still parse, and keep every value that is not a secret.

The bodies and logs are in tests/data/redaction (written after real servers' answers and
logs) and tests/data/startup-logs (captured). The properties plant secrets in them, perturb
every number, and serialize them the ways a capture sees them (compact, indented, ASCII-escaped,
one event-stream line), then check that exactly the planted secrets are masked.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tests.property import examples

from modelswap.redact import MASK, Redactor, is_secret_name

DATA = Path(__file__).resolve().parents[1] / "data"
BODIES = sorted((DATA / "redaction").glob("*.json"))
STREAMS = sorted((DATA / "redaction").glob("*.sse"))
LOGS = sorted((DATA / "redaction").glob("*.log"))
STARTUP_LOGS = sorted((DATA / "startup-logs").glob("*.log"))

# The secrets written into the log fixtures; every other character of them must survive.
LOG_SECRETS = (
    "sk-local-9f8e7d6c5b4a3210",
    "hf_QmXo7LrT2bVn5KcY8sWd4FgJ1pHa3ZeU",
    "vllm-local-4Kx9Qp2Zr7Lm",
    "sk-proj-T3stK3yV4lu3XyZ0123456789",
)

R = Redactor()

PROP = settings(
    max_examples=examples(200),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _doc(path: Path) -> Any:
    return json.loads(path.read_text())


def _names(paths: list[Path]) -> list[str]:
    return [p.name for p in paths]


def test_the_fixtures_are_there() -> None:
    assert len(BODIES) >= 6
    assert len(STREAMS) >= 2
    assert len(LOGS) >= 3
    assert len(STARTUP_LOGS) >= 20


# --------------------------------------------------------------------------------------------
# Real bodies and logs, as they are
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", BODIES, ids=_names(BODIES))
def test_a_real_body_comes_back_byte_for_byte(path: Path) -> None:
    body = path.read_text()
    assert R.text(body) == body  # the timings, token counts, logprob tokens, special tokens
    assert R.data(json.loads(body)) == json.loads(body)


@pytest.mark.parametrize("path", STREAMS, ids=_names(STREAMS))
def test_a_real_event_stream_comes_back_byte_for_byte(path: Path) -> None:
    stream = path.read_text()
    assert R.text(stream) == stream
    for line in stream.splitlines():
        assert R.text(line) == line


def test_the_numbers_the_review_saw_masked_are_kept() -> None:
    body = (DATA / "redaction" / "llamacpp-completion.json").read_text()
    timings = json.loads(R.text(body))["timings"]
    assert timings["prompt_per_token_ms"] == pytest.approx(1.7635714285714286)
    assert timings["predicted_per_token_ms"] == pytest.approx(8.7515)
    assert json.loads(R.text(body))["tokens_cached"] == 14


def _expected_log_line(line: str) -> str:
    for secret in LOG_SECRETS:
        line = line.replace(secret, MASK)
    # a header line is masked to its end, the scheme included
    return line.replace(f"Authorization: Bearer {MASK}", f"Authorization: {MASK}")


@pytest.mark.parametrize("path", LOGS + STARTUP_LOGS, ids=_names(LOGS + STARTUP_LOGS))
def test_a_real_log_loses_its_secrets_and_nothing_else(path: Path) -> None:
    for line in path.read_text(errors="replace").splitlines():
        out = R.text(line)
        assert out == _expected_log_line(line), line
        for secret in LOG_SECRETS:
            assert secret not in out


def test_a_flag_with_a_number_is_not_a_secret() -> None:
    line = (DATA / "redaction" / "playground-backend.log").read_text().splitlines()
    assert "--token-delay 0.02 --answer-file" in R.text(line[0])
    assert R.text(line[2]).startswith("0.02.541.112 I playground: POST")
    assert "max_tokens=128 token_delay=0.02" in R.text(line[2])


def test_numbers_and_literals_are_never_known_values() -> None:
    # A ${env.CTX} of 4096 or a --token-delay of 0.02 the config marked secret must not mask
    # every 4096 and 0.02 (and with them a JSON body and every log timestamp).
    r = Redactor(["0.02", "4096", "true", "null", "-1", "sk-local-9f8e7d6c5b4a3210"])
    body = '{"n_ctx": 4096, "stream": true, "x": null, "seed": -1, "delay": 0.02}'
    assert r.text(body) == body
    line = "0.02.541.112 I slot launch: n_ctx = 4096, key sk-local-9f8e7d6c5b4a3210"
    assert r.text(line) == "0.02.541.112 I slot launch: n_ctx = 4096, key ***"
    assert r.argv(["srv", "--api-key", "4096"]) == ["srv", "--api-key", MASK]  # by shape


def test_a_body_a_rule_would_break_is_redacted_structurally() -> None:
    # A header line quoted inside a one-line body is masked to the end of the line: the
    # whole body is then redacted as data, so it stays JSON and keeps its other values.
    answer = "Send it as Authorization: Bearer abcdefgh12345678 in each request."
    body = json.dumps(
        {"choices": [{"message": {"content": answer}}], "usage": {"prompt_tokens": 9}},
        separators=(",", ":"),
    )
    out = json.loads(R.text(body))
    assert out["choices"][0]["message"]["content"] == "Send it as Authorization: ***"
    assert out["usage"] == {"prompt_tokens": 9}
    event = f"data: {body}\n\ndata: [DONE]\n\n"
    lines = R.text(event).split("\n")
    assert lines[0].startswith("data: ")
    assert json.loads(lines[0][6:])["usage"]["prompt_tokens"] == 9
    assert "abcdefgh12345678" not in lines[0]
    assert lines[1:] == ["", "data: [DONE]", "", ""]


# --------------------------------------------------------------------------------------------
# Properties: plant secrets, perturb numbers, serialize every way
# --------------------------------------------------------------------------------------------

KEY_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
# Key-like (module docstring): 8+ characters, no whitespace, not a plain word.
key_like = st.text(KEY_CHARS, min_size=8, max_size=48).filter(
    lambda s: not (s.isalpha() and len(s) < 16) and not s.startswith("--")
)
# Names a secret is planted under: key names, secret names, env-var-style names.
SECRET_FIELDS = (
    "api_key",
    "apiKey",
    "x-api-key",
    "access_token",
    "hf_token",
    "token",
    "key",
    "HF_TOKEN",
    "OPENAI_API_KEY",
    "password",
    "client_secret",
    "Authorization",
)
numbers = st.one_of(
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0, -1, 0.02, 1e-7, 4096, 1.7635714285714286, 4294967295]),
)


def _perturb_numbers(node: Any, draw: st.DataObject) -> Any:
    if isinstance(node, bool) or node is None or isinstance(node, str):
        return node
    if isinstance(node, int | float):
        return draw.draw(numbers)
    if isinstance(node, list):
        return [_perturb_numbers(v, draw) for v in node]
    return {k: _perturb_numbers(v, draw) for k, v in node.items()}


def _objects(node: Any, out: list[dict[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        out.append(node)
        for v in node.values():
            _objects(v, out)
    elif isinstance(node, list):
        for v in node:
            _objects(v, out)
    return out


def _serialize(doc: Any, style: int) -> str:
    if style == 0:
        return json.dumps(doc, separators=(",", ":"))
    if style == 1:
        return json.dumps(doc, indent=2)
    if style == 2:
        return json.dumps(doc, ensure_ascii=False)
    return f"data: {json.dumps(doc, separators=(',', ':'))}"  # one event of a stream


def _parse(text: str, style: int) -> Any:
    return json.loads(text[len("data: ") :] if style == 3 else text)


def _same(a: Any, b: Any) -> bool:
    """Equal, with floats compared by their bits' meaning (-0.0 == 0.0 is fine, NaN excluded)."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


@PROP
@given(
    path=st.sampled_from(BODIES),
    style=st.integers(0, 3),
    plants=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(SECRET_FIELDS), key_like)),
    draw=st.data(),
)
def test_property_real_bodies_keep_every_value_but_the_planted_secrets(
    path: Path, style: int, plants: list[tuple[int, str, str]], draw: st.DataObject
) -> None:
    doc = _perturb_numbers(_doc(path), draw)
    clean_text = _serialize(doc, style)
    expected = json.loads(json.dumps(doc))
    objects, expected_objects = _objects(doc, []), _objects(expected, [])
    secrets: list[str] = []
    for where, field, secret in plants:
        index = where % len(objects)
        if field in objects[index]:
            continue
        assume(secret not in clean_text and all(secret not in s for s in secrets))
        value = f"Bearer {secret}" if field == "Authorization" else secret
        objects[index][field] = value
        expected_objects[index][field] = MASK
        secrets.append(secret)
    text = _serialize(doc, style)
    for secret in secrets:
        assume(text.count(secret) == 1)  # not also a part of a name or of another value

    out = R.text(text)

    assert _same(_parse(out, style), expected)  # valid JSON, every other value kept
    for secret in secrets:
        assert secret not in out
    assert R.data(doc) == expected


# Names in real bodies that mention a marker but hold data, and ordinary ones.
DATA_NAMES = (
    "prompt_per_token_ms",
    "predicted_per_token_ms",
    "tokens_cached",
    "tokens_evaluated",
    "tokens_predicted",
    "n_tokens",
    "max_tokens",
    "prompt_tokens",
    "cached_tokens",
    "reasoning_tokens",
    "token_ids",
    "prompt_token_ids",
    "timings_per_token",
    "encoder_cudagraph_token_budgets",
    "eos_token",
    "bos_token",
    "tokenizer",
    "key_path",
    "content",
    "text",
    "model",
    "id",
    "usage",
    "timings",
)
ORDINARY_TEXT = st.one_of(
    st.text("abcdefghijklmnopqrstuvwxyz0123456789 .,!?", max_size=40),
    st.sampled_from(
        [
            "The capital of France is Paris.",
            "Step 1: boil the water",
            "token-level: fine",
            "<|im_end|>",
            "</s>",
            "well-known",
            "ratio 3:2, at 18:04",
            "0.02.541.112",
            "--token-delay 0.02",
            "max_tokens=128",
        ]
    ),
)
json_values = st.recursive(
    st.none() | st.booleans() | numbers | ORDINARY_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(DATA_NAMES), inner),
    max_leaves=30,
)


@PROP
@given(doc=st.dictionaries(st.sampled_from(DATA_NAMES), json_values), style=st.integers(0, 3))
def test_property_a_document_without_secrets_comes_back_unchanged(
    doc: dict[str, Any], style: int
) -> None:
    text = _serialize(doc, style)
    assert R.text(text) == text
    assert _same(R.data(doc), doc)


@PROP
@given(name=st.sampled_from(SECRET_FIELDS), secret=key_like, style=st.integers(0, 3))
def test_property_a_key_like_value_under_a_secret_name_is_masked(
    name: str, secret: str, style: int
) -> None:
    doc = {"model": "q", name: secret, "usage": {"prompt_tokens": 3}}
    out = R.text(_serialize(doc, style))
    assert _parse(out, style) == {"model": "q", name: MASK, "usage": {"prompt_tokens": 3}}
    assert R.data(doc) == {"model": "q", name: MASK, "usage": {"prompt_tokens": 3}}
    assert is_secret_name(name)


# A log line: a timestamp, then flags and env pairs, some of them secret.
PLAIN_FLAGS = (
    "--token-delay",
    "--max-tokens",
    "--ctx-size",
    "--n-gpu-layers",
    "--long-prefill-token-threshold",
    "--max-num-batched-tokens",
    "--api-key-file",
    "--tokenizer",
    "--temp",
)
SECRET_FLAGS = ("--api-key", "--hf-token", "-hft", "--admin-api-key", "--token")
SECRET_ENV = ("HF_TOKEN", "OPENAI_API_KEY", "API_TOKEN", "DB_PASSWORD")
plain_value = st.one_of(
    numbers.map(str), st.sampled_from(["0.02", "128", "auto", "m.gguf", "/tmp/k.txt"])
)
timestamp = st.tuples(st.integers(0, 99), st.integers(0, 59), st.integers(0, 999)).map(
    lambda t: f"{t[0]}.{t[1]:02d}.{t[2]:03d}.112"
)


@st.composite
def log_words(draw: st.DrawFn) -> tuple[list[str], list[str], list[str]]:
    """(words, the expected words, the secrets)."""
    words, expected, secrets = [draw(timestamp), "I"], [], []
    expected = list(words)
    for _ in range(draw(st.integers(1, 8))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            pair = [draw(st.sampled_from(PLAIN_FLAGS)), draw(plain_value)]
            words += pair
            expected += pair
        elif kind == 1:
            flag, secret = draw(st.sampled_from(SECRET_FLAGS)), draw(key_like)
            words += [flag, secret]
            expected += [flag, MASK]
            secrets.append(secret)
        elif kind == 2:
            name, secret = draw(st.sampled_from(SECRET_ENV)), draw(key_like)
            words.append(f"{name}={secret}")
            expected.append(f"{name}={MASK}")
            secrets.append(secret)
        else:
            plain = f"CUDA_VISIBLE_DEVICES={draw(st.integers(0, 7))}"
            words.append(plain)
            expected.append(plain)
    return words, expected, secrets


@PROP
@given(case=log_words())
def test_property_a_log_line_loses_exactly_its_secrets(
    case: tuple[list[str], list[str], list[str]],
) -> None:
    words, expected, secrets = case
    line = " ".join(words)
    for secret in secrets:
        assume(line.count(secret) == 1)
    assert R.text(line) == " ".join(expected)
