"""llama-swap's ``security.cors`` in the CORS middleware (issue 29): ``*`` answered as ``*``,
Private Network Access, pinned allowed headers, exposed headers, ``Vary`` kept and extended.
The gateway end to end is tests/e2e/test_llamaswap_newest.py."""

from __future__ import annotations

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from modelswap.config.resolved import CorsPolicy
from modelswap.http.middleware.cors import DEFAULT_ALLOWED_HEADERS, Cors


def app_with(policy: CorsPolicy) -> web.Application:
    cors = Cors((), lambda: policy)
    app = web.Application(middlewares=[cors.preflight])
    app.on_response_prepare.append(cors.on_prepare)

    async def answer(request: web.Request) -> web.Response:
        return web.Response(text="ok", headers={"Vary": "Accept-Encoding"})

    app.router.add_route("*", "/v1/models", answer)
    return app


async def test_any_origin_is_answered_with_a_star() -> None:
    policy = CorsPolicy(any_origin=True)
    async with TestClient(TestServer(app_with(policy))) as client:
        async with client.get("/v1/models", headers={"Origin": "https://a.example"}) as r:
            assert r.headers["Access-Control-Allow-Origin"] == "*"
            assert r.headers["Vary"] == "Accept-Encoding, Origin"
            assert "Access-Control-Allow-Credentials" not in r.headers
        preflight = {"Origin": "https://a.example", "Access-Control-Request-Method": "POST"}
        async with client.options("/v1/models", headers=preflight) as r:
            assert r.status == 204
            assert r.headers["Access-Control-Allow-Origin"] == "*"
            assert r.headers["Access-Control-Allow-Headers"] == DEFAULT_ALLOWED_HEADERS
            assert r.headers["Access-Control-Max-Age"] == "86400"
            assert r.headers["Vary"] == "Origin"
        async with client.options("/v1/models") as r:  # any OPTIONS: 204, no headers
            assert r.status == 204
            assert "Access-Control-Allow-Origin" not in r.headers


async def test_private_network_pinned_headers_and_exposed_headers() -> None:
    policy = CorsPolicy(
        origins=frozenset({"https://a.example"}),
        allow_private_network=True,
        allowed_methods=("POST",),
        allowed_headers=("Authorization", "Content-Type"),
        exposed_headers=("X-Request-Id", "Retry-After"),
    )
    async with TestClient(TestServer(app_with(policy))) as client:
        preflight = {
            "Origin": "https://a.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "x-other",
            "Access-Control-Request-Private-Network": "true",
        }
        async with client.options("/v1/models", headers=preflight) as r:
            assert r.headers["Access-Control-Allow-Private-Network"] == "true"
            assert r.headers["Access-Control-Allow-Methods"] == "POST"
            assert r.headers["Access-Control-Allow-Headers"] == "Authorization, Content-Type"
            assert r.headers["Access-Control-Expose-Headers"] == "X-Request-Id, Retry-After"
            assert r.headers["Vary"] == "Origin"  # pinned headers do not vary
        async with client.get("/v1/models", headers={"Origin": "https://a.example"}) as r:
            assert r.headers["Access-Control-Expose-Headers"] == "X-Request-Id, Retry-After"
            assert "Access-Control-Allow-Private-Network" not in r.headers
