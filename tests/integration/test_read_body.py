"""read_body on a real socket: the cap holds for declared and for chunked (undeclared) bodies."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from modelswap.errors import BodyTooLargeError
from modelswap.http.reading import read_body

LIMIT = 1000


async def echo_size(request: web.Request) -> web.Response:
    try:
        body = await read_body(request, LIMIT)
    except BodyTooLargeError:
        return web.Response(status=413)
    return web.Response(text=str(len(body)))


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application()
    app.router.add_post("/", echo_size)
    async with TestServer(app, host="127.0.0.1") as srv:
        yield srv


async def chunked(total: int) -> AsyncIterator[bytes]:
    for _ in range(total // 100):
        yield b"x" * 100


@pytest.mark.parametrize(("size", "status"), [(LIMIT, 200), (LIMIT + 100, 413)])
async def test_a_chunked_body_is_capped_by_what_arrives(
    server: TestServer, size: int, status: int
) -> None:
    # An async generator is sent with Transfer-Encoding: chunked, no Content-Length.
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/"), data=chunked(size)) as resp,
    ):
        assert resp.status == status
        if status == 200:
            assert await resp.text() == str(size)


async def test_a_declared_length_over_the_cap_is_refused(server: TestServer) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/"), data=b"x" * (LIMIT + 1)) as resp,
    ):
        assert resp.status == 413
