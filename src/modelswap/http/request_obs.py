"""What the relay tells the observing middleware about one request, as it happens: the model,
the time to the backend's first byte, the bytes relayed, the token usage, an error event inside a
200 stream. Filled below (routes, relay), read above (:mod:`modelswap.http.middleware.observing`),
so the relay never imports the middleware.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from aiohttp import web

from modelswap.observe.usage import UsageTracker


@dataclass
class RequestObs:
    started: float = field(default_factory=time.monotonic)
    at: float = field(default_factory=time.time)
    model: str | None = None
    requested: str | None = None  # the body's `model`, as the client wrote it
    ttft: float | None = None  # the backend's first byte (RequestRecord.first_byte)
    first_token: float | None = None  # streamed: the first event carrying generated text
    bytes_in: int = 0
    bytes_out: int = 0
    usage: UsageTracker | None = None
    capture_limit: int = 0  # >0: capture on, keep this many bytes of each body
    request_limit: int = 0  # of the request body (0 for the binary ones, as llama-swap)
    response_limit: int = 0
    status: int | None = None  # what the backend answered, once relaying began
    done_sent: bool = False  # the stream's final "data: [DONE]" reached the client
    # An error event ended a stream whose 200 had gone out, or the backend's own error answer
    # (its code and message, read from its JSON: :func:`backend_explained`).
    error_code: str | None = None
    error_message: str | None = None
    request_body: bytes = b""
    response_body: bytearray = field(default_factory=bytearray)
    metadata: dict[str, str] | None = None  # the Swap Policy Language's context.<key>
    salted: bool = False  # the body carries a cache_salt (the prompt cache's proof: issue 38)

    def first_byte(self) -> None:
        if self.ttft is None:
            self.ttft = time.monotonic() - self.started

    def tap(self, chunk: bytes) -> bytes:
        """A response chunk on its way to the client: count it, read usage, maybe strip."""
        out = self.usage.feed(chunk) if self.usage is not None else chunk
        if self.first_token is None and self.usage is not None and self.usage.saw_text:
            self.first_token = time.monotonic() - self.started
        self._sent(out)
        if b"[DONE]" in out[-32:]:
            self.done_sent = True
        return out

    def wrote(self, data: bytes) -> None:
        """The gateway itself wrote ``data`` to the client (loading comments, an error event)."""
        self._sent(data)

    def error_event(self, code: str | None, message: str | None = None) -> None:
        """An error went to the client — an event after its 200, or the backend's own error
        answer: the request failed. The first error is the one that counts."""
        if self.error_code is None:
            self.error_code = code or "upstream_error"
            self.error_message = message

    def error_body(self) -> None:
        """The answer is an error: its body is kept with a capture, also on a route whose
        bodies are not (an image route's error is JSON text, not an image)."""
        self.response_limit = self.capture_limit

    def finish(self) -> bytes:
        out = self.usage.finish() if self.usage is not None else b""
        self._sent(out)
        return out

    def _sent(self, data: bytes) -> None:
        self.bytes_out += len(data)
        room = self.response_limit - len(self.response_body)
        if room > 0 and data:
            self.response_body += data[:room]


OBS: web.RequestKey[RequestObs] = web.RequestKey("obs", RequestObs)
