"""Serving the app: the listening site with its bounds, signals, graceful shutdown."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from modelswap import __version__
from modelswap.config import Config
from modelswap.config.security import open_switches
from modelswap.http.app import create_app
from modelswap.http.bad_requests import request_handler
from modelswap.http.observe_routes import GatewayLogHandler
from modelswap.reload import ConfigReloader, Reloading
from modelswap.runtime import Runtime

log = logging.getLogger("modelswap")

_REFUSAL_BODY = (
    b'{"error":{"message":"Too many connections to modelswap.","type":"service_unavailable",'
    b'"code":"too_many_connections","param":null}}'
)
_REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nX-Modelswap-Error: 1\r\n"
    + f"Content-Length: {len(_REFUSAL_BODY)}\r\n\r\n".encode()
    + _REFUSAL_BODY
)


class _Refuse(asyncio.Protocol):
    """A connection over ``maxConnections``: one 503, then closed."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_REFUSAL)
        transport.close()


class GuardedSite(web.TCPSite):
    """A TCP site that refuses connections beyond ``max_connections``."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, max_connections: int) -> None:
        super().__init__(runner, host, port)
        self._max_connections = max_connections

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None

        def factory() -> RequestHandler | _Refuse:
            if len(server.connections) >= self._max_connections:
                return _Refuse()
            return request_handler(server)

        self._server = await asyncio.get_running_loop().create_server(
            factory, self._host, self._port, backlog=self._backlog
        )


def _reloader(runtime: Runtime, config: Config, reloading: Reloading | None) -> Callable[[], None]:
    """The SIGHUP handler; starts the file watcher when asked to."""
    if reloading is None or reloading.path is None:
        return lambda: log.warning("SIGHUP: serving the built-in demo; there is no file to reload")
    reloader = ConfigReloader(
        runtime,
        reloading.path,
        watch=reloading.watch,
        listen=(config.listen_host, config.listen_port) if reloading.keep_listen else None,
        on_applied=reloading.on_applied,
    )
    runtime.spawn(reloader.run(), "config-reloader")
    if reloading.watch:
        log.info("watching %s for changes", reloading.path)
    return reloader.request


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def serve(
    config: Config,
    *,
    allow_unauthenticated_network: bool = False,
    ready: asyncio.Event | None = None,
    reloading: Reloading | None = None,
) -> int:
    """Run until SIGTERM/SIGINT; then finish in-flight requests and stop every backend.
    SIGHUP re-reads the config file (and ``reloading.watch`` watches it): :mod:`reload`."""
    runtime = Runtime(config, allow_unauthenticated_network=allow_unauthenticated_network)
    handler = GatewayLogHandler(runtime.gateway_log)
    logging.getLogger().addHandler(handler)
    await runtime.start()
    limits = config.limits
    runner = web.AppRunner(
        create_app(runtime),
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=10.0,
        # A client must send its request line and headers within headerTimeout (aiohttp closes
        # a connection that has not sent a request by then; it is also the idle keep-alive).
        keepalive_timeout=limits.header_timeout,
        max_line_size=limits.max_header_bytes,
        max_field_size=limits.max_header_bytes,
        max_headers=limits.max_headers,
    )
    await runner.setup()
    site = GuardedSite(runner, config.listen_host, config.listen_port, limits.max_connections)
    where = host_port(config.listen_host, config.listen_port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await runtime.close()
        print(f"modelswap: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, _reloader(runtime, config, reloading))
    for switch in open_switches(config, allow_flag=allow_unauthenticated_network):
        log.warning("open switch on: %s", switch)
    if not config.api_keys:
        log.info("no apiKeys configured: every route is open to whoever can reach %s", where)
    log.info(
        "listening on http://%s with %d models: %s",
        where,
        len(config.models),
        ", ".join(config.models),
    )
    print(f"modelswap {__version__} listening on http://{where}", file=sys.stderr, flush=True)
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        log.info("shutting down: finishing in-flight requests, then stopping backends")
        await runner.cleanup()
        await runtime.close()
        logging.getLogger().removeHandler(handler)
    return 0
