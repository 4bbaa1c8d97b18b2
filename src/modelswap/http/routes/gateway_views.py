"""Read and admin views: the security report, the (redacted) config, the live event stream, the
queue and each key's use of its limits."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import asdict, is_dataclass
from enum import Enum
from typing import Any

from aiohttp import web

from modelswap.config.export import export_config
from modelswap.config.security import security_report
from modelswap.events import DROPPED, Event
from modelswap.http.app_keys import RUNTIME, client_key
from modelswap.http.catalog import model_rows, running_rows
from modelswap.http.relay.sse import event_stream
from modelswap.http.route_table import ADMIN, ANY, READ, declare

KEEPALIVE = 15.0


async def security(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    report = security_report(runtime.config, allow_flag=runtime.allow_unauthenticated_network)
    # How a backend's whole process tree is kept within reach (supervisor/containment.py).
    report["containment"] = runtime.containment_report()
    return web.json_response(report)


async def config_export(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    return web.json_response(export_config(runtime.config, runtime.redactor))


async def whoami(request: web.Request) -> web.Response:
    """The key in use: its name and scopes (never the key), so a UI can say who it is and
    show what it may not do. Any valid key may ask; with no keys configured, everything."""
    runtime = request.app[RUNTIME]
    key = client_key(request)
    if key is None:
        scopes = ["admin", "inference", "read"] if not runtime.config.api_keys else []
        return web.json_response({"name": None, "scopes": scopes, "keys_configured": False})
    return web.json_response(
        {"name": key.name, "scopes": sorted(key.scopes), "keys_configured": True}
    )


async def queue(request: web.Request) -> web.Response:
    """Who waits, for which model and what, in the order they would be served; each client
    key's use against its limits (names, never keys). docs/endpoints.md."""
    return web.json_response(request.app[RUNTIME].queue_report())


def _plain(value: object) -> Any:
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):
        as_dict = getattr(value, "as_dict", None)
        return as_dict() if callable(as_dict) else asdict(value)
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _frame(kind: str, data: object) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def events(request: web.Request) -> web.StreamResponse:
    """Server-sent events: ``snapshot`` (what /running shows) first, then every state change,
    start progress and metadata event as it happens. The snapshot also lists every model the
    key may see (``models``: the /v1/models rows), so a read-only key sees stopped models too.
    Secrets masked."""
    runtime = request.app[RUNTIME]
    response = event_stream()
    queue: asyncio.Queue[Event] = runtime.subscribe()
    try:
        await response.prepare(request)
        snapshot = runtime.redactor.data(
            {
                "running": running_rows(runtime),
                "models": model_rows(runtime, client_key(request)),
            }
        )
        await response.write(_frame("snapshot", snapshot))
        while True:
            try:
                event = await asyncio.wait_for(queue.get(), KEEPALIVE)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            data = runtime.redactor.data({**_plain(event.data), "at": event.at})
            await response.write(_frame(event.kind, data))
            if event.kind == DROPPED:
                break
    finally:
        runtime.unsubscribe(queue)
        with contextlib.suppress(Exception):
            await response.write_eof()
    return response


def add_routes(app: web.Application) -> None:
    declare(app, "GET", "/api/security", security, READ)
    declare(app, "GET", "/api/config", config_export, ADMIN)
    declare(app, "GET", "/api/events", events, READ)
    declare(app, "GET", "/api/queue", queue, READ)
    declare(app, "GET", "/api/whoami", whoami, ANY)  # every key may ask what it may do
