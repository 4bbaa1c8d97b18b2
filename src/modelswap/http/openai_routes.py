"""OpenAI- and Anthropic-compatible routes, routed by the ``model`` named in the body."""

from __future__ import annotations

from aiohttp import web

from modelswap.errors import BodyTooLargeError
from modelswap.http import proxy
from modelswap.http.catalog import model_rows
from modelswap.http.extract import extract_model, is_multipart, replace_model, wants_stream
from modelswap.http.filters import apply_filters
from modelswap.http.keys import RUNTIME, client_key
from modelswap.http.observing import OBS
from modelswap.observe.usage import UsageTracker, request_usage_injection
from modelswap.runtime import Runtime

# Streamed answers on these carry a final usage chunk when asked (stream_options).
USAGE_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})

# Routed by the body's `model`. llama.cpp's own names (/completion, /infill, /reranking) too.
INFERENCE_PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/embeddings",
    "/v1/responses",
    "/v1/rerank",
    "/v1/reranking",
    "/rerank",
    "/reranking",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/completion",
    "/infill",
    "/v1/audio/{tail:.+}",
    "/v1/images/{tail:.+}",
)


async def read_body(request: web.Request, limit: int) -> bytes:
    """The whole body, refusing more than ``limit`` bytes (before reading, when declared)."""
    if request.content_length is not None and request.content_length > limit:
        raise BodyTooLargeError(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_any():
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError(limit)
        chunks.append(chunk)
    return b"".join(chunks)


def body_limit(runtime: Runtime, content_type: str) -> int:
    """Multipart uploads (audio, images) have their own cap; everything else the JSON one."""
    if content_type.lower().startswith("multipart/"):
        return runtime.config.max_upload_body_bytes
    return runtime.config.max_request_body_bytes


async def inference(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    content_type = request.headers.get("Content-Type", "application/json")
    body = await read_body(request, body_limit(runtime, content_type))
    name = extract_model(content_type, body)
    model = runtime.resolve(name, client_key(request))
    layers = model.filters_for(name)
    if layers and not is_multipart(content_type):  # filters edit JSON bodies only
        body = apply_filters(body, layers)
    if model.upstream_name != name:
        body = replace_model(content_type, body, model.upstream_name)
    stream = wants_stream(content_type, body)
    obs = request.get(OBS)
    if obs is not None:
        obs.model, obs.bytes_in = model.id, len(body)
        obs.request_body = body[: obs.capture_limit]
        injected = request_usage_injection(body) if request.path in USAGE_PATHS else None
        if injected is not None:  # ask for the usage chunk; the client will not see it
            body = injected
        obs.usage = UsageTracker(streamed=stream, strip_usage_chunk=injected is not None)
    return await proxy.send_to_model(
        request,
        runtime.router,
        runtime.proxy_session,
        model,
        path_qs=request.path_qs,
        body=body,
        stream=stream,
    )


async def list_models(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    rows = model_rows(runtime, client_key(request))
    return web.json_response({"object": "list", "data": rows})


def add_routes(app: web.Application) -> None:
    for path in INFERENCE_PATHS:
        app.router.add_post(path, inference)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/models", list_models)
