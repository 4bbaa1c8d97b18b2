"""Management routes: gateway health, running models, unload, logs, raw upstream passthrough."""

from __future__ import annotations

import html
import re
from urllib.parse import quote

from aiohttp import web

from modelswap import __version__, jsonsafe
from modelswap.errors import MAX_MODEL_NAME_BYTES, BadRequestError, ModelNotFoundError
from modelswap.http.app_keys import RUNTIME
from modelswap.http.catalog import add_plan_fields, running_rows
from modelswap.http.error_responses import error_response
from modelswap.http.reading import check_upstream_path, raw_query, read_body
from modelswap.http.relay.dispatch import send_to_model
from modelswap.http.request_obs import OBS
from modelswap.http.route_table import ADMIN, INFERENCE, OPEN, READ, declare
from modelswap.routing.resolve import close_names
from modelswap.runtime import Runtime


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def index(request: web.Request) -> web.Response:
    """Open to all, so it names no model (GET /v1/models does, to those allowed)."""
    return web.json_response(
        {
            "name": "modelswap",
            "version": __version__,
            "endpoints": ["/v1/models", "/v1/chat/completions", "/running", "/health"],
        }
    )


async def running(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    return web.json_response({"running": add_plan_fields(runtime, running_rows(runtime))})


async def unload_all(request: web.Request) -> web.Response:
    """llama-swap's ``{"msg": "ok"}``, with the models stopped beside it."""
    unloaded = await request.app[RUNTIME].unload(None)
    return web.json_response({"msg": "ok", "unloaded": unloaded})


async def unload_everything(request: web.Request) -> web.Response:
    """llama-swap's ``GET /unload``: every model stopped, answered with ``OK``."""
    await request.app[RUNTIME].unload(None)
    return web.Response(text="OK")


async def unload_one(request: web.Request) -> web.Response:
    """llama-swap answers ``OK`` (text): so does this, unless the client accepts JSON, which
    gets modelswap's ``{"msg": "ok", "unloaded": [...]}``."""
    runtime = request.app[RUNTIME]
    model = runtime.resolve(request.match_info["model"])
    unloaded = await runtime.unload([model.id])
    if "application/json" in request.headers.get("Accept", ""):
        return web.json_response({"msg": "ok", "unloaded": unloaded})
    return web.Response(text="OK")


def _profiles_body(runtime: Runtime) -> dict[str, object]:
    sched = runtime.config.scheduling
    rows = []
    for name, pins in sched.profiles.items():
        row: dict[str, object] = {"name": name, "pins": dict(pins)}
        if name in sched.profile_descriptions:
            row["description"] = sched.profile_descriptions[name]
        rows.append(row)
    return {"profiles": rows, "active": runtime.active_profile}


async def profiles(request: web.Request) -> web.Response:
    """llama-swap's profiles: each with its models, and the active one."""
    return web.json_response(_profiles_body(request.app[RUNTIME]))


async def active_profile(request: web.Request) -> web.Response:
    return web.json_response({"active": request.app[RUNTIME].active_profile})


async def switch_profile(request: web.Request) -> web.Response:
    """``PUT /api/profiles/active`` with ``{"name": NAME}`` (or null for none): its models are
    loaded and pinned; the last profile's may be evicted again."""
    runtime = request.app[RUNTIME]
    body = await read_body(request, 4096)
    try:
        data = jsonsafe.loads(body)
    except ValueError as exc:
        raise BadRequestError('The body must be JSON: {"name": PROFILE}.') from exc
    name = data.get("name") if isinstance(data, dict) else ""
    if name is not None and not isinstance(name, str):
        raise BadRequestError("`name` must be a profile name or null.", param="name")
    try:
        await runtime.switch_profile(name)
    except KeyError:
        known = ", ".join(runtime.config.scheduling.profiles) or "none"
        raise BadRequestError(
            f"{name!r} is not a profile (profiles: {known}).", param="name"
        ) from None
    return web.json_response(_profiles_body(runtime))


async def version(request: web.Request) -> web.Response:
    """llama-swap's ``/api/version`` shape (a release has no commit or build date to give)."""
    return web.json_response(
        {"version": __version__, "commit": "unknown", "build_date": "unknown", "name": "modelswap"}
    )


async def upstream_index(request: web.Request) -> web.Response:
    """llama-swap's ``GET /upstream``: a page linking each model's ``/upstream/<model>/``."""
    runtime = request.app[RUNTIME]
    items = "".join(
        f'<li><a href="/upstream/{quote(model_id)}/">{html.escape(model_id)}</a></li>'
        for model_id, model in runtime.config.models.items()
        if not model.unlisted
    )
    page = f"<!doctype html><title>Upstream</title><h1>Upstream</h1><ul>{items}</ul>"
    return web.Response(text=page, content_type="text/html")


async def props(request: web.Request) -> web.StreamResponse:
    """``/props?model=NAME``: llama.cpp's ``/props`` of that model's server (started if
    needed), as llama-swap routes it for llama.cpp's own web UI."""
    runtime = request.app[RUNTIME]
    name = request.query.get("model")
    if not name:
        raise BadRequestError("`model` is required: /props?model=NAME.", param="model")
    model = runtime.resolve(name)
    obs = request.get(OBS)
    if obs is not None:
        obs.model = model.id
    return await send_to_model(request, runtime, model, path_qs="/props", body=b"")


async def load_one(request: web.Request) -> web.Response:
    """Load a model on demand (as a request would: groups and budgets apply)."""
    runtime = request.app[RUNTIME]
    model = runtime.resolve(request.match_info["model"])
    await runtime.load(model.id)
    return web.json_response({"loaded": model.id})


async def logs(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    model = runtime.resolve(request.match_info["model"])
    lines_param = request.query.get("lines")
    try:
        count = int(lines_param) if lines_param is not None else None
    except ValueError as exc:
        raise BadRequestError("`lines` must be a whole number.", param="lines") from exc
    if count is not None and count < 0:
        raise BadRequestError("`lines` must not be negative.", param="lines")
    tail = runtime.model(model.id).logs.tail(count)
    text = runtime.redactor.text("\n".join(tail)) + ("\n" if tail else "")
    return web.Response(text=text, content_type="text/plain", headers={"X-Accel-Buffering": "no"})


async def upstream(request: web.Request) -> web.StreamResponse:
    """``/upstream/<model>/<path>``: any method, sent to the model's server as it came.

    Model ids may contain ``/``, so the longest prefix of the path that names a model wins.
    """
    runtime = request.app[RUNTIME]
    rest = request.match_info["rest"]
    check_upstream_path(request.raw_path, rest)
    parts = rest.split("/")
    # Only prefixes that could be a model name are tried: the work stays linear in the path.
    longest, length = 0, -1
    while longest < len(parts) and length + 1 + len(parts[longest]) <= MAX_MODEL_NAME_BYTES:
        length += 1 + len(parts[longest])
        longest += 1
    for cut in range(longest, 0, -1):
        model = runtime.config.resolve("/".join(parts[:cut]))
        if model is not None:
            break
    else:
        raise ModelNotFoundError(parts[0], close_names(parts[0], runtime.config.names()))
    path = "/" + "/".join(parts[cut:])
    ignored = any(re.search(p, path) for p in runtime.config.upstream_ignore_paths)
    if ignored and not runtime.model(model.id).ready:
        return error_response(  # upstream.ignorePaths: never a reason to start or swap
            f"{path} does not load a model (upstream.ignorePaths) and {model.id} is not ready.",
            503,
            code="model_not_ready",
        )
    path += raw_query(request)
    body = await read_body(request, runtime.config.max_request_body_bytes)
    obs = request.get(OBS)
    if obs is not None:
        obs.model, obs.bytes_in = model.id, len(body)
    return await send_to_model(request, runtime, model, path_qs=path, body=body)


def add_routes(app: web.Application) -> None:
    declare(app, "GET", "/", index, OPEN)
    declare(app, "GET", "/health", health, OPEN)
    declare(app, "GET", "/running", running, READ)
    declare(app, "GET", "/unload", unload_everything, ADMIN)  # llama-swap's, a GET that acts
    declare(app, "GET", "/api/version", version, OPEN)
    declare(app, "GET", "/upstream", upstream_index, ADMIN)
    declare(app, "GET", "/props", props, INFERENCE)  # llama-swap's /props?model=
    declare(app, "GET", "/api/profiles", profiles, READ)
    # One path, one scope: switching the active profile is admin, so reading it is too.
    declare(app, "GET", "/api/profiles/active", active_profile, ADMIN)
    declare(app, "PUT", "/api/profiles/active", switch_profile, ADMIN)
    declare(app, "POST", "/api/models/unload", unload_all, ADMIN)
    declare(app, "POST", "/api/models/unload/{model:.+}", unload_one, ADMIN)
    declare(app, "POST", "/api/models/load/{model:.+}", load_one, ADMIN)
    declare(app, "GET", "/logs/{model:.+}", logs, READ)
    declare(app, "*", "/upstream/{rest:.+}", upstream, ADMIN)
