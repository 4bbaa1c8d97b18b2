"""Serving the app: the listening site with its bounds, signals, graceful shutdown.

Shutdown, on SIGTERM or SIGINT: new requests get 503 ``shutting_down`` while the answers in
flight finish (at most SHUTDOWN_TIMEOUT seconds; a second signal cuts that short); then the
listener closes and the backends stop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import signal
import sys

from aiohttp import web

from modelswap import __version__
from modelswap.config import Config
from modelswap.config.security import host_port, open_switches, scope_hint
from modelswap.http.middleware.draining import DRAIN
from modelswap.http.routes.observe import GatewayLogHandler
from modelswap.http.server.app import create_app
from modelswap.http.server.connections import GuardedSite
from modelswap.http.server.fast_lane import FastLane
from modelswap.http.server.ledger import ConnectionLedger
from modelswap.reload import ConfigReloader, Reloading
from modelswap.runtime import Runtime

log = logging.getLogger("modelswap")

SHUTDOWN_TIMEOUT = 10.0  # seconds the answers in flight get to finish after SIGTERM/SIGINT
CLOSE_GRACE = 1.0  # then, once the listener is closed, before what is left is cancelled


def _reloader(
    runtime: Runtime, config: Config, reloading: Reloading | None
) -> ConfigReloader | None:
    """The config file's reloader (None for the built-in demo); starts the file watcher when
    asked to."""
    if reloading is None or reloading.path is None:
        return None
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
    return reloader


def _no_file() -> None:
    log.warning("SIGHUP: serving the built-in demo; there is no file to reload")


def _return_startup_memory() -> None:
    """Hand back to the system the heap that reading the config and building the app left
    free (glibc keeps it otherwise): ~3 MiB of the idle gateway's RSS. Elsewhere, nothing."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


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
    reloader = _reloader(runtime, config, reloading)
    app = create_app(runtime, reloader.reload if reloader is not None else None)
    drain = app[DRAIN]
    runner = web.AppRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=CLOSE_GRACE,
        # A client must send its request line and headers within headerTimeout (aiohttp closes
        # a connection that has not sent a request by then; it is also the idle keep-alive).
        keepalive_timeout=limits.header_timeout,
        max_line_size=limits.max_header_bytes,
        max_field_size=limits.max_header_bytes,
        max_headers=limits.max_headers,
    )
    await runner.setup()
    ledger = ConnectionLedger(limits.max_connections, limits.max_connections_per_client)
    lane = FastLane(app, runtime)
    site = GuardedSite(runner, config.listen_host, config.listen_port, ledger, lane)
    where = host_port(config.listen_host, config.listen_port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        await runtime.close()
        print(f"modelswap: cannot listen on {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    stop, hurry = asyncio.Event(), asyncio.Event()

    def on_stop() -> None:  # the first signal starts the drain, a second one cuts it short
        (hurry if stop.is_set() else stop).set()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop)
    loop.add_signal_handler(signal.SIGHUP, reloader.request if reloader is not None else _no_file)
    for switch in open_switches(config, allow_flag=allow_unauthenticated_network):
        log.warning("open switch on: %s", switch)
    if (hint := scope_hint(config)) is not None:
        log.info("%s", hint)
    if not config.api_keys:
        log.info("no apiKeys configured: every route is open to whoever can reach %s", where)
    log.info(
        "listening on http://%s with %d models: %s",
        where,
        len(config.models),
        ", ".join(config.models),
    )
    print(f"modelswap {__version__} listening on http://{where}", file=sys.stderr, flush=True)
    runtime.listening()  # the spare keeper: made now that the socket listens
    _return_startup_memory()
    if ready is not None:
        ready.set()
    try:
        await stop.wait()
    finally:
        log.info(
            "shutting down: finishing %d in-flight requests (at most %g s; new ones get 503), "
            "then stopping backends",
            drain.answering,
            SHUTDOWN_TIMEOUT,
        )
        left = await drain.drain(SHUTDOWN_TIMEOUT, hurry)
        if left:
            log.warning("shutting down: ending %d requests that are still running", left)
        drain.end_watches()
        await runner.cleanup()
        await runtime.close()
        logging.getLogger().removeHandler(handler)
    return 0
