"""One finished request, as the activity log stores it.

A leaf data type: the HTTP layer builds a :class:`RequestRecord` when a request ends (success,
error or client disconnect) and hands it to :meth:`ActivityLog.record`. It carries the client
key's *name* only, never the key; bodies are present only when ``activity.capture`` is on, and
the caller has already bounded and redacted them.

One definition of the times, shared by the Activity page, the Playground and the metrics:
``load`` is how long the request waited for its model to start (a cold start), ``first_byte``
the backend's first byte after arrival, ``ttft`` the first *token* after the model was ready
(load never counts as TTFT), and :attr:`tokens_per_second` the generation speed after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

OUTCOMES = ("ok", "error", "stopped", "preflight")
"""What a request's :attr:`RequestRecord.outcome` can be."""

CLIENT_STOPPED = 499
"""The status of a request whose client went away before its answer ended (nginx's)."""


# One per request: not frozen, which costs ~2 µs more to build (24 fields, each through
# object.__setattr__); nothing changes one after it is built.
@dataclass(slots=True)
class RequestRecord:
    at: float
    """Unix time the request arrived."""
    key_name: str | None
    """The client key's name (never the key itself)."""
    model: str | None
    """The resolved model id, or ``None`` if the request never resolved to a model."""
    route: str
    """The gateway route, e.g. ``/v1/chat/completions``."""
    status: int
    """HTTP status sent to the client (499 when the client went away)."""
    streamed: bool
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft: float | None
    """Seconds to the first token, not counting ``load``: streamed, the first event carrying
    text; not streamed, the body's first byte (the whole answer arrives at once)."""
    duration: float
    """Seconds, the whole request."""
    bytes_in: int
    bytes_out: int
    error_code: str | None
    """The error's code: the gateway's own when it authored the error (``model_not_found``,
    a start's diagnosis code, ``upstream_error``…), also when that error was the final event of
    a 200 event stream the gateway had already opened (its loading comments); for an error
    event the backend itself sent inside a stream, ``upstream_error`` (``tool_choice_unsupported``
    for vLLM's tool-choice refusal); for a backend's own error answer, its ``error.code`` when
    a word, else its ``error.type`` (llama.cpp's ``not_supported_error``), else
    ``http_<status>``. ``None`` when no error was sent."""
    request_id: str | None = None
    """The ``X-Request-Id`` the client got (its own, when sane) and the backend was sent."""
    request_body: str | None = None
    """Only with ``activity.capture``; already bounded and redacted by the caller."""
    response_body: str | None = None
    first_byte: float | None = None
    """Seconds from arrival to the backend's first byte (a cold start's load included)."""
    load: float | None = None
    """Seconds the request waited for its model to start; ``None`` when it was ready."""
    requested: str | None = None
    """The ``model`` the client asked for, bounded and redacted: what a 404 row names."""
    request_headers: str | None = None
    """Only with ``activity.capture``: the request's headers as a JSON object, credentials
    masked (llama-swap's capture shows them)."""
    response_headers: str | None = None
    cached_tokens: int | None = None
    """Prompt tokens the backend reported it took from its cache (None: it said nothing)."""
    salted: bool = False
    """The request carried a ``cache_salt`` (for the prompt cache's proof; never stored)."""
    metadata: Mapping[str, str] | None = None
    """The ``context.<key>`` values a Swap Policy Language program wrote (llama-swap's activity
    metadata); None when none was written."""
    method: str | None = None
    """The HTTP method (``POST``; ``OPTIONS`` for a CORS preflight). None: not recorded."""
    error_message: str | None = None
    """The error's message as the client read it — the gateway's, or the backend's own
    ``error.message`` — redacted, at most 1 KiB; recorded with or without a capture."""
    rule: Mapping[str, object] | None = None
    """Why the gateway refused or answered as it did, for a person to find it (issue 41): a
    policy's ``{"kind": "policy", "program", "line", "rule"}`` (and ``applied_by``), a limit's
    ``{"kind": "limit", "name", "value", "in_flight"}``, a preflight's ``{"kind": "cors",
    "origin", "allowed"}``. None when nothing was refused by a rule."""

    @property
    def outcome(self) -> str:
        """What the client got, as the activity log's filter, the web UI and the metrics count
        it: ``"preflight"`` for an ``OPTIONS`` (a browser's CORS check, not a request for a
        model); ``"stopped"`` when the client itself went away (499) and no error was sent
        (what it received is in the row: a stop is no failure); ``"error"`` for a status of 400
        or more, or an error event inside a 200 stream (then ``error_code`` says which), an
        operator's cancel included; else ``"ok"``."""
        if self.method == "OPTIONS":
            return "preflight"
        if self.error_code is not None:
            return "error"
        if self.status == CLIENT_STOPPED:
            return "stopped"
        return "error" if self.status >= 400 else "ok"

    @property
    def tokens_per_second(self) -> float | None:
        """Generation speed, or ``None`` when it cannot be known.

        Streamed: the tokens after the first, over the time after the first token
        (``(completion_tokens - 1) / (duration - load - ttft)``), as the Playground measures it.
        Not streamed: the first byte arrives only once generation has finished, so the whole
        time after the load counts. ``None`` when the tokens (or, streamed, the TTFT) are
        unknown, too few, or the time is not positive.
        """
        if self.completion_tokens is None:
            return None
        load = self.load or 0.0
        if self.streamed:
            if self.ttft is None or self.completion_tokens < 2:
                return None
            tokens, seconds = self.completion_tokens - 1, self.duration - load - self.ttft
        else:
            tokens, seconds = self.completion_tokens, self.duration - load
        if seconds <= 0:
            return None
        return tokens / seconds

    def as_dict(self) -> dict[str, object]:
        """JSON-ready mapping of every field plus ``tokens_per_second`` and ``outcome``; ``None``
        bodies omitted."""
        out: dict[str, object] = {
            "at": self.at,
            "request_id": self.request_id,
            "key_name": self.key_name,
            "model": self.model,
            "route": self.route,
            "status": self.status,
            "streamed": self.streamed,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "ttft": self.ttft,
            "first_byte": self.first_byte,
            "load": self.load,
            "requested": self.requested,
            "duration": self.duration,
            "tokens_per_second": self.tokens_per_second,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "error_code": self.error_code,
            "outcome": self.outcome,
        }
        if self.request_body is not None:
            out["request_body"] = self.request_body
        if self.response_body is not None:
            out["response_body"] = self.response_body
        for name in ("request_headers", "response_headers"):
            if (value := getattr(self, name)) is not None:
                out[name] = value
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        out["method"] = self.method
        out["error_message"] = self.error_message
        out["rule"] = dict(self.rule) if self.rule is not None else None
        return out
