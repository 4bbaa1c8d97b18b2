"""llama-swap's ComfyUI pass-through: ``/comfyui/<path>`` is ``<path>`` of the model
``comfyui_auto``'s server, any method, body and query as they came.

As in llama-swap: ``/comfyui`` redirects to ``/comfyui/`` (301 for GET and HEAD, else 308, the
query kept); without a model ``comfyui_auto`` every path is 404; and only the root
``/comfyui/`` may start the model — any other path while it is not ready is 409, so a browser
tab left open on ComfyUI's assets or API never loads it again after it was unloaded.
"""

from __future__ import annotations

from aiohttp import web

from modelswap.http.errors import error_response
from modelswap.http.keys import RUNTIME
from modelswap.http.relay import proxy
from modelswap.http.route_classes import COMFYUI_MODEL
from modelswap.http.routes.admin import check_upstream_path
from modelswap.http.routes.openai import body_limit, read_body
from modelswap.states import ProcessState


async def comfyui_root(request: web.Request) -> web.Response:
    location = "/comfyui/" + ("?" + request.query_string if request.query_string else "")
    moved = request.method in ("GET", "HEAD")
    return web.Response(status=301 if moved else 308, headers={"Location": location})


async def comfyui(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    model = runtime.config.models.get(COMFYUI_MODEL)
    if model is None:
        return error_response(f"local model {COMFYUI_MODEL} not found", 404, code="not_found")
    rest = request.match_info["rest"]
    if rest:
        check_upstream_path(request.raw_path, rest)
        if runtime.router.processes[model.id].state is not ProcessState.READY:
            return error_response(
                f"model {COMFYUI_MODEL} is not loaded; only /comfyui/ can start it",
                409,
                code="conflict",
            )
    path = "/" + rest + ("?" + request.query_string if request.query_string else "")
    content_type = request.headers.get("Content-Type", "")
    body = await read_body(request, body_limit(runtime, content_type))
    return await proxy.send_to_model(
        request, runtime.router, runtime.proxy_session, model, path_qs=path, body=body
    )


def add_routes(app: web.Application) -> None:
    app.router.add_route("*", "/comfyui", comfyui_root)
    app.router.add_route("*", "/comfyui/{rest:.*}", comfyui)
