"""Issue 41: a backend's own error answer, as its activity row records it — a code and a
message from its JSON in the shapes servers write (llama.cpp's, OpenAI's, FastAPI's), else the
status and the body's first characters."""

from __future__ import annotations

import json

import pytest

from modelswap.http.error_responses import CODE_CHARS, MESSAGE_TEXT, backend_explained


def body(data: object) -> bytes:
    return json.dumps(data).encode()


@pytest.mark.parametrize(
    ("status", "sent", "code", "message"),
    [
        pytest.param(
            501,
            body(
                {
                    "error": {
                        "code": 501,
                        "message": "This server does not support embeddings. Start it with "
                        "`--embeddings`",
                        "type": "not_supported_error",
                    }
                }
            ),
            "not_supported_error",
            "This server does not support embeddings. Start it with `--embeddings`",
            id="llamacpp-number-then-type",
        ),
        pytest.param(
            400,
            body({"error": {"message": "bad", "type": "invalid_request_error", "code": "x_y"}}),
            "x_y",
            "bad",
            id="openai-code-wins",
        ),
        pytest.param(404, body({"detail": "Not Found"}), "http_404", "Not Found", id="fastapi"),
        pytest.param(500, body({"error": "boom"}), "http_500", "boom", id="error-string"),
        pytest.param(502, b"Bad Gateway\n", "http_502", "Bad Gateway", id="plain-text"),
        pytest.param(503, b"", "http_503", None, id="empty"),
        pytest.param(
            400,
            body({"error": {"code": "weird code!\n" * 20, "message": "m"}}),
            ("weird_code__" * 6)[:CODE_CHARS].strip("_"),
            "m",
            id="code-made-plain-and-short",
        ),
    ],
)
def test_a_backends_error_read_for_its_row(
    status: int, sent: bytes, code: str, message: str | None
) -> None:
    why = backend_explained(status, sent)
    assert (why.code, why.message, why.rule) == (code, message, None)


def test_a_long_text_body_is_cut_for_its_message() -> None:
    why = backend_explained(500, b"x" * 10_000)
    assert why.message == "x" * MESSAGE_TEXT
