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
)

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
# /api/inflight/{id}/cancel: llama-swap's cancel of an in-flight request
_ADMIN_PREFIXES = ("/api/models/", "/upstream/", "/api/inflight/")
# llama-swap's: /unload, /upstream, and switching the active profile
_ADMIN_EXACT = frozenset({"/api/config", "/unload", "/upstream", "/api/profiles/active"})


def route_class(path: str) -> str:
    """The scope a path needs. Unknown paths need a valid key of any scope (so a 404 never
    tells an unauthenticated client which routes exist)."""
    if path in ("/health", "/", "/ui", "/api/version") or path.startswith("/ui/"):
        return OPEN  # the web UI's static files: every API call they make carries a key
    if path in _INFERENCE_EXACT or path.startswith(_INFERENCE_PREFIXES):
        return INFERENCE
    if path in _READ_EXACT or path.startswith("/logs/"):
        return READ
    if path in _ADMIN_EXACT or path.startswith(_ADMIN_PREFIXES):
        return ADMIN
    return "any"
