"""Client authentication in isolation: each route's declared scope, the three credential forms,
constant-time matching (asserted on the code path, not on timing), the auth and CORS middlewares
on an in-process server (with the failure limiter on a fake clock and a recording sleep: a valid
key is never slowed), client credentials never forwarded upstream, and the /upstream path guard.
The limiter itself: test_throttle.py."""

from __future__ import annotations

import base64
import hmac
import json
import re
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from multidict import CIMultiDict, CIMultiDictProxy

from modelswap.config import load_config_text
from modelswap.config.resolved import ApiKey
from modelswap.errors import BadRequestError
from modelswap.http import reading
from modelswap.http.app_keys import client_key
from modelswap.http.middleware.auth import auth_middleware
from modelswap.http.middleware.cors import ALLOW_HEADERS, Cors
from modelswap.http.reading import check_upstream_path, match_key, presented_key
from modelswap.http.relay.relay import headers_up
from modelswap.http.route_table import (
    ADMIN,
    ANY,
    INFERENCE,
    OPEN,
    READ,
    ROUTE_SCOPES,
    UndeclaredRouteError,
    check_declared,
    declare,
    scope_for,
)
from modelswap.http.server.app import create_app
from modelswap.http.tracking.failure_limiter import MAX_DELAY, NETWORK_FREE, FailureLimiter
from modelswap.runtime import Runtime


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


# --- each route's scope, declared with it ----------------------------------------------------

# Every route the gateway serves, by its path pattern, and the scope it needs. A route added
# without its scope cannot be built (test_an_undeclared_route_refuses_the_app); one added with a
# scope must be added here too, so a scope is always a decision someone saw.
DECLARED = {
    "/": OPEN,
    "/api/activity": READ,
    "/api/captures/{id}": READ,
    "/api/config": ADMIN,
    "/api/events": READ,
    "/api/hardware": READ,
    "/api/inflight": READ,
    "/api/inflight/{id}/cancel": ADMIN,
    "/api/mcp": READ,
    "/api/memory": READ,
    "/api/metrics/activity": READ,
    "/api/metrics/stats": READ,
    "/api/models/load/{model}": ADMIN,
    "/api/models/unload": ADMIN,
    "/api/models/unload/{model}": ADMIN,
    "/api/peers": READ,
    "/api/performance": READ,
    "/api/plan": READ,
    "/api/models/{model}/dry-run": READ,
    "/api/profiles": READ,
    "/api/profiles/active": ADMIN,
    "/api/queue": READ,
    "/api/security": READ,
    "/api/version": OPEN,
    "/api/whoami": ANY,
    "/audioapi/v1/tasks/run": INFERENCE,
    "/comfyui": ADMIN,
    "/comfyui/{rest}": ADMIN,
    "/completion": INFERENCE,
    "/health": OPEN,
    "/infill": INFERENCE,
    "/logs": READ,
    "/logs/stream": READ,
    "/logs/stream/{model}": READ,
    "/logs/{model}": READ,
    "/metrics": READ,
    "/models": INFERENCE,
    "/models/{model_id}": INFERENCE,
    "/props": INFERENCE,
    "/rerank": INFERENCE,
    "/reranking": INFERENCE,
    "/running": READ,
    "/sdapi/v1/img2img": INFERENCE,
    "/sdapi/v1/loras": INFERENCE,
    "/sdapi/v1/txt2img": INFERENCE,
    "/ui": OPEN,
    "/ui/": OPEN,
    "/unload": ADMIN,
    "/upstream": ADMIN,
    "/upstream/{rest}": ADMIN,
    "/v/chat/completions": INFERENCE,
    "/v/completions": INFERENCE,
    "/v/embeddings": INFERENCE,
    "/v/messages": INFERENCE,
    "/v/messages/count_tokens": INFERENCE,
    "/v/rerank": INFERENCE,
    "/v/reranking": INFERENCE,
    "/v/responses": INFERENCE,
    "/v1/audio/voices": INFERENCE,
    "/v1/audio/{tail}": INFERENCE,
    "/v1/chat/completions": INFERENCE,
    "/v1/completions": INFERENCE,
    "/v1/embeddings": INFERENCE,
    "/v1/images/{tail}": INFERENCE,
    "/v1/messages": INFERENCE,
    "/v1/messages/count_tokens": INFERENCE,
    "/v1/models": INFERENCE,
    "/v1/models/{model_id}": INFERENCE,
    "/v1/rerank": INFERENCE,
    "/v1/reranking": INFERENCE,
    "/v1/responses": INFERENCE,
}


def gateway_app() -> web.Application:
    config = load_config_text(
        "stateDir: ':memory:'\nactivity: {enabled: false}\n"
        "models:\n  fake:\n    cmd: x --port ${PORT}\n"
    )
    return create_app(Runtime(config, use_reaper=False))


def test_every_route_of_the_gateway_declares_the_scope_it_needs() -> None:
    app = gateway_app()
    canonical = {resource.canonical for resource in app.router.resources()}
    assert canonical == set(DECLARED)
    assert app[ROUTE_SCOPES] == DECLARED


def test_an_undeclared_route_refuses_the_app() -> None:
    app = web.Application()
    declare(app, "GET", "/declared", _who, READ)
    check_declared(app)
    app.router.add_get("/forgotten/{x}", _who)
    with pytest.raises(UndeclaredRouteError, match=re.escape("/forgotten/{x}")):
        check_declared(app)


def test_one_path_cannot_have_two_scopes() -> None:
    app = web.Application()
    declare(app, "GET", "/p", _who, READ)
    declare(app, "PUT", "/p", _who, READ)  # the same scope again is fine
    with pytest.raises(ValueError, match="one path, one scope"):
        declare(app, "POST", "/p", _who, ADMIN)
    with pytest.raises(ValueError, match="unknown scope"):
        declare(app, "GET", "/q", _who, "everyone")


@pytest.mark.parametrize(
    ("method", "path", "needed"),
    [
        ("GET", "/health", OPEN),
        ("GET", "/ui/app.js", OPEN),
        ("POST", "/v1/chat/completions", INFERENCE),
        ("POST", "/v1/audio/transcriptions", INFERENCE),
        ("GET", "/v1/models/org/model", INFERENCE),
        ("GET", "/logs/org/model", READ),
        ("GET", "/api/models/org/model/dry-run", READ),
        ("POST", "/api/inflight/7/cancel", ADMIN),
        ("GET", "/upstream/qwen/../../x", ADMIN),
        ("PUT", "/comfyui/api/prompt", ADMIN),
        ("GET", "/api/whoami", ANY),
        # No route: a valid key of any scope, so a 404 tells nothing to a client without one.
        ("GET", "/sdapi/v1/options", ANY),
        ("GET", "/v1/modelsx", ANY),
        ("GET", "/api/configs", ANY),
        ("DELETE", "/api/config", ANY),  # a 405 is no more telling than a 404
    ],
)
async def test_a_request_needs_the_scope_of_the_route_it_reaches(
    method: str, path: str, needed: str
) -> None:
    app = gateway_app()
    request = make_mocked_request(method, path, app=app)
    assert scope_for(app, await app.router.resolve(request)) == needed


# --- the credential a client presents ------------------------------------------------------


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Authorization": "Bearer sk-abc"}, "sk-abc"),
        ({"Authorization": "bearer   sk-abc  "}, "sk-abc"),
        ({"Authorization": "BEARER sk-abc"}, "sk-abc"),
        ({"x-api-key": "sk-xyz"}, "sk-xyz"),
        ({"X-Api-Key": "  sk-xyz "}, "sk-xyz"),
        ({"Authorization": basic("anyone", "sk-pass")}, "sk-pass"),
        ({"Authorization": basic("", "sk-pass")}, "sk-pass"),
        ({"Authorization": basic("user", "has:colon")}, "has:colon"),
        ({"Authorization": basic("user", "")}, None),
        ({"Authorization": "Basic " + base64.b64encode(b"nocolon").decode()}, None),
        ({"Authorization": "Basic !!!not-base64!!!"}, None),
        ({"Authorization": "Basic " + base64.b64encode(b"u:\xff\xfe").decode()}, None),
        ({"Authorization": "Bearer "}, None),
        ({"Authorization": "Digest abc"}, None),
        ({"x-api-key": "   "}, None),
        ({}, None),
        # Authorization wins over x-api-key when it carries a usable credential.
        ({"Authorization": "Bearer from-bearer", "x-api-key": "from-header"}, "from-bearer"),
        ({"Authorization": "Digest abc", "x-api-key": "from-header"}, "from-header"),
    ],
)
def test_presented_key(headers: dict[str, str], expected: str | None) -> None:
    request = make_mocked_request("GET", "/v1/models", headers=headers)
    assert presented_key(request.headers) == expected


# --- constant-time comparison (the code path, not timing) ----------------------------------

KEYS = (
    ApiKey("first", "first-secret-key-0001", frozenset({"inference"})),
    ApiKey("second", "second-secret-key-0002-longer", frozenset({"read"})),
    ApiKey("third", "t3", frozenset({"admin"})),
)


@pytest.fixture
def compared(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bytes, bytes]]:
    """Every call to hmac.compare_digest made through modelswap.http.reading (match_key)."""
    calls: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def recorder(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr(reading.hmac, "compare_digest", recorder)
    return calls


@pytest.mark.parametrize(
    ("presented", "expected"),
    [
        ("first-secret-key-0001", "first"),  # the first key matches: the others still compared
        ("second-secret-key-0002-longer", "second"),
        ("t3", "third"),
        ("wrong", None),
        ("first-secret-key-000", None),  # a prefix
        ("first-secret-key-00011", None),  # an extension
        ("", None),
        ("ключ-ü", None),  # non-ASCII presented keys are compared as bytes
    ],
)
def test_every_key_is_compared_with_compare_digest(
    compared: list[tuple[bytes, bytes]], presented: str, expected: str | None
) -> None:
    found = match_key(KEYS, presented)
    assert (found.name if found else None) == expected
    assert len(compared) == len(KEYS)
    assert [b for _, b in compared] == [k.secret.encode() for k in KEYS]
    assert all(a == presented.encode("utf-8", errors="replace") for a, _ in compared)
    assert all(isinstance(a, bytes) and isinstance(b, bytes) for a, b in compared)


def test_match_key_source_has_no_early_exit_or_plain_equality() -> None:
    """The loop must not ``return``/``break`` on a match, nor compare with ``==``."""
    import inspect

    source = inspect.getsource(match_key)
    body = source.split('"""', 2)[-1]
    assert "compare_digest" in body
    assert "break" not in body
    assert body.count("return") == 1
    assert "==" not in body


async def test_the_middleware_compares_through_compare_digest(
    compared: list[tuple[bytes, bytes]],
) -> None:
    headers = {"x-api-key": "second-secret-key-0002-longer"}
    async with serve(KEYS) as client, client.get("/running", headers=headers) as r:
        assert r.status == 200
    assert len(compared) == len(KEYS)


# --- a fake clock and a recording sleep for the failure limiter ----------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class RecordedSleep:
    """Stands in for asyncio.sleep: records the waits, returns at once."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


# --- the auth middleware on an in-process server --------------------------------------------

ROUTES = {
    "/health": OPEN,
    "/v1/models": INFERENCE,
    "/v1/chat/completions": INFERENCE,
    "/running": READ,
    "/logs/m": READ,
    "/api/security": READ,
    "/api/events": READ,
    "/api/config": ADMIN,
    "/api/models/unload": ADMIN,
    "/upstream/m/health": ADMIN,
}
SCOPE_SETS = [
    frozenset({INFERENCE}),
    frozenset({READ}),
    frozenset({ADMIN}),
    frozenset({INFERENCE, READ}),
    frozenset({INFERENCE, ADMIN}),
    frozenset({READ, ADMIN}),
    frozenset({INFERENCE, READ, ADMIN}),
]
MATRIX_KEYS = tuple(
    ApiKey("+".join(sorted(s)), f"matrix-{'-'.join(sorted(s))}-secret", s) for s in SCOPE_SETS
)


async def _who(request: web.Request) -> web.Response:
    key = client_key(request)
    return web.json_response({"key": key.name if key else None})


class serve:
    def __init__(self, keys: tuple[ApiKey, ...], limiter: FailureLimiter | None = None) -> None:
        app = web.Application(middlewares=[auth_middleware(keys, limiter or FailureLimiter())])
        for path, scope in ROUTES.items():
            declare(app, "*", path, _who, scope)
        declare(app, "*", "/somewhere-else", _who, ANY)
        self.client = TestClient(TestServer(app))

    async def __aenter__(self) -> TestClient[web.Request, web.Application]:
        await self.client.start_server()
        return self.client

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()


@pytest.fixture
async def matrix_client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    async with serve(MATRIX_KEYS) as client:
        yield client


def credential_headers(form: str, secret: str) -> dict[str, str]:
    return {
        "bearer": {"Authorization": f"Bearer {secret}"},
        "x-api-key": {"x-api-key": secret},
        "basic": {"Authorization": basic("whoever", secret)},
    }[form]


@pytest.mark.parametrize("form", ["bearer", "x-api-key", "basic"])
async def test_scope_matrix(
    matrix_client: TestClient[web.Request, web.Application], form: str
) -> None:
    wrong: list[str] = []
    for key in MATRIX_KEYS:
        for path, needed in ROUTES.items():
            async with matrix_client.get(path, headers=credential_headers(form, key.secret)) as r:
                body = await r.json()
                if needed == OPEN:
                    ok = r.status == 200 and body == {"key": None}
                elif needed in key.scopes:
                    ok = r.status == 200 and body == {"key": key.name}
                else:
                    ok = (
                        r.status == 403
                        and body["error"]["code"] == "insufficient_scope"
                        and body["error"]["type"] == "permission_error"
                        and r.headers["X-Modelswap-Error"] == "1"
                        and key.name in body["error"]["message"]
                        and key.secret not in json.dumps(body)
                    )
                if not ok:
                    wrong.append(f"{key.name} {path}: {r.status} {body}")
    assert not wrong, "\n".join(wrong)


async def test_unknown_paths_need_any_valid_key(
    matrix_client: TestClient[web.Request, web.Application],
) -> None:
    async with matrix_client.get("/somewhere-else") as r:
        assert r.status == 401
    for key in MATRIX_KEYS:
        async with matrix_client.get("/somewhere-else", headers={"x-api-key": key.secret}) as r:
            assert r.status == 200


@pytest.mark.parametrize(
    ("headers", "message"),
    [
        ({}, "Missing API key."),
        ({"Authorization": "Bearer wrong-key"}, "Invalid API key."),
        ({"x-api-key": "wrong-key"}, "Invalid API key."),
        ({"Authorization": basic("u", "wrong-key")}, "Invalid API key."),
        ({"Authorization": "Basic ???"}, "Missing API key."),
    ],
)
async def test_missing_or_wrong_key_is_401_with_the_envelope(
    headers: dict[str, str], message: str
) -> None:
    async with serve(MATRIX_KEYS) as client, client.get("/v1/models", headers=headers) as r:
        assert r.status == 401
        assert r.headers["WWW-Authenticate"].startswith("Bearer")
        assert r.headers["X-Modelswap-Error"] == "1"
        body = await r.json()
    assert body == {
        "error": {
            "message": message,
            "type": "authentication_error",
            "code": "invalid_api_key",
            "param": None,
        }
    }


async def test_no_keys_means_every_route_is_open() -> None:
    async with serve(()) as client:
        for path in [*ROUTES, "/somewhere-else"]:
            async with client.post(path, headers={"Authorization": "Bearer anything"}) as r:
                assert r.status == 200, path
                assert await r.json() == {"key": None}


async def test_a_valid_key_is_served_whatever_its_address_failed_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sleep = RecordedSleep()
    limiter = FailureLimiter(FakeClock(), sleep)
    good = {"x-api-key": MATRIX_KEYS[-1].secret}
    guesses = [f"guess-{n}-sk-not-a-real-key" for n in range(NETWORK_FREE + 20)]
    async with serve(MATRIX_KEYS, limiter) as client:
        for guess in guesses:
            async with client.get("/running", headers={"x-api-key": guess}) as r:
                assert r.status == 401
                assert (await r.json())["error"]["code"] == "invalid_api_key"
        assert len(sleep.waits) == 20  # the failures past the free ones waited, growing
        assert sleep.waits == sorted(sleep.waits)
        assert sleep.waits[-1] == MAX_DELAY
        for _ in range(3):  # right after them, from the same address: served, not slowed
            async with client.get("/running", headers=good) as r:
                assert r.status == 200
                assert await r.json() == {"key": MATRIX_KEYS[-1].name}
        async with client.get("/running") as r:  # no key is no guess: not slowed either
            assert r.status == 401
        async with client.get("/health") as r:
            assert r.status == 200
    assert len(sleep.waits) == 20
    throttled = [m for r in caplog.records if "failed attempts from" in (m := r.getMessage())]
    assert len(throttled) == 1, throttled  # one line for the episode, not one per request
    assert f"{NETWORK_FREE + 1} failed attempts from 127.0.0.1" in throttled[0]
    assert not any(guess in caplog.text for guess in guesses)  # never the keys tried


async def test_successes_and_scope_refusals_do_not_count_as_failures() -> None:
    limiter = FailureLimiter(FakeClock(), RecordedSleep())
    read_only = {"x-api-key": MATRIX_KEYS[1].secret}
    async with serve(MATRIX_KEYS, limiter) as client:
        for _ in range(NETWORK_FREE + 5):
            async with client.get("/running", headers=read_only) as r:
                assert r.status == 200
            async with client.get("/api/config", headers=read_only) as r:
                assert r.status == 403
    assert limiter.remembered_networks == 0


# --- CORS middleware -----------------------------------------------------------------------


def cors_app(origins: tuple[str, ...], keys: tuple[ApiKey, ...]) -> web.Application:
    cors = Cors(origins)
    app = web.Application(middlewares=[cors.preflight, auth_middleware(keys, FailureLimiter())])
    app.on_response_prepare.append(cors.on_prepare)
    declare(app, "*", "/v1/models", _who, INFERENCE)

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(b"data: 1\n\n")
        await response.write_eof()
        return response

    declare(app, "POST", "/v1/chat/completions", stream, INFERENCE)
    return app


PREFLIGHT = {
    "Access-Control-Request-Method": "POST",
    "Access-Control-Request-Headers": "authorization, content-type",
}


async def test_cors_is_off_without_origins() -> None:
    app = cors_app((), ())
    async with TestClient(TestServer(app)) as client:
        headers = {"Origin": "https://app.example", **PREFLIGHT}
        async with client.options("/v1/models", headers=headers) as r:
            assert r.status == 403
            assert "Access-Control-Allow-Origin" not in r.headers
        async with client.get("/v1/models", headers={"Origin": "https://app.example"}) as r:
            assert r.status == 200
            assert "Access-Control-Allow-Origin" not in r.headers


async def test_cors_allowed_origin_preflight_and_responses() -> None:
    key = MATRIX_KEYS[-1]
    app = cors_app(("https://app.example",), (key,))
    async with TestClient(TestServer(app)) as client:
        origin = {"Origin": "https://app.example"}
        async with client.options("/v1/chat/completions", headers={**origin, **PREFLIGHT}) as r:
            assert r.status == 204  # no key needed for a preflight
            assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
            assert r.headers["Access-Control-Allow-Headers"] == ALLOW_HEADERS
            assert "POST" in r.headers["Access-Control-Allow-Methods"]
            assert r.headers["Vary"] == "Origin"
        bearer = {"Authorization": f"Bearer {key.secret}"}
        async with client.get("/v1/models", headers={**origin, **bearer}) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        async with client.post("/v1/chat/completions", headers={**origin, **bearer}) as r:
            assert r.status == 200
            assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
            assert await r.read() == b"data: 1\n\n"
        async with client.get("/v1/models", headers=origin) as r:  # a 401 is readable too
            assert r.status == 401
            assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
        other = {"Origin": "https://evil.example"}
        async with client.options("/v1/models", headers={**other, **PREFLIGHT}) as r:
            assert r.status == 403
            assert "Access-Control-Allow-Origin" not in r.headers
        async with client.get("/v1/models", headers={**other, **bearer}) as r:
            assert r.status == 200
            assert "Access-Control-Allow-Origin" not in r.headers


async def test_cors_star_echoes_the_origin() -> None:
    key = MATRIX_KEYS[-1]
    async with TestClient(TestServer(cors_app(("*",), (key,)))) as client:
        headers = {"Origin": "https://any.example", **PREFLIGHT}
        async with client.options("/v1/models", headers=headers) as r:
            assert r.status == 204
            assert r.headers["Access-Control-Allow-Origin"] == "https://any.example"


# --- client credentials are never forwarded upstream ----------------------------------------


def _headers(*pairs: tuple[str, str]) -> CIMultiDictProxy[str]:
    return CIMultiDictProxy(CIMultiDict(pairs))


def test_client_credentials_are_stripped_and_the_upstream_key_added() -> None:
    incoming = _headers(
        ("Authorization", "Bearer client-key"),
        ("x-api-key", "client-key"),
        ("X-API-KEY", "client-key-2"),
        ("api-key", "client-key-3"),
        ("Content-Type", "application/json"),
        ("X-Custom", "kept"),
        ("Connection", "keep-alive"),
        ("Host", "gateway"),
    )
    raw = [(name.encode(), value.encode()) for name, value in incoming.items()]
    out = _headers(*((n.decode(), v.decode()) for n, v in headers_up(raw, "upstream-key", "id")))
    assert out.getall("Authorization") == ["Bearer upstream-key"]
    assert "x-api-key" not in out
    assert "api-key" not in out
    assert "Connection" not in out
    assert "Host" not in out
    assert out["Content-Type"] == "application/json"
    assert out["X-Custom"] == "kept"
    assert "client-key" not in json.dumps(list(out.items()))
    bare = _headers(*((n.decode(), v.decode()) for n, v in headers_up(raw, None, "id")))
    assert "Authorization" not in bare
    assert "client-key" not in json.dumps(list(bare.items()))


# --- the /upstream path guard ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        ("/upstream/m/../x", "m/../x"),
        ("/upstream/m/..", "m/.."),
        ("/upstream/m/./x", "m/./x"),
        ("/upstream/m/%2e%2e/x", "m/../x"),
        ("/upstream/m/%2E%2e/x", "m/../x"),
        ("/upstream/m/..%2fx", "m/../x"),
        ("/upstream/m/%252e%252e/x", "m/%2e%2e/x"),
        ("/upstream/m/%5c..%5cx", "m/\\..\\x"),
        ("/upstream/m/..\\x", "m/..\\x"),
        ("/upstream/m/http://evil/", "m/http://evil/"),
        ("/upstream//etc/passwd", "/etc/passwd"),
        ("/upstream/m/%00", "m/\x00"),
        # An empty segment after the model id: the backend would get "//evil/x", a
        # network-path reference (and "//etc/passwd", an absolute path).
        ("/upstream/m//evil/x", "m//evil/x"),
        ("/upstream/m//etc/passwd", "m//etc/passwd"),
    ],
)
def test_check_upstream_path_refuses(raw: str, decoded: str) -> None:
    with pytest.raises(BadRequestError):
        check_upstream_path(raw, decoded)


@pytest.mark.parametrize(
    ("raw", "decoded"),
    [
        ("/upstream/m/health", "m/health"),
        ("/upstream/m/v1/models?x=1", "m/v1/models"),
        ("/upstream/org/model/props", "org/model/props"),
        ("/upstream/m/a.b/c..d/.e", "m/a.b/c..d/.e"),
        ("/upstream/m/%41", "m/A"),
    ],
)
def test_check_upstream_path_accepts_plain_paths(raw: str, decoded: str) -> None:
    check_upstream_path(raw, decoded)
