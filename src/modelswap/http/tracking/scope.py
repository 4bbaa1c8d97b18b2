"""One model request's bookkeeping, the same on both doors: its observation record
(:class:`RequestObs`), its in-flight entry, the drain's count, the request id, the key it came
with, the cancel rules and, at its end, the :class:`RequestRecord` handed to the runtime's
Observer (metrics, the activity log, the ``request.finished`` event).

aiohttp's observing middleware is a thin adapter over it; the fast door makes one directly.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from modelswap.config.resolved import ApiKey, Observability
from modelswap.errors import echo
from modelswap.http.error_responses import error_response
from modelswap.http.request_obs import RequestObs
from modelswap.http.route_table import inference_path
from modelswap.http.tracking.drain import Drain
from modelswap.http.tracking.inflight import CANCELLED_CODE, InflightRegistry, InflightRequest
from modelswap.observe.records import RequestRecord
from modelswap.redact import Redactor
from modelswap.runtime import ModelStatus, Runtime

CLIENT_CLOSED = 499
MESSAGE_CHARS = 1024  # of an error's message, as its record keeps it
# llama-swap's captureFieldsByPath: audio and image bodies are not captured, only headers
NO_REQUEST_BODY = frozenset(
    {"/v1/audio/voices", "/v1/audio/transcriptions", "/v1/images/edits", "/sdapi/v1/img2img"}
)
NO_RESPONSE_BODY = frozenset(
    {
        "/v1/audio/speech",
        "/v1/images/generations",
        "/v1/images/edits",
        "/sdapi/v1/txt2img",
        "/sdapi/v1/img2img",
    }
)


def observed(path: str) -> bool:
    """Whether a request to ``path`` is a model request (inference or ``/upstream``)."""
    return inference_path(path) or path.startswith("/upstream/")


class RequestScope:
    """One model request, from its head to its record. ``status`` and ``code`` are what the
    record says (set by the door as the answer goes), with the error's ``error_message`` and
    the ``rule`` that refused it (:func:`~modelswap.http.error_responses.explained`);
    ``response_headers`` once its head went out."""

    __slots__ = (
        "_decoded",
        "_drain",
        "_raw",
        "_record",
        "_registry",
        "_response_headers",
        "_sent_more",
        "_sent_raw",
        "code",
        "error_message",
        "inflight",
        "key",
        "method",
        "obs",
        "path",
        "remote",
        "request_id",
        "rule",
        "runtime",
        "status",
    )

    def __init__(
        self,
        runtime: Runtime,
        path: str,
        *,
        method: str,
        request_id: str,
        remote: str | None,
        headers: CIMultiDictProxy[str] | None = None,
        raw_headers: Sequence[tuple[bytes, bytes]] = (),
        key: ApiKey | None = None,
        registry: InflightRegistry | None = None,
        task: asyncio.Task[object] | asyncio.Task[None] | None = None,
        drain: Drain | None = None,
        record: bool = True,
    ) -> None:
        self.runtime = runtime
        self.path = path
        self.method = method
        self.request_id = request_id
        self.remote = remote
        self._decoded = headers
        self._raw = raw_headers
        self.key = key
        self.status = 500
        self.code: str | None = None
        self.error_message: str | None = None  # the gateway's error, as the client read it
        self.rule: Mapping[str, object] | None = None  # the rule that refused it (issue 41)
        self._response_headers: Mapping[str, str] | None = None
        self._sent_raw: Sequence[tuple[bytes, bytes]] | None = None
        self._sent_more: Callable[[], Sequence[tuple[bytes, bytes]]] | None = None
        obs = self.obs = RequestObs()
        capture = runtime.config.observability
        if capture.capture:
            obs.capture_limit = capture.capture_bytes
            obs.request_limit = 0 if path in NO_REQUEST_BODY else obs.capture_limit
            obs.response_limit = 0 if path in NO_RESPONSE_BODY else obs.capture_limit
        self._registry = registry
        self.inflight = registry.add(self, task) if registry is not None else None
        self._drain = drain
        if drain is not None:
            drain.begin()
        self._record = record

    @property
    def headers(self) -> Mapping[str, str]:
        """The request's headers (decoded when first read: the fast door holds bytes)."""
        if self._decoded is None:
            self._decoded = _decode(self._raw)
        return self._decoded

    @property
    def response_headers(self) -> Mapping[str, str] | None:
        """The answer's headers, once its head went out (decoded when first read)."""
        raw = self._sent_raw
        if self._response_headers is None and raw is not None:
            more = self._sent_more
            self._response_headers = _decode(raw if more is None else [*raw, *more()])
        return self._response_headers

    @response_headers.setter
    def response_headers(self, headers: Mapping[str, str]) -> None:
        self._response_headers = headers

    def sent(
        self,
        raw_headers: Sequence[tuple[bytes, bytes]],
        more: Callable[[], Sequence[tuple[bytes, bytes]]] | None = None,
    ) -> None:
        """The answer's head went out with ``raw_headers`` (the fast door's, as bytes), then
        ``more()``'s (made only if the headers are read: the key's x-ratelimit-*)."""
        self._sent_raw = raw_headers
        self._sent_more = more

    def cancelled(self, answered: bool) -> web.Response | None:
        """The task serving the request was cancelled: by an operator (``POST
        /api/inflight/{id}/cancel``) — a 502 to answer when nothing reached the client yet
        (returned; the task goes on) — or by the client leaving (499). A client that hangs up
        after the stream's final ``[DONE]`` (as SDKs do) got its whole answer: a success."""
        inflight = self.inflight
        obs = self.obs
        if inflight is not None and inflight.cancelled:
            self.code = CANCELLED_CODE
            if answered or inflight.task is None:
                self.status = CLIENT_CLOSED
                return None
            inflight.task.uncancel()  # nothing reached the client yet: tell it why
            self.status = 502
            return error_response(
                f"Request {inflight.id} was cancelled (POST /api/inflight/{inflight.id}"
                "/cancel) before its answer began.",
                502,
                code=CANCELLED_CODE,
            )
        self.status = obs.status if obs.done_sent and obs.status else CLIENT_CLOSED
        return None

    def finish(self) -> None:
        """The request is over: out of the in-flight table and the drain's count; its record
        to the Observer."""
        self.forget()
        if self._record:
            self._to_observer()

    def forget(self) -> None:
        """Out of the in-flight table and the drain's count, unrecorded (the fast door handed
        the request to aiohttp's path, which records it)."""
        if self._registry is not None and self.inflight is not None:
            self._registry.remove(self.inflight)
            self.inflight = None
        if self._drain is not None:
            self._drain.end()
            self._drain = None

    def _to_observer(self) -> None:
        runtime = self.runtime
        obs = self.obs
        key = self.key
        redactor = runtime.redactor
        redact = redactor.text
        usage = obs.usage
        load = _load_seconds(runtime.find_model(obs.model or ""), obs.at)
        streamed = bool(usage and usage.streamed)
        completion = usage.completion_tokens if usage else None
        if completion is None and streamed and self.status == CLIENT_CLOSED:
            completion = usage.received() if usage else None  # a stop: what it got
        message = self.error_message or obs.error_message
        rule = self.rule
        first = obs.first_token if streamed else obs.ttft
        metadata = self._with_session(obs.metadata, runtime.config.observability)
        capture = obs.capture_limit
        path = self.path
        # (decoded only for a capture: nothing else reads them here)
        response_headers = self.response_headers if capture else None
        runtime.request_finished(
            RequestRecord(
                at=obs.at,
                key_name=key.name if key is not None else None,
                model=obs.model,
                route=path if not path.startswith("/upstream/") else "/upstream",
                status=self.status,
                streamed=streamed,
                prompt_tokens=usage.prompt_tokens if usage else None,
                completion_tokens=completion,
                cached_tokens=usage.cached_tokens if usage else None,
                salted=obs.salted,
                ttft=max(0.0, first - (load or 0.0)) if first is not None else None,
                first_byte=obs.ttft,
                load=load,
                requested=_requested(redactor, obs.requested)
                if obs.requested is not None
                else None,
                duration=time.monotonic() - obs.started,
                bytes_in=obs.bytes_in,
                bytes_out=obs.bytes_out,
                error_code=self.code or obs.error_code,
                request_id=self.request_id,
                request_body=redact(obs.request_body.decode("utf-8", "replace"))
                if capture
                else None,
                response_body=redact(bytes(obs.response_body).decode("utf-8", "replace"))
                if capture
                else None,
                request_headers=_headers_json(self.headers, redactor) if capture else None,
                response_headers=_headers_json(response_headers, redactor)
                if capture and response_headers is not None
                else None,
                metadata={k: redact(v) for k, v in metadata.items()} if metadata else None,
                method=self.method,
                error_message=redact(message[:MESSAGE_CHARS]) if message else None,
                rule=_masked_rule(redactor, rule) if rule else None,
            )
        )

    def _with_session(
        self, metadata: dict[str, str] | None, config: Observability
    ) -> dict[str, str] | None:
        """The record's metadata with ``session_id``: the first of the configured session
        headers (llama-swap's ``ui.activity.session_id``) the request carries; a policy's own
        ``context.session_id`` wins."""
        for name in config.session_headers:
            session = self.headers.get(name)
            if session:
                return {"session_id": session, **(metadata or {})}
        return metadata


# The ``model`` names clients sent, as records show them (redacted, bounded): a few names come
# over and over, and redacting one costs ~2 µs. Kept for one redactor (a reload makes another;
# a redactor never changes).
_ECHOED: dict[str, str] = {}
_ECHOED_BY: list[Redactor] = []
_ECHO_KEPT = 1024  # names remembered, each of at most _ECHO_CHARS characters
_ECHO_CHARS = 256


def _requested(redactor: Redactor, requested: str) -> str:
    """``requested`` as the record shows it: :func:`echo`'d and redacted."""
    if not _ECHOED_BY or _ECHOED_BY[0] is not redactor:
        _ECHOED.clear()
        _ECHOED_BY[:] = [redactor]
    shown = _ECHOED.get(requested)
    if shown is None:
        shown = redactor.text(echo(requested))
        if len(requested) <= _ECHO_CHARS and len(_ECHOED) < _ECHO_KEPT:
            _ECHOED[requested] = shown
    return shown


def _masked_rule(redactor: Redactor, rule: Mapping[str, object]) -> Mapping[str, object]:
    """``rule`` with secrets masked: a policy's clause is its text with macros expanded."""
    masked = redactor.data(rule)
    return masked if isinstance(masked, dict) else {}


def _decode(raw: Sequence[tuple[bytes, bytes]]) -> CIMultiDictProxy[str]:
    pairs = ((name.decode("latin-1"), value.decode("latin-1")) for name, value in raw)
    return CIMultiDictProxy(CIMultiDict(pairs))


def _headers_json(headers: Mapping[str, str], redactor: Redactor) -> str:
    """Headers as a JSON object (first value of each), credentials masked."""
    out: dict[str, str] = {}
    for name, value in redactor.headers(list(headers.items())):
        out.setdefault(name, value)
    return json.dumps(out)


def _load_seconds(model: ModelStatus | None, arrived: float) -> float | None:
    """How long a request that arrived at ``arrived`` waited for its model to start: a cold
    start's load, kept apart from the TTFT. None when the model was ready before it came."""
    if model is None or model.ready_at is None or model.ready_at <= arrived:
        return None
    return model.ready_at - arrived


SCOPE: web.RequestKey[RequestScope] = web.RequestKey("scope", RequestScope)
__all__ = ["CLIENT_CLOSED", "SCOPE", "InflightRequest", "RequestScope", "observed"]
