"""Errors relayed from backends are redacted; the content of answers never is."""

from __future__ import annotations

import json

from modelswap.http.relay.relay import redact_error_body, redact_error_events
from modelswap.redact import Redactor

KNOWN = "known-secret-value-1234"
REDACTOR = Redactor([KNOWN])


def test_an_error_body_with_argv_and_environment_is_masked() -> None:
    leak = {
        "error": {
            "message": "boom",
            "argv": ["llama-server", "--api-key", "literal-key-5678", "--hf-token", "hf_xyz"],
            "environ": {"HF_TOKEN": "env-token-9999", "PATH": "/usr/bin", "X": KNOWN},
        }
    }
    out = redact_error_body(json.dumps(leak).encode(), REDACTOR)
    for secret in ("literal-key-5678", "hf_xyz", "env-token-9999", KNOWN):
        assert secret.encode() not in out
    data = json.loads(out)  # still the same JSON error, status unchanged by the caller
    assert data["error"]["message"] == "boom"
    assert data["error"]["environ"]["PATH"] == "/usr/bin"


def test_a_plain_text_error_is_masked() -> None:
    text = b"Traceback: started as llama-server --api-key literal-key-5678 -m x.gguf"
    out = redact_error_body(text, REDACTOR)
    assert b"literal-key-5678" not in out
    assert out.startswith(b"Traceback: started as llama-server --api-key ")


def test_an_error_body_without_secrets_is_the_same_bytes() -> None:
    body = b'{"error": {"message": "context length exceeded", "code": 400}}'
    assert redact_error_body(body, REDACTOR) is body


def test_only_error_events_of_a_stream_are_masked() -> None:
    content = {"choices": [{"delta": {"content": f'as in --api-key {KNOWN} or "error"'}}]}
    error = {"error": {"message": f"died; argv=['srv', '--api-key', '{KNOWN}']"}}
    chunk = f"data: {json.dumps(content)}\n\ndata: {json.dumps(error)}\n\n".encode()
    out = redact_error_events(chunk, REDACTOR)
    content_line, _, error_line, *_ = out.split(b"\n")
    assert content_line == f"data: {json.dumps(content)}".encode()  # the answer: untouched
    assert KNOWN.encode() not in error_line
    assert json.loads(error_line[len(b"data: ") :])["error"]["message"].startswith("died;")
