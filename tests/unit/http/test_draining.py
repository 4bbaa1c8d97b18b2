"""The shutdown drain on an in-process server: once it begins, new requests (and /health) get
503 ``shutting_down`` with Retry-After while the answer in flight runs to its end; the drain is
bounded; watch streams are not waited for and are ended on request."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from modelswap.http.middleware.draining import drain_middleware
from modelswap.http.tracking.drain import Drain


class Held:
    """A route that answers only when released."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.entered.set()
        await self.release.wait()
        return web.json_response({"answered": True})


def app_with(drain: Drain, held: Held) -> web.Application:
    app = web.Application(middlewares=[drain_middleware(drain)])
    app.router.add_get("/slow", held.handle)
    app.router.add_get("/api/events", held.handle)
    app.router.add_get("/health", health)
    return app


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def test_new_requests_get_503_while_the_answer_in_flight_finishes() -> None:
    drain, held = Drain(), Held()
    async with TestClient(TestServer(app_with(drain, held))) as client:
        in_flight = asyncio.ensure_future(client.get("/slow"))
        await asyncio.wait_for(held.entered.wait(), 10)
        assert drain.answering == 1
        draining = asyncio.ensure_future(drain.drain(30.0))
        await asyncio.sleep(0)
        assert drain.draining
        for path in ("/slow", "/health", "/anything"):
            async with client.get(path) as refused:
                assert refused.status == 503, path
                assert refused.headers["X-Modelswap-Error"] == "1"
                assert refused.headers["Connection"] == "close"
                assert 1 <= int(refused.headers["Retry-After"]) <= 30
                body = await refused.json()
                assert body["error"]["code"] == "shutting_down"
                assert body["error"]["type"] == "service_unavailable"
                assert body["error"]["message"] == "modelswap is shutting down."
                assert ("status" in body) == (path == "/health")
                if path == "/health":
                    assert body["status"] == "shutting_down"
        assert not draining.done()
        held.release.set()
        response = await asyncio.wait_for(in_flight, 10)
        assert response.status == 200
        assert await response.json() == {"answered": True}
        response.release()
        assert await asyncio.wait_for(draining, 10) == 0


async def test_the_drain_is_bounded_and_a_cut_ends_it() -> None:
    drain, held = Drain(), Held()
    async with TestClient(TestServer(app_with(drain, held))) as client:
        in_flight = asyncio.ensure_future(client.get("/slow"))
        await asyncio.wait_for(held.entered.wait(), 10)
        assert await asyncio.wait_for(drain.drain(0.01), 10) == 1  # still running: reported
        cut = asyncio.Event()
        cut.set()
        assert await asyncio.wait_for(Drain().drain(30.0, cut), 10) == 0
        held.release.set()
        (await asyncio.wait_for(in_flight, 10)).release()


async def test_watch_streams_are_not_waited_for_and_end_on_request() -> None:
    drain, held = Drain(), Held()
    async with TestClient(TestServer(app_with(drain, held))) as client:
        watching = asyncio.ensure_future(client.get("/api/events"))
        await asyncio.wait_for(held.entered.wait(), 10)
        assert drain.answering == 0
        assert await asyncio.wait_for(drain.drain(30.0), 10) == 0
        drain.end_watches()
        (ended,) = await asyncio.wait_for(asyncio.gather(watching, return_exceptions=True), 10)
        assert isinstance(ended, aiohttp.ClientError), ended  # the stream was ended
