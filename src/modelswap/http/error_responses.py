"""The one place that knows status codes: domain errors → OpenAI error envelope.

Every error modelswap itself authors carries the header ``X-Modelswap-Error: 1`` so a client can
tell it from an error the backend returned (those pass through unchanged, without the header).
On the routes that speak Anthropic's API the same errors are reshaped into Anthropic's envelope
(:func:`anthropic_envelope`), with the same status codes.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass

from aiohttp import web

from modelswap import jsonsafe
from modelswap.errors import (
    AmbiguousModelError,
    BadRequestError,
    BodyTooLargeError,
    ModelNotFoundError,
    ModelswapError,
    PeerUnavailableError,
    PolicyDeniedError,
    PolicyFailedError,
    QueueFullError,
    RateLimitedError,
    ShuttingDownError,
    StartError,
    ToolChoiceUnsupportedError,
    UpstreamError,
    UpstreamTimeoutError,
)
from modelswap.redact import Redactor

GATEWAY_ERROR_HEADER = "X-Modelswap-Error"
HINT_HEADER = "X-Modelswap-Hint"  # a known misconfiguration, and the fix, in one line

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


def envelope(
    message: str, status: int, *, code: str | None = None, param: str | None = None, **extra: object
) -> dict[str, object]:
    error: dict[str, object] = {
        "message": message,
        "type": _TYPES.get(status, "server_error"),
        "code": code,
        "param": param,
    }
    error.update(extra)
    return {"error": error}


# Anthropic's error types by status (its API reference, "Errors").
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
}


def anthropic_envelope(openai: dict[str, object], status: int) -> dict[str, object]:
    """The OpenAI envelope ``openai`` in Anthropic's shape: ``{"type": "error", "error":
    {"type", "message", "details"}}``. The gateway's code and extras (suggestions, a start's
    diagnosis) go into ``details``, the code as ``error_code`` where Anthropic keeps its own."""
    error = openai.get("error")
    fields = dict(error) if isinstance(error, dict) else {}
    out: dict[str, object] = {
        "type": _ANTHROPIC_TYPES.get(
            status, "api_error" if status >= 500 else "invalid_request_error"
        ),
        "message": str(fields.pop("message", "")),
    }
    fields.pop("type", None)
    code = fields.pop("code", None)
    details = {key: value for key, value in fields.items() if value is not None}
    if code is not None:
        details = {"error_code": code, **details}
    if details:
        out["details"] = details
    return {"type": "error", "error": out}


def error_code_of(data: object) -> str | None:
    """The gateway's error code in either envelope, or None."""
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    code = error.get("code")
    details = error.get("details")
    if code is None and isinstance(details, dict):
        code = details.get("error_code")
    return str(code) if code is not None else None


# The keys of an error's JSON that name the rule behind it, and the ``kind`` each is recorded as.
RULE_KEYS = {"policy": "policy", "limit": "limit"}


@dataclass(frozen=True, slots=True)
class Explained:
    """What a person needs of a gateway-authored error (issue 41): its code, its message and
    the rule behind it (``{"kind": "policy", "program", "line", "rule"}``, ``{"kind":
    "limit", "name", "value", "in_flight"}``), as the activity row records them."""

    code: str | None
    message: str | None
    rule: dict[str, object] | None


def explained(data: object) -> Explained | None:
    """The code, message and rule of an error in either envelope (OpenAI's ``error.policy``,
    Anthropic's ``error.details.policy``); None when ``data`` is no error."""
    error = data.get("error") if isinstance(data, dict) else None
    if not isinstance(error, dict):
        return None
    details = error.get("details")
    fields = {**details, **error} if isinstance(details, dict) else error
    message = fields.get("message")
    rule: dict[str, object] | None = None
    for key, kind in RULE_KEYS.items():
        value = fields.get(key)
        if isinstance(value, dict):
            rule = {"kind": kind, **value}
            break
    return Explained(error_code_of(data), message if isinstance(message, str) else None, rule)


_CODE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")
CODE_CHARS = 64  # a backend's code, as recorded (a metric label: kept short and plain)
MESSAGE_TEXT = 300  # characters of a non-JSON error body taken as its message


def backend_explained(status: int, body: bytes) -> Explained:
    """The code and message of a backend's own error answer: OpenAI's ``error.message`` and
    ``error.code`` (else ``error.type``), llama.cpp's ``{"error": {"code": 501, "message",
    "type": "not_supported_error"}}`` (its number is the status: the type says more), a
    ``{"detail": ...}`` or ``{"error": "text"}``; else ``http_<status>`` and the body's first
    characters."""
    data: object = None
    with contextlib.suppress(ValueError):  # too deep and UnicodeDecodeError included
        data = jsonsafe.loads(body)
    fields = data if isinstance(data, dict) else {}
    error = fields.get("error")
    code: object = None
    message: object = None
    if isinstance(error, dict):
        code = error.get("code")
        if not isinstance(code, str) or not code:
            code = error.get("type")
        message = error.get("message")
    elif isinstance(error, str):
        message = error
    if not isinstance(message, str) or not message:
        detail = fields.get("detail", fields.get("message"))
        message = detail if isinstance(detail, str) else None
    if message is None:
        text = body.decode("utf-8", "replace").strip()
        message = text[:MESSAGE_TEXT] if text else None
    return Explained(_plain_code(code) or f"http_{status}", message or None, None)


def _plain_code(code: object) -> str | None:
    """A backend's code as a short plain word (it becomes a metric label), or None."""
    if not isinstance(code, str):
        return None
    plain = "".join(c if c in _CODE_CHARS else "_" for c in code[:CODE_CHARS])
    return plain.strip("_") or None


def in_anthropic_shape(response: web.Response) -> None:
    """Reshape a gateway-authored JSON error ``response`` in place (headers kept)."""
    if not isinstance(response.body, bytes):
        return
    try:
        data = json.loads(response.body)
    except ValueError:
        return
    if isinstance(data, dict) and isinstance(data.get("error"), dict):
        response.body = json.dumps(anthropic_envelope(data, response.status)).encode()


def error_response(
    message: str, status: int, *, code: str | None = None, param: str | None = None, **extra: object
) -> web.Response:
    return web.Response(
        status=status,
        text=json.dumps(envelope(message, status, code=code, param=param, **extra)),
        content_type="application/json",
        headers={GATEWAY_ERROR_HEADER: "1"},
    )


def response_for(error: ModelswapError, redactor: Redactor | None = None) -> web.Response:
    """Map a domain error to its status code and envelope (secrets masked)."""
    response = _response_for(error)
    if redactor is not None and isinstance(response.body, bytes):
        data = json.loads(response.body)
        response.body = json.dumps(redactor.data(data)).encode()
    return response


def _response_for(error: ModelswapError) -> web.Response:
    if isinstance(error, ModelNotFoundError):
        return error_response(
            str(error), 404, code="model_not_found", param="model", suggestions=error.close
        )
    if isinstance(error, ToolChoiceUnsupportedError):
        response = error_response(
            str(error), 400, code=error.code, param=error.param, hint=error.hint
        )
        response.headers[HINT_HEADER] = error.hint
        return response
    if isinstance(error, BadRequestError):
        return error_response(str(error), 400, code=error.code, param=error.param)
    if isinstance(error, BodyTooLargeError):
        return error_response(str(error), 413, code="request_too_large")
    if isinstance(error, StartError):
        d = error.diagnosis
        if error.prediction is not None:  # it cannot fit: what the dry run says, and its fixes
            return error_response(
                str(error), 503, code=d.code, diagnosis=d.as_dict(), prediction=error.prediction
            )
        return error_response(str(error), 503, code=d.code, diagnosis=d.as_dict())
    if isinstance(error, QueueFullError):
        response = error_response(str(error), 429, code="queue_full")
        response.headers["Retry-After"] = str(max(1, round(error.retry_after)))
        return response
    if isinstance(error, RateLimitedError):  # a key over its quota (docs/sharing.md)
        response = error_response(str(error), 429, code="rate_limited", limit=error.limit)
        response.headers.update(error.headers)  # x-ratelimit-*, Retry-After, retry-after-ms
        return response
    if isinstance(error, ShuttingDownError):
        return error_response(str(error), 503, code="shutting_down")
    if isinstance(error, PeerUnavailableError):
        response = error_response(str(error), 503, code="peer_unavailable")
        response.headers["Retry-After"] = str(max(1, round(error.retry_after)))
        return response
    if isinstance(error, PolicyDeniedError):  # the program's status and message, as written
        kind = _TYPES.get(error.status, "server_error" if error.status >= 500 else "")
        kind = kind or "invalid_request_error"
        if error.policy is None:
            return error_response(str(error), error.status, code="policy_denied", type=kind)
        return error_response(  # where the deny is written: program, line, rule
            str(error), error.status, code="policy_denied", type=kind, policy=dict(error.policy)
        )
    if isinstance(error, PolicyFailedError):
        return error_response(str(error), 500, code="policy_error")
    if isinstance(error, AmbiguousModelError):
        return error_response(
            str(error), 400, code="ambiguous_model", param="model", suggestions=error.candidates
        )
    if isinstance(error, UpstreamTimeoutError):
        return error_response(str(error), 504, code="upstream_timeout")
    if isinstance(error, UpstreamError):
        return error_response(str(error), 502, code="upstream_error")
    return error_response(str(error), 500, code="internal_error")
