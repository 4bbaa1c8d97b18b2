"""Routes and their scopes: every route states its scope where it is registered, and an app
with a route that does not cannot be built; the model routes' paths, with what each is (chat,
Anthropic's shape), are one table.

Scopes: ``open`` (``/health``, ``/``, the web UI's files), ``inference`` (model routes, the
model list), ``read`` (status, logs, events, security report), ``admin`` (load/unload, config
export, upstream passthrough) and ``any`` (a valid key of any scope: ``/api/whoami``, and every
path no route serves, so a 404 never tells an unauthenticated client which routes exist).
:func:`declare` registers a route with its scope; :func:`check_declared` refuses an app that
holds a route registered another way (fail closed: the default is not ``any``);
:func:`scope_of` is what authentication asks. Imports nothing of ``http``, so every module there
may read it without a cycle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

OPEN, INFERENCE, READ, ADMIN, ANY = "open", "inference", "read", "admin", "any"
SCOPES = frozenset({OPEN, INFERENCE, READ, ADMIN, ANY})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class ModelPath:
    """A path routed by the body's ``model``, and what its answers are."""

    path: str
    chat: bool = False  # a chat completion: llama-swap's loading chunk (sendLoadingState)
    usage: bool = False  # streamed answers carry a final usage chunk when asked
    anthropic: bool = False  # its clients read Anthropic's error shape
    # The fast door serves it (http/server/fast_door.py): an OpenAI JSON body relayed to the
    # same path, the answer as the backend sends it.
    fast: bool = False


# Routed by the body's `model`. llama.cpp's own names (/completion, /infill, /reranking) too.
# llama-swap's pass-through prefixes are routed by the body's `model` as well: stable-diffusion
# .cpp's /sdapi, audio.cpp's task API (sent without /audioapi) and the versionless /v/ routes
# (sent without /v, for a backend whose proxy URL ends in /v1; llama-swap's issue #728).
MODEL_PATHS = (
    ModelPath("/v1/chat/completions", chat=True, usage=True, fast=True),
    ModelPath("/v1/completions", usage=True, fast=True),
    ModelPath("/v1/embeddings", fast=True),
    ModelPath("/v1/responses", fast=True),
    ModelPath("/v1/rerank", fast=True),
    ModelPath("/v1/reranking", fast=True),
    ModelPath("/rerank", fast=True),
    ModelPath("/reranking", fast=True),
    ModelPath("/v1/messages", anthropic=True),
    ModelPath("/v1/messages/count_tokens", anthropic=True),
    ModelPath("/completion", fast=True),
    ModelPath("/infill", fast=True),
    ModelPath("/v1/audio/{tail:.+}"),
    ModelPath("/v1/images/{tail:.+}"),
    ModelPath("/sdapi/v1/txt2img"),
    ModelPath("/sdapi/v1/img2img"),
    ModelPath("/audioapi/v1/tasks/run"),
    ModelPath("/v/chat/completions", chat=True, usage=True),
    ModelPath("/v/responses"),
    ModelPath("/v/completions", usage=True),
    ModelPath("/v/messages", anthropic=True),
    ModelPath("/v/messages/count_tokens", anthropic=True),
    ModelPath("/v/embeddings"),
    ModelPath("/v/rerank"),
    ModelPath("/v/reranking"),
)
INFERENCE_PATHS = tuple(p.path for p in MODEL_PATHS)
CHAT_PATHS = frozenset(p.path for p in MODEL_PATHS if p.chat)
USAGE_PATHS = frozenset(p.path for p in MODEL_PATHS if p.usage)
ANTHROPIC_PATHS = frozenset(p.path for p in MODEL_PATHS if p.anthropic)
FAST_PATHS = frozenset(p.path for p in MODEL_PATHS if p.fast)
# GET routes whose model is the `model` query parameter, as in llama-swap
QUERY_ROUTED_PATHS = ("/sdapi/v1/loras", "/v1/audio/voices")
# llama-swap's ComfyUI pass-through: every path below it goes to the model `comfyui_auto`
COMFYUI_MODEL = "comfyui_auto"

# The model list, and one model of it (GET /v1/models/{id}), need the same scope.
MODEL_PREFIXES = ("/v1/models/", "/models/")
_INFERENCE_PREFIXES = tuple(p.split("{", 1)[0] for p in INFERENCE_PATHS if "{" in p)
_INFERENCE_EXACT = frozenset(p for p in INFERENCE_PATHS if "{" not in p) | {
    "/props",  # llama-swap's /props?model=: the model's server's /props
    *QUERY_ROUTED_PATHS,
}

# ---- each route's scope, declared where it is registered ------------------------------------

ScopeTable = dict[str, str]  # a resource's canonical path -> the scope it needs
ROUTE_SCOPES: web.AppKey[ScopeTable] = web.AppKey("route_scopes", dict)


class UndeclaredRouteError(RuntimeError):
    """A route was registered without a scope (not through :func:`declare`)."""


def declare(
    app: web.Application, method: str, path: str, handler: Handler, scope: str
) -> web.AbstractRoute:
    """Register ``method path`` (``*``: any method; GET also answers HEAD) with the scope a
    request on it needs."""
    if method == "GET":
        route = app.router.add_get(path, handler)
    else:
        route = app.router.add_route(method, path, handler)
    _record(app, route.resource, scope)
    return route


def declare_static(app: web.Application, prefix: str, directory: Path, scope: str) -> None:
    """Serve ``directory``'s files below ``prefix`` with the scope they need."""
    _record(app, app.router.add_static(prefix, directory, append_version=False), scope)


def _record(app: web.Application, resource: web.AbstractResource | None, scope: str) -> None:
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; one of {sorted(SCOPES)}")
    if resource is None:
        raise UndeclaredRouteError("a route without a resource cannot be given a scope")
    if ROUTE_SCOPES not in app:
        app[ROUTE_SCOPES] = {}
    known = app[ROUTE_SCOPES].setdefault(resource.canonical, scope)
    if known != scope:
        raise ValueError(
            f"{resource.canonical} is declared both {known!r} and {scope!r}: one path, one scope"
        )


def check_declared(app: web.Application) -> None:
    """Refuse an app holding a route whose scope was never declared."""
    table = app.get(ROUTE_SCOPES, {})
    missing = sorted({r.canonical for r in app.router.resources()} - set(table))
    if missing:
        raise UndeclaredRouteError(
            "routes registered without a scope (use route_table.declare): " + ", ".join(missing)
        )


def scope_of(request: web.Request) -> str:
    """The scope a request needs: its route's, declared; ``any`` where no route serves it (a
    404 or a 405 asks only for a valid key, whatever its scope); ``admin`` for a route that
    somehow lacks one (never: :func:`check_declared`)."""
    return scope_for(request.app, request.match_info)


def scope_for(app: web.Application, match_info: web.UrlMappingMatchInfo) -> str:
    """:func:`scope_of` for a request that ``app``'s router resolved to ``match_info``."""
    resource = match_info.route.resource
    if resource is None:
        return ANY
    return app.get(ROUTE_SCOPES, {}).get(resource.canonical, ADMIN)


def inference_path(path: str) -> bool:
    """A model route's path (the body's, the query's or /props's model), not the model list."""
    return path in _INFERENCE_EXACT or path.startswith(_INFERENCE_PREFIXES)


def model_routed(path: str) -> bool:
    """Whether a request on ``path`` goes to a model's server or a peer (inference, ``/props``,
    ``/upstream/``, ``/comfyui/``), not the gateway's own listing or pages."""
    return path.startswith(("/upstream/", "/comfyui/")) or inference_path(path)


def upstream_path(path: str) -> str:
    """The path a model route is forwarded with: llama-swap's ``/v/`` and ``/audioapi/``
    prefixes are dropped (``/v/chat/completions`` → ``/chat/completions``); others as sent."""
    if path.startswith("/v/"):
        return path[2:]
    if path.startswith("/audioapi/"):
        return path[9:]
    return path
