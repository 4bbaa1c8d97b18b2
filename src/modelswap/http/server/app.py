"""The aiohttp application: routes, the error middleware, and how to serve it."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web

from modelswap.errors import ModelswapError
from modelswap.http.app_keys import RUNTIME
from modelswap.http.error_responses import (
    GATEWAY_ERROR_HEADER,
    error_response,
    in_anthropic_shape,
    response_for,
)
from modelswap.http.mcp.registry import Reload
from modelswap.http.middleware import observing, request_id
from modelswap.http.middleware.auth import auth_middleware
from modelswap.http.middleware.concurrency import GlobalLimit
from modelswap.http.middleware.cors import Cors
from modelswap.http.middleware.draining import drain_middleware
from modelswap.http.middleware.observing import observe_middleware
from modelswap.http.route_table import (
    ANTHROPIC_PATHS,
    OPEN,
    Handler,
    check_declared,
    declare,
    declare_static,
)
from modelswap.http.routes import admin as admin_routes
from modelswap.http.routes import captures as capture_routes
from modelswap.http.routes import comfyui as comfyui_routes
from modelswap.http.routes import gateway_views as gateway_view_routes
from modelswap.http.routes import inflight as inflight_routes
from modelswap.http.routes import mcp as mcp_routes
from modelswap.http.routes import observe as observe_routes
from modelswap.http.routes import openai as openai_routes
from modelswap.http.routes import peer_status as peer_routes
from modelswap.http.routes import plan as plan_routes
from modelswap.http.server import connections
from modelswap.http.tracking import client_gate
from modelswap.http.tracking.drain import DRAIN, Drain
from modelswap.http.tracking.failure_limiter import FailureLimiter
from modelswap.http.tracking.inflight import INFLIGHT, InflightRegistry
from modelswap.runtime import Runtime
from modelswap.webui import routes as webui_routes

log = logging.getLogger(__name__)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Domain errors and aiohttp's own 404/405 become OpenAI-shaped error responses."""
    try:
        return await handler(request)
    except ModelswapError as exc:
        return response_for(exc, request.app[RUNTIME].redactor)
    except ConnectionResetError as exc:
        # The client went away while its answer was being written, before aiohttp noticed and
        # cancelled us: the disconnect it is (no error response, no traceback in the log).
        raise asyncio.CancelledError() from exc
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        message = exc.text if exc.status not in (404, 405) else None
        if exc.status == 404:
            message = f"No route for {request.method} {request.path}."
        elif exc.status == 405:
            message = f"Method {request.method} is not allowed on {request.path}."
        return error_response(message or exc.reason, exc.status, code=f"http_{exc.status}")


@web.middleware
async def anthropic_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """On Anthropic's routes, every error the gateway authored — the drain's, the error
    middleware's, auth's 401/403 — in Anthropic's envelope, so its SDK reads the message."""
    response = await handler(request)
    if (
        request.path in ANTHROPIC_PATHS
        and response.status >= 400
        and GATEWAY_ERROR_HEADER in response.headers
        and isinstance(response, web.Response)
    ):
        in_anthropic_shape(response)
    return response


def create_app(runtime: Runtime, reload: Reload | None = None) -> web.Application:
    """``reload``: the config file's reload, for the MCP endpoint's ``config__reload_config``
    (SIGHUP's, where there is a file).

    Middleware order: observation (outermost) → Anthropic's error shape → the shutdown
    drain (503 once it began) → errors → CORS (answers preflights) → auth → the global
    concurrency limit → the connection goes to work (an authorised request takes it out of its
    client's share: :mod:`connections`) → routes."""
    cors = Cors(lambda: runtime.config.security.cors_origins, lambda: runtime.config.security.cors)
    drain = Drain()
    limit = GlobalLimit(lambda: runtime.config.scheduling.global_concurrency_limit)
    app = web.Application(
        middlewares=[
            observe_middleware,
            anthropic_errors,
            drain_middleware(drain),
            error_middleware,
            cors.preflight,
            auth_middleware(lambda: runtime.config.api_keys, FailureLimiter()),
            limit.middleware,  # globalConcurrencyLimit: one more is a 429 at once
            connections.at_work,
        ]
    )
    app.on_response_prepare.append(connections.keep_within_share)
    app.on_response_prepare.append(request_id.on_prepare)
    app.on_response_prepare.append(cors.on_prepare)
    app.on_response_prepare.append(observing.on_prepare)
    app.on_response_prepare.append(client_gate.on_prepare)  # x-ratelimit-*, X-Modelswap-Queue
    app[RUNTIME] = runtime
    app[INFLIGHT] = InflightRegistry()
    app[DRAIN] = drain
    openai_routes.add_routes(app)
    observe_routes.add_routes(app)  # before admin's /logs/{model}: /logs/stream wins
    admin_routes.add_routes(app)
    inflight_routes.add_routes(app)
    comfyui_routes.add_routes(app)
    capture_routes.add_routes(app)
    gateway_view_routes.add_routes(app)
    plan_routes.add_routes(app)
    peer_routes.add_routes(app)
    mcp_routes.add_routes(app, reload)
    declare(app, "GET", "/ui", webui_routes.ui_redirect, OPEN)  # its API calls carry a key
    declare(app, "GET", "/ui/", webui_routes.ui_index, OPEN)
    declare_static(app, "/ui", webui_routes.STATIC, OPEN)
    check_declared(app)  # a route without a scope refuses the app: routes fail closed
    return app
