"""``/api/mcp``: the Model Context Protocol over Streamable HTTP (docs/mcp.md).

A POST carries one JSON-RPC message and is answered as the client's ``Accept`` asks:
``application/json`` (preferred when both are accepted) or one ``text/event-stream`` event. No
server-initiated stream is offered, so GET (and DELETE: no session is issued) answers 405. The
route needs the ``read`` scope; a tool that needs ``admin`` checks it per call
(:mod:`modelswap.http.mcp.registry`). A browser page may call it only from loopback or an origin
listed for CORS (:func:`origin_allowed`).
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from aiohttp import web

from modelswap import jsonsafe
from modelswap.config.resolved import Security
from modelswap.http.app_keys import RUNTIME, client_key
from modelswap.http.error_responses import GATEWAY_ERROR_HEADER
from modelswap.http.mcp import protocol
from modelswap.http.mcp.registry import Caller, Reload
from modelswap.http.mcp.tools import build_registry
from modelswap.http.reading import read_body
from modelswap.http.route_table import READ, declare

PATH = "/api/mcp"
MAX_BODY = 256 * 1024  # one JSON-RPC message: a tool's arguments are small
JSON, EVENTS = "application/json", "text/event-stream"
LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


def answer_type(accept: str) -> str | None:
    """What the client takes: JSON where it accepts it (or says nothing, or ``*/*``), else
    one event; None when it accepts neither."""
    kinds = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    if not accept.strip() or kinds & {JSON, "application/*", "*/*"}:
        return JSON
    if EVENTS in kinds or "text/*" in kinds:
        return EVENTS
    return None


def origin_allowed(security: Security, origin: str | None) -> bool:
    """A browser's request only from a loopback page or an origin the config lists for CORS:
    MCP's transport asks servers to check ``Origin``, or a page on any site could reach a
    gateway on loopback through DNS rebinding. A request without ``Origin`` is no browser's."""
    if origin is None:
        return True
    try:
        host = urlsplit(origin.strip()).hostname
    except ValueError:
        return False
    if host in LOOPBACK_HOSTS:
        return True
    if origin in security.cors_origins or "*" in security.cors_origins:
        return True
    policy = security.cors
    return policy is not None and (policy.any_origin or origin.lower() in policy.origins)


def _response(reply: protocol.Reply, kind: str) -> web.Response:
    headers = {protocol.PROTOCOL_HEADER: reply.version} if reply.version else {}
    if reply.status >= 400:
        headers[GATEWAY_ERROR_HEADER] = "1"  # the gateway's answer, not a backend's
    if reply.message is None:
        return web.Response(status=reply.status, headers=headers)
    text = json.dumps(reply.message, ensure_ascii=False, separators=(",", ":"))
    if kind == EVENTS:
        headers["Cache-Control"] = "no-cache"
        body = f"event: message\ndata: {text}\n\n"
        return web.Response(status=reply.status, text=body, content_type=EVENTS, headers=headers)
    return web.Response(status=reply.status, text=text, content_type=JSON, headers=headers)


def add_routes(app: web.Application, reload: Reload | None = None) -> None:
    """``reload``: the config file's reload (``config__reload_config``), where there is one."""
    registry = build_registry()

    async def mcp(request: web.Request) -> web.Response:
        if request.method != "POST":
            reply = protocol.error(
                None,
                protocol.METHOD_NOT_FOUND,
                f"{request.method} is not served on {PATH}: POST one JSON-RPC message "
                "(no server-initiated stream, no session to end).",
                status=405,
            )
            response = _response(reply, JSON)
            response.headers["Allow"] = "POST"
            return response
        runtime = request.app[RUNTIME]
        if not origin_allowed(runtime.config.security, request.headers.get("Origin")):
            reply = protocol.error(
                None,
                protocol.INVALID_REQUEST,
                "A page from this Origin may not call the MCP endpoint: list it in "
                "security.corsOrigins to allow it.",
                status=403,
            )
            return _response(reply, JSON)
        kind = answer_type(request.headers.get("Accept", ""))
        if kind is None:
            reply = protocol.error(
                None,
                protocol.INVALID_REQUEST,
                f"Accept must include {JSON} or {EVENTS}.",
                status=406,
            )
            return _response(reply, JSON)
        body = await read_body(request, MAX_BODY)  # over the cap: the usual 413
        try:
            message = jsonsafe.loads(body)
        except ValueError:
            reply = protocol.error(None, protocol.PARSE_ERROR, "The body is not JSON.", status=400)
            return _response(reply, kind)
        caller = Caller(runtime, client_key(request), reload)
        reply = await protocol.handle(message, request.headers, registry, caller)
        return _response(reply, kind)

    declare(app, "*", PATH, mcp, READ)
