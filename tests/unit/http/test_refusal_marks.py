"""Issue 41, what the middleware leaves for the request's record: a ``globalConcurrencyLimit``
refusal names its limit (``error.limit``) and the model the body asked for (in the request's
observation), and a CORS preflight is marked with its origin and whether it was allowed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from modelswap.config.resolved import CorsPolicy
from modelswap.http.error_responses import explained
from modelswap.http.middleware.concurrency import GlobalLimit
from modelswap.http.middleware.cors import PREFLIGHT, Cors, Preflight
from modelswap.http.request_obs import OBS, RequestObs

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
CHAT = "/v1/chat/completions"


def recorder(
    seen: list[web.Request],
) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """The outermost middleware, as the observing one is: an observation per request, and
    the request kept to read what was marked on it."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        request[OBS] = RequestObs()
        seen.append(request)
        return await handler(request)

    return middleware


async def test_a_refusal_names_its_limit_and_the_model_its_body_asked_for() -> None:
    release = asyncio.Event()
    entered = asyncio.Event()
    seen: list[web.Request] = []

    async def answer(request: web.Request) -> web.Response:
        entered.set()
        await release.wait()
        return web.Response(text="ok")

    limit = GlobalLimit(lambda: 1)
    app = web.Application(middlewares=[recorder(seen), limit.middleware])
    app.router.add_post(CHAT, answer)
    async with TestClient(TestServer(app)) as client:
        first = asyncio.ensure_future(client.post(CHAT, json={"model": "qwen", "messages": []}))
        await asyncio.wait_for(entered.wait(), 60)  # a ceiling that only ends a hang
        async with client.post(CHAT, json={"model": "qwen", "messages": []}) as refused:
            assert refused.status == 429
            data = json.loads(await refused.read())
        release.set()
        async with await first as served:
            assert served.status == 200
    assert data["error"]["code"] == "concurrency_limit"
    assert data["error"]["limit"] == {"name": "globalConcurrencyLimit", "value": 1, "in_flight": 1}
    why = explained(data)
    assert why is not None
    assert why.rule == {
        "kind": "limit",
        "name": "globalConcurrencyLimit",
        "value": 1,
        "in_flight": 1,
    }
    assert [request[OBS].requested for request in seen] == [None, "qwen"]  # the refused one


async def preflight_marks(cors: Cors, headers: dict[str, str]) -> tuple[int, Preflight | None]:
    seen: list[web.Request] = []
    app = web.Application(middlewares=[recorder(seen), cors.preflight])

    async def answer(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app.router.add_route("*", CHAT, answer)
    async with (
        TestClient(TestServer(app)) as client,
        client.options(CHAT, headers=headers) as response,
    ):
        status = response.status
    [request] = seen
    return status, request.get(PREFLIGHT)


ASKS = {"Access-Control-Request-Method": "POST"}


async def test_a_preflight_is_marked_with_its_origin_and_whether_it_was_allowed() -> None:
    listed = Cors(("https://app.example",))
    assert await preflight_marks(listed, {"Origin": "https://app.example", **ASKS}) == (
        204,
        Preflight("https://app.example", True),
    )
    assert await preflight_marks(listed, {"Origin": "https://evil.example", **ASKS}) == (
        403,
        Preflight("https://evil.example", False),
    )
    assert Preflight("https://evil.example", False).rule() == {
        "kind": "cors",
        "origin": "https://evil.example",
        "allowed": False,
    }
    policy = Cors((), lambda: CorsPolicy(origins=frozenset({"https://app.example"})))
    assert await preflight_marks(policy, {"Origin": "https://evil.example", **ASKS}) == (
        204,  # llama-swap's way: answered, without the headers a browser needs to go on
        Preflight("https://evil.example", False),
    )
    assert await preflight_marks(policy, {"Origin": "https://app.example"}) == (
        204,
        Preflight("https://app.example", True),
    )
