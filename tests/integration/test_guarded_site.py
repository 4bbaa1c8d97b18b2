"""The guarded site on real loopback sockets, in process: a client within its share is served
while another address holds all of its own; a connection over a cap gets a whole 503 with
Retry-After (never a reset), however its request arrives; the connection counts and the refusals are
released when connections close."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web
from tests.integration.conftest import free_port

from modelswap.http.app_keys import AUTHORISED
from modelswap.http.server import connections
from modelswap.http.server.connections import ConnectionCounts, GuardedSite, Handler

pytestmark = pytest.mark.integration

CEILING = 20.0  # seconds: only ends a hang


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


@contextlib.asynccontextmanager
async def guarded(total: int, per_client: int) -> AsyncIterator[GuardedSite]:
    runner = web.AppRunner(web.Application(), handler_cancellation=True, keepalive_timeout=30)
    runner.app.router.add_get("/health", health)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", free_port(), ConnectionCounts(total, per_client))
    await site.start()
    try:
        yield site
    finally:
        await runner.cleanup()


Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect(site: GuardedSite, source: str = "127.0.0.1") -> Stream:
    return await asyncio.open_connection("127.0.0.1", site._port, local_addr=(source, 0))


async def eventually(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + CEILING
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


REQUEST = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


async def answer(stream: Stream, send: bytes = REQUEST) -> bytes:
    """Send ``send``, then read everything until the server closes (a reset raises)."""
    reader, writer = stream
    writer.write(send)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), CEILING)
    finally:
        writer.close()


def status_and_headers(raw: bytes) -> tuple[int, dict[str, str]]:
    head = raw.partition(b"\r\n\r\n")[0].decode("latin-1").split("\r\n")
    fields = dict(line.split(": ", 1) for line in head[1:])
    return int(head[0].split()[1]), {k.lower(): v for k, v in fields.items()}


async def hold(site: GuardedSite, count: int, source: str = "127.0.0.1") -> list[Stream]:
    """``count`` connections that sent half a request line and wait (slow headers)."""
    held = [await connect(site, source) for _ in range(count)]
    for _, writer in held:
        writer.write(b"GET /hea")
        await writer.drain()
    await eventually(
        lambda: site.connection_counts.of(source).held == count, "held connections counted"
    )
    return held


async def test_a_client_within_its_share_is_served_while_another_holds_all_of_its_own() -> None:
    async with guarded(total=8, per_client=3) as site:
        held = await hold(site, 3)
        over = await answer(await connect(site))  # sent at once: unread bytes, yet no reset
        status, headers = status_and_headers(over)
        assert status == 503, over
        assert headers["retry-after"] == str(connections.RETRY_AFTER)
        assert b'"code":"too_many_connections"' in over
        assert b"limits.maxConnectionsPerClient: 3" in over
        other = await answer(await connect(site, "127.0.0.2"))
        assert status_and_headers(other)[0] == 200, other
        for _, writer in held:
            writer.close()
        await eventually(
            lambda: site.connection_counts.total == 0, "the connection counts is released on close"
        )
        assert site.connection_counts.clients == 0
        assert status_and_headers(await answer(await connect(site)))[0] == 200
        await eventually(lambda: site.refusing == 0, "refusals end")


async def test_over_the_total_every_client_is_refused_with_a_503() -> None:
    async with guarded(total=2, per_client=2) as site:
        held = await hold(site, 1, "127.0.0.3") + await hold(site, 1, "127.0.0.4")
        over = await answer(await connect(site, "127.0.0.5"))
        assert status_and_headers(over)[0] == 503, over
        assert b"limits.maxConnections: 2" in over
        for _, writer in held:
            writer.close()
        await eventually(
            lambda: site.connection_counts.total == 0, "the connection counts is released on close"
        )


async def test_a_refused_client_dripping_its_request_line_is_answered_once_it_is_in() -> None:
    async with guarded(total=8, per_client=1) as site:
        held = await hold(site, 1)
        reader, writer = await connect(site)
        for byte in b"GET /health HTTP/1.1\r\n":
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0.01)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CEILING)  # before the rest
        assert status_and_headers(head)[0] == 503, head
        writer.write(b"Host: x\r\nX-Slow: 1\r\n\r\n")  # the rest of the head is drained
        rest = await asyncio.wait_for(reader.read(), CEILING)
        assert b'"too_many_connections"' in rest
        writer.close()
        held[0][1].close()
        await eventually(
            lambda: site.refusing == 0 and site.connection_counts.total == 0, "all released"
        )


async def test_a_refused_client_that_sends_nothing_is_answered_and_closed_in_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "REFUSAL_READ_TIMEOUT", 0.2)
    monkeypatch.setattr(connections, "REFUSAL_DRAIN_TIMEOUT", 0.2)
    async with guarded(total=8, per_client=1) as site:
        held = await hold(site, 1)
        silent = [await connect(site) for _ in range(20)]
        for reader, writer in silent:  # nothing sent: the answer comes anyway, then EOF
            raw = await asyncio.wait_for(reader.read(), CEILING)
            assert status_and_headers(raw)[0] == 503, raw
            writer.close()
        await eventually(lambda: site.refusing == 0, "the refusals ended by themselves")
        held[0][1].close()


async def test_past_the_refusal_cap_connections_are_closed_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(connections, "MAX_REFUSING", 2)
    async with guarded(total=8, per_client=1) as site:
        held = await hold(site, 1)
        slow = [await connect(site) for _ in range(2)]  # they take the two refusal slots
        await eventually(lambda: site.refusing == 2, "two refusals in progress")
        reader, writer = await connect(site)  # sends nothing yet: no reset, the 503 and EOF
        raw = await asyncio.wait_for(reader.read(), CEILING)
        assert status_and_headers(raw)[0] == 503, raw
        assert site.refusing == 2
        for stream in (*slow, (reader, writer), *held):
            stream[1].close()
        await eventually(
            lambda: site.refusing == 0 and site.connection_counts.total == 0, "released"
        )


# ---- the share counts connections not at work (issue 28) ----------------------------------


@contextlib.asynccontextmanager
async def serving(per_client: int, arrivals: int = 0) -> AsyncIterator[GuardedSite]:
    """A guarded site whose app authorises every request (as the gateway does without keys),
    marks it at work and keeps idle connections within the share, as the gateway's app does.
    ``POST /echo`` answers the length of its body; ``GET /together`` answers once ``arrivals``
    of them are in."""
    arrived = 0
    together = asyncio.Event()

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"length": len(await request.read())})

    async def gather(request: web.Request) -> web.Response:
        nonlocal arrived
        arrived += 1
        if arrived >= arrivals:
            together.set()
        await together.wait()
        return web.json_response({"status": "ok"})

    @web.middleware
    async def authorised(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[AUTHORISED] = True
        return await handler(request)

    app = web.Application(middlewares=[authorised, connections.at_work])
    app.on_response_prepare.append(connections.keep_within_share)
    app.router.add_post("/echo", echo)
    app.router.add_get("/together", gather)
    runner = web.AppRunner(app, handler_cancellation=True, keepalive_timeout=30)
    await runner.setup()
    site = GuardedSite(runner, "127.0.0.1", free_port(), ConnectionCounts(64, per_client))
    await site.start()
    try:
        yield site
    finally:
        await runner.cleanup()


async def response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One whole response with a Content-Length (the connection may stay open)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), CEILING)
    status, headers = status_and_headers(head)
    body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), CEILING)
    return status, headers, body


async def test_a_connection_over_its_share_waits_and_is_served_with_what_it_sent() -> None:
    async with serving(per_client=1) as site:
        held = await hold(site, 1)  # a slow head takes the share
        reader, writer = await connect(site)
        body = b"x" * 300_000  # more than one read, and than a refusal would read
        writer.write(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 300000\r\n\r\n" + body)
        await eventually(lambda: site.waiting == 1, "the connection waits for a place")
        held[0][1].close()  # a place frees: the waiting one is served, its bytes first
        status, _, answer = await response(reader)
        assert status == 200, answer
        assert answer == b'{"length": 300000}'
        writer.close()
        await eventually(
            lambda: site.connection_counts.total == 0 and site.refusing == 0, "released"
        )


async def test_requests_in_flight_do_not_count_and_idle_connections_stay_within_the_share() -> None:
    share, count = 3, 20
    async with serving(per_client=share, arrivals=count) as site:
        streams = [await connect(site) for _ in range(count)]  # all at once, over the share
        for _, writer in streams:
            writer.write(b"GET /together HTTP/1.1\r\nHost: x\r\n\r\n")
        answers = [await response(reader) for reader, _ in streams]
        assert [status for status, _, _ in answers] == [200] * count  # none was refused
        closing = [h.get("connection") == "close" for _, h, _ in answers]
        assert closing.count(False) == share, closing  # the share is kept alive, no more
        assert site.connection_counts.of("127.0.0.1").kept == share
        assert site.connection_counts.of("127.0.0.1").new == 0  # idle ones are not new ones
        for (reader, writer), closed in zip(streams, closing, strict=True):
            if closed:
                assert await asyncio.wait_for(reader.read(), CEILING) == b""
            writer.close()
        await eventually(
            lambda: site.connection_counts.total == 0, "the connection counts is released on close"
        )
        assert site.refusing == 0
