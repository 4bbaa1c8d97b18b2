"""OpenAI- and Anthropic-compatible routes, routed by the ``model`` named in the body."""

from __future__ import annotations

from aiohttp import web

from modelswap.errors import BadRequestError
from modelswap.http.app_keys import RUNTIME, client_key
from modelswap.http.catalog import model_row, model_rows, peer_rows
from modelswap.http.error_responses import error_response
from modelswap.http.reading import body_limit, read_body
from modelswap.http.relay.dispatch import MAX_HOPS, dispatch, hops, send_to_model
from modelswap.http.relay.extract import parse_request
from modelswap.http.request_obs import OBS
from modelswap.http.route_table import INFERENCE, INFERENCE_PATHS, QUERY_ROUTED_PATHS, declare


async def inference(request: web.Request) -> web.StreamResponse:
    runtime = request.app[RUNTIME]
    if hops(request) >= MAX_HOPS:
        raise BadRequestError(
            f"This request went through {MAX_HOPS} gateways already: peers forward to each "
            "other in a loop; check each gateway's peers."
        )
    content_type = request.headers.get("Content-Type", "application/json")
    body = await read_body(request, body_limit(runtime, content_type))
    parsed = parse_request(content_type, body)
    obs = request.get(OBS)
    if obs is not None:  # the activity log names what was asked for, even a model that is not
        obs.requested = parsed.model
    targets = runtime.targets(parsed.model, client_key(request))
    return await dispatch(request, runtime, targets, parsed)


async def query_routed(request: web.Request) -> web.StreamResponse:
    """A GET routed by its ``model`` query parameter (``/sdapi/v1/loras?model=NAME``), sent to
    that model's server (started if needed) with its query as it came, as llama-swap does."""
    runtime = request.app[RUNTIME]
    name = request.query.get("model")
    if not name:
        raise BadRequestError(f"`model` is required: {request.path}?model=NAME.", param="model")
    obs = request.get(OBS)
    if obs is not None:
        obs.requested = name
    model = runtime.resolve(name, client_key(request))
    if obs is not None:
        obs.model = model.id
    return await send_to_model(request, runtime, model, path_qs=request.path_qs, body=b"")


async def list_models(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    key = client_key(request)
    rows = model_rows(runtime, key) + peer_rows(runtime, key)
    return web.json_response({"object": "list", "data": rows})


async def retrieve_model(request: web.Request) -> web.Response:
    """``GET /v1/models/{id}``: the model object, as OpenAI's ``models.retrieve`` reads it."""
    model_id = request.match_info["model_id"]
    row = model_row(request.app[RUNTIME], model_id, client_key(request))
    if row is None:
        return error_response(
            f"The model `{model_id}` does not exist or you do not have access to it.",
            404,
            code="model_not_found",
            param="model",
        )
    return web.json_response(row)


def add_routes(app: web.Application) -> None:
    for path in INFERENCE_PATHS:
        declare(app, "POST", path, inference, INFERENCE)
    for path in QUERY_ROUTED_PATHS:
        declare(app, "GET", path, query_routed, INFERENCE)
    declare(app, "GET", "/v1/models", list_models, INFERENCE)
    declare(app, "GET", "/models", list_models, INFERENCE)
    # Ids may hold `/` (peer models, Hugging Face names): the rest of the path is the id.
    declare(app, "GET", "/v1/models/{model_id:.+}", retrieve_model, INFERENCE)
    declare(app, "GET", "/models/{model_id:.+}", retrieve_model, INFERENCE)
