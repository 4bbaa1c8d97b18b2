"""Observability routes: /metrics, /api/activity, live log streams."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime

import aiohttp
from aiohttp import web

from modelswap.errors import BadRequestError
from modelswap.http.app_keys import RUNTIME
from modelswap.http.relay.sse import event_stream
from modelswap.http.route_table import READ, declare
from modelswap.observe.activity import ActivityError
from modelswap.observe.records import OUTCOMES
from modelswap.observe.relabel import merge_backend_metrics
from modelswap.runtime import Runtime
from modelswap.supervisor.logs import LogBuffer
from modelswap.webui.routes import memory_view

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT = 2.0
SCRAPE_MAX_BYTES = 1024 * 1024
STREAM_QUEUE = 1000
PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


async def metrics(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    body = runtime.metrics_text()
    if runtime.config.observability.scrape_backends:
        body += await _scrape_backends(runtime)
    return web.Response(body=body, headers={"Content-Type": PROMETHEUS_TEXT})


async def _scrape_backends(runtime: Runtime) -> bytes:
    """Each ready backend's own /metrics, bounded, with a ``model`` label added."""
    ready = [m for m in runtime.models() if m.ready]

    async def one(model: str, url: str) -> tuple[str, str]:
        try:
            async with asyncio.timeout(SCRAPE_TIMEOUT):
                async with runtime.proxy_session.get(url) as resp:
                    if resp.status != 200:
                        return model, ""
                    raw = await resp.content.read(SCRAPE_MAX_BYTES)
        except (aiohttp.ClientError, TimeoutError, OSError):
            return model, ""
        return model, raw.decode("utf-8", "replace")

    parts = await asyncio.gather(*(one(m.model, m.config.proxy + "/metrics") for m in ready))
    return merge_backend_metrics(parts).encode()  # one HELP/TYPE per family, names kept


def _number(request: web.Request, name: str, kind: type[int] | type[float]) -> float | None:
    text = request.query.get(name)
    if text is None:
        return None
    try:
        return kind(text)
    except ValueError as exc:
        raise BadRequestError(f"`{name}` must be a number.", param=name) from exc


async def activity(request: web.Request) -> web.Response:
    """Newest first; filters ``model``, ``request_id``, ``since`` (unix time), ``status``,
    ``outcome`` (``ok``; ``error``: a status >= 400 or an error event inside a 200 stream;
    ``stopped``: the client went away; ``preflight``: a CORS ``OPTIONS``),
    ``session_id`` (llama-swap's session headers); paging with ``limit`` and
    ``before`` (the smallest ``id`` of the previous page)."""
    runtime = request.app[RUNTIME]
    if runtime.activity is None:
        return web.json_response({"object": "list", "data": [], "enabled": False})
    store = runtime.activity
    limit = _number(request, "limit", int)
    before = _number(request, "before", int)
    status = _number(request, "status", int)
    since = _number(request, "since", float)
    outcome = request.query.get("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        choices = ", ".join(f"`{name}`" for name in OUTCOMES)
        raise BadRequestError(f"`outcome` must be one of {choices}.", param="outcome")

    def read() -> list[dict[str, object]]:  # SQLite off the event loop
        with contextlib.suppress(ActivityError):  # a failed batch is counted; read what is there
            store.flush_now()
        return store.query(
            model=request.query.get("model"),
            request_id=request.query.get("request_id"),
            since=since,
            status=int(status) if status is not None else None,
            outcome=outcome,
            limit=int(limit) if limit is not None else 100,
            before_id=int(before) if before is not None else None,
            session_id=request.query.get("session_id"),
        )

    rows = await asyncio.to_thread(read)
    body: dict[str, object] = {"object": "list", "data": rows, "enabled": True}
    # Never off for the rest of the run (issue 38): "unavailable" (a full disk at start) until
    # the database can be opened again, which the log does by itself.
    body["state"] = store.state
    if store.problem is not None:
        body["reason"] = store.problem
    dropped = store.dropped_by()
    if dropped:
        body["dropped"] = dropped
    return web.json_response(body)


async def gateway_log(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    lines = runtime.gateway_log.tail()
    return web.Response(
        text="\n".join(lines) + ("\n" if lines else ""),
        content_type="text/plain",
        headers={"X-Accel-Buffering": "no"},
    )


async def log_stream(request: web.Request) -> web.StreamResponse:
    """SSE of a log: the buffered history first (unless ``?no-history``), then live lines.
    A reader that falls STREAM_QUEUE lines behind is disconnected."""
    runtime = request.app[RUNTIME]
    name = request.match_info.get("model")
    if name:
        buffer: LogBuffer = runtime.model(runtime.resolve(name).id).logs
    else:
        buffer = runtime.gateway_log
    queue: asyncio.Queue[str | None] = asyncio.Queue(STREAM_QUEUE)

    def on_line(line: str) -> None:
        if queue.full():
            buffer.remove_listener(on_line)
            while not queue.empty():
                queue.get_nowait()
            queue.put_nowait(None)  # too slow: end this stream
        else:
            queue.put_nowait(line)

    response = event_stream()
    buffer.add_listener(on_line)
    redact = runtime.redactor.text
    try:
        await response.prepare(request)
        if "no-history" not in request.query:
            for line in buffer.tail():
                await response.write(f"data: {redact(line)}\n\n".encode())
        while True:
            try:
                live = await asyncio.wait_for(queue.get(), 15.0)
            except TimeoutError:
                await response.write(b": keepalive\n\n")
                continue
            if live is None:
                break
            await response.write(f"data: {redact(live)}\n\n".encode())
    finally:
        buffer.remove_listener(on_line)
        with contextlib.suppress(Exception):
            await response.write_eof()
    return response


class GatewayLogHandler(logging.Handler):
    """Copies the gateway's own log records into a ring buffer (for /logs and streams)."""

    def __init__(self, buffer: LogBuffer) -> None:
        super().__init__()
        self._buffer = buffer
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self._buffer.append(self.format(record))
        except Exception:  # a log handler must never raise
            self.handleError(record)


def _after(request: web.Request) -> float | None:
    """``?after=``: unix seconds, or an RFC 3339 time as llama-swap takes."""
    text = request.query.get("after")
    if text is None or not text.strip():
        return None
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError as exc:
        raise BadRequestError(
            "`after` must be unix seconds or an RFC 3339 time (2026-01-02T15:04:05Z).",
            param="after",
        ) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


async def performance(request: web.Request) -> web.Response:
    """The system monitor's samples (llama-swap's shape); 503 ``enabled: false`` when off."""
    runtime = request.app[RUNTIME]
    after = _after(request)
    if not runtime.config.observability.performance:
        body = {"enabled": False, "reason": "performance.disabled is true in the config"}
        return web.json_response(body, status=503)
    return web.json_response(runtime.performance_view(after))


async def hardware(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    return web.json_response(runtime.redactor.data(await runtime.hardware()))


async def memory(request: web.Request) -> web.Response:
    """What the web UI's Memory page draws: budgets, models and their bands."""
    runtime = request.app[RUNTIME]
    return web.json_response(runtime.redactor.data(memory_view(runtime)))


def add_routes(app: web.Application) -> None:
    declare(app, "GET", "/api/memory", memory, READ)
    declare(app, "GET", "/api/performance", performance, READ)
    declare(app, "GET", "/api/hardware", hardware, READ)
    declare(app, "GET", "/metrics", metrics, READ)
    declare(app, "GET", "/api/activity", activity, READ)
    declare(app, "GET", "/logs", gateway_log, READ)
    declare(app, "GET", "/logs/stream", log_stream, READ)
    declare(app, "GET", "/logs/stream/{model:.+}", log_stream, READ)
