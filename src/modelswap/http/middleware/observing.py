"""Per-request observation: one record per model request (inference and ``/upstream``).

The middleware starts the clock and, when the response is done (or the client left: 499),
hands a :class:`RequestRecord` to the runtime's Observer — metrics, the activity log, the
``request.finished`` event. The proxy fills in what only it knows through :class:`RequestObs`:
the model, the time to the backend's first byte, the bytes relayed and the token usage — and,
when the answer was an error *event* inside a 200 stream (a stream opened early with loading
comments, or cut mid-answer), that error's code, so the record says "error" and not "200 ok".
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from modelswap.config.resolved import Observability
from modelswap.errors import echo
from modelswap.http.app_keys import RUNTIME, client_key
from modelswap.http.error_responses import GATEWAY_ERROR_HEADER, error_code_of, error_response
from modelswap.http.middleware.inflight_registry import CANCELLED_CODE, INFLIGHT, RESPONSE
from modelswap.http.reading import request_id
from modelswap.http.request_obs import OBS, RequestObs
from modelswap.http.route_table import inference_path
from modelswap.observe.records import RequestRecord
from modelswap.redact import Redactor
from modelswap.runtime import ModelStatus, Runtime

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CLIENT_CLOSED = 499


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


def _error_code(response: web.StreamResponse) -> str | None:
    if GATEWAY_ERROR_HEADER not in response.headers or not isinstance(response, web.Response):
        return None
    try:
        body = response.body
        data = json.loads(body if isinstance(body, bytes) else b"{}")
    except ValueError:
        return None
    return error_code_of(data)  # OpenAI's envelope or Anthropic's


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


def _with_session(
    metadata: dict[str, str] | None, request: web.Request, config: Observability
) -> dict[str, str] | None:
    """The record's metadata with ``session_id``: the first of the configured session headers
    (llama-swap's ``ui.activity.session_id``) the request carries; a policy's own
    ``context.session_id`` wins."""
    for name in config.session_headers:
        session = request.headers.get(name)
        if session:
            return {"session_id": session, **(metadata or {})}
    return metadata


def observed(path: str) -> bool:
    return inference_path(path) or path.startswith("/upstream/")


@web.middleware
async def observe_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    if not runtime.observing or not observed(request.path):
        return await handler(request)
    obs = RequestObs()
    if runtime.config.observability.capture:
        obs.capture_limit = runtime.config.observability.capture_bytes
        path = request.path
        obs.request_limit = 0 if path in NO_REQUEST_BODY else obs.capture_limit
        obs.response_limit = 0 if path in NO_RESPONSE_BODY else obs.capture_limit
    request[OBS] = obs
    registry = request.app.get(INFLIGHT)
    inflight = registry.add(request) if registry is not None else None
    status, code, response = 500, None, None
    try:
        response = await handler(request)
        status, code = response.status, _error_code(response)
        return response
    except asyncio.CancelledError:
        if inflight is not None and inflight.cancelled:  # POST /api/inflight/{id}/cancel
            code, status = CANCELLED_CODE, CLIENT_CLOSED
            if request.get(RESPONSE) is None and inflight.task is not None:
                inflight.task.uncancel()  # nothing reached the client yet: tell it why
                status = 502
                response = error_response(
                    f"Request {inflight.id} was cancelled (POST /api/inflight/{inflight.id}"
                    "/cancel) before its answer began.",
                    502,
                    code=CANCELLED_CODE,
                )
                return response
            raise
        # A client that hangs up after the stream's final [DONE] (as SDKs do) got its whole
        # answer: that is a success, not a disconnect.
        status = obs.status if obs.done_sent and obs.status else CLIENT_CLOSED
        raise
    except web.HTTPException as exc:
        status = exc.status
        raise
    finally:
        if registry is not None and inflight is not None:
            registry.remove(inflight)
        if code is None:
            code = obs.error_code  # the status was 200, the answer an error event
        if response is not None and not obs.bytes_out and isinstance(response, web.Response):
            obs.bytes_out = response.content_length or 0
        sent = request.get(RESPONSE) or response  # a Response returned is prepared after us
        record_request(
            runtime, request, obs, status, code, sent.headers if sent is not None else None
        )


def record_request(
    runtime: Runtime,
    request: web.Request,
    obs: RequestObs,
    status: int,
    code: str | None,
    response_headers: Mapping[str, str] | None,
) -> None:
    """Hand the finished request's :class:`RequestRecord` to the runtime's Observer (also the
    fast lane's, whose ``request`` is a :class:`~modelswap.http.server.fast_lane.LaneRequest`)."""
    key = client_key(request)
    redact = runtime.redactor.text
    usage = obs.usage
    load = _load_seconds(runtime.find_model(obs.model or ""), obs.at)
    streamed = bool(usage and usage.streamed)
    first = obs.first_token if streamed else obs.ttft
    metadata = _with_session(obs.metadata, request, runtime.config.observability)
    capture = obs.capture_limit
    runtime.request_finished(
        RequestRecord(
            at=obs.at,
            key_name=key.name if key is not None else None,
            model=obs.model,
            route=request.path if not request.path.startswith("/upstream/") else "/upstream",
            status=status,
            streamed=streamed,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            cached_tokens=usage.cached_tokens if usage else None,
            salted=obs.salted,
            ttft=max(0.0, first - (load or 0.0)) if first is not None else None,
            first_byte=obs.ttft,
            load=load,
            requested=redact(echo(obs.requested)) if obs.requested is not None else None,
            duration=time.monotonic() - obs.started,
            bytes_in=obs.bytes_in,
            bytes_out=obs.bytes_out,
            error_code=code,
            request_id=request_id(request),
            request_body=redact(obs.request_body.decode("utf-8", "replace")) if capture else None,
            response_body=redact(bytes(obs.response_body).decode("utf-8", "replace"))
            if capture
            else None,
            request_headers=_headers_json(request.headers, runtime.redactor) if capture else None,
            response_headers=_headers_json(response_headers, runtime.redactor)
            if capture and response_headers is not None
            else None,
            metadata={k: redact(v) for k, v in metadata.items()} if metadata else None,
        )
    )
