"""Which scope each path needs: the one table that auth, observation and the routes read.

Classes: ``open`` (``/health``, ``/``, the web UI's files), ``inference`` (model routes, the
model list), ``read`` (status, logs, events, security report), ``admin`` (load/unload, config
export, upstream passthrough) and ``any`` (unknown paths: a valid key of any scope, so a 404
never tells an unauthenticated client which routes exist). Imports nothing of ``http``, so
every module there may read it without a cycle.
"""

from __future__ import annotations

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
    # llama-swap's pass-through prefixes routed by the body's `model`: stable-diffusion.cpp's
    # /sdapi, audio.cpp's task API (sent without /audioapi) and the versionless /v/ routes
    # (sent without /v, for a backend whose proxy URL ends in /v1; llama-swap's issue #728)
    "/sdapi/v1/txt2img",
    "/sdapi/v1/img2img",
    "/audioapi/v1/tasks/run",
    "/v/chat/completions",
    "/v/responses",
    "/v/completions",
    "/v/messages",
    "/v/messages/count_tokens",
    "/v/embeddings",
    "/v/rerank",
    "/v/reranking",
)
# GET routes whose model is the `model` query parameter, as in llama-swap
QUERY_ROUTED_PATHS = ("/sdapi/v1/loras", "/v1/audio/voices")
# llama-swap's ComfyUI pass-through: every path below it goes to the model `comfyui_auto`
COMFYUI_MODEL = "comfyui_auto"

OPEN, INFERENCE, READ, ADMIN = "open", "inference", "read", "admin"

# The model list, and one model of it (GET /v1/models/{id}), need the same scope.
MODEL_PREFIXES = ("/v1/models/", "/models/")
_INFERENCE_PREFIXES = (
    *(p.split("{", 1)[0] for p in INFERENCE_PATHS if "{" in p),
    *MODEL_PREFIXES,
)
_INFERENCE_EXACT = frozenset(p for p in INFERENCE_PATHS if "{" not in p) | {
    "/v1/models",
    "/models",
    "/props",  # llama-swap's /props?model=: the model's server's /props
    *QUERY_ROUTED_PATHS,
}
_READ_EXACT = frozenset(
    {
        "/running",
        "/api/events",
        "/api/security",
        "/metrics",
        "/api/activity",
        "/logs",
        "/api/memory",
        "/api/plan",
        "/api/peers",
        "/api/profiles",
        "/api/performance",
        "/api/hardware",
        "/api/inflight",
    }
)
# llama-swap's /api/captures/{id} and /api/metrics/{activity,stats}: the activity log's rows
_READ_PREFIXES = ("/logs/", "/api/captures/", "/api/metrics/")
# /api/inflight/{id}/cancel: llama-swap's cancel of an in-flight request
# /comfyui/...: any path of a ComfyUI server, as /upstream/ is any path of a model's server
_ADMIN_PREFIXES = ("/api/models/", "/upstream/", "/api/inflight/", "/comfyui/")
# llama-swap's: /unload, /upstream, /comfyui and switching the active profile
_ADMIN_EXACT = frozenset(
    {"/api/config", "/unload", "/upstream", "/comfyui", "/api/profiles/active"}
)


def route_class(path: str) -> str:
    """The scope a path needs. Unknown paths need a valid key of any scope (so a 404 never
    tells an unauthenticated client which routes exist)."""
    if path in ("/health", "/", "/ui", "/api/version") or path.startswith("/ui/"):
        return OPEN  # the web UI's static files: every API call they make carries a key
    if path in _INFERENCE_EXACT or path.startswith(_INFERENCE_PREFIXES):
        return INFERENCE
    if path in _READ_EXACT or path.startswith(_READ_PREFIXES):
        return READ
    if path in _ADMIN_EXACT or path.startswith(_ADMIN_PREFIXES):
        return ADMIN
    return "any"


def model_routed(path: str) -> bool:
    """Whether a request on ``path`` goes to a model's server or a peer (inference, ``/props``,
    ``/upstream/``, ``/comfyui/``), not the gateway's own listing or pages."""
    if path.startswith(("/upstream/", "/comfyui/")):
        return True
    if path in ("/v1/models", "/models") or path.startswith(MODEL_PREFIXES):
        return False
    return path in _INFERENCE_EXACT or path.startswith(_INFERENCE_PREFIXES)


def upstream_path(path: str) -> str:
    """The path a model route is forwarded with: llama-swap's ``/v/`` and ``/audioapi/``
    prefixes are dropped (``/v/chat/completions`` → ``/chat/completions``); others as sent."""
    if path.startswith("/v/"):
        return path[2:]
    if path.startswith("/audioapi/"):
        return path[9:]
    return path
