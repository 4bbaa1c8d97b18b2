"""CORS, off unless ``security.corsOrigins`` or llama-swap's ``security.cors`` lists origins.
Preflights are answered before authentication (browsers send them without credentials); every
response to an allowed origin, streamed ones included, gets ``Access-Control-Allow-Origin`` as
its headers go out. A backend's own CORS headers never reach the client (the relay drops them):
the gateway is their only source.

``security.cors`` behaves as llama-swap's (its api-integration/cors.md): headers only for a
request that carries an ``Origin``; a listed origin echoed with ``Vary: Origin``, ``*`` sent as
``*``; an unlisted origin served as usual, without CORS headers; every ``OPTIONS`` answered 204
here (with the headers only for an allowed origin); ``allowedHeaders`` unset echoes the headers
a preflight asks for, those that are valid names.

Every preflight answered here is marked on its request (:data:`PREFLIGHT`: the origin, and
whether it was allowed), so the request's record says so (issue 41): method ``OPTIONS``, the
origin as its rule, counted apart from requests for a model.
"""

from __future__ import annotations

import string
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from modelswap.config.resolved import CorsPolicy
from modelswap.errors import echo
from modelswap.http.error_responses import error_response

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ALLOW_HEADERS = "Authorization, Content-Type, x-api-key, anthropic-version, OpenAI-Beta"
ALLOW_METHODS = "GET, POST, OPTIONS"
MAX_AGE = "600"
# What a page may read of an answer beyond the basics: the id to quote, whose error it is.
EXPOSE_HEADERS = "X-Request-Id, X-Modelswap-Error, X-Modelswap-Hint, Retry-After"
# llama-swap's fallback when a preflight names no headers and allowedHeaders is unset
DEFAULT_ALLOWED_HEADERS = "Content-Type, Authorization, Accept, X-Requested-With"
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~" + string.ascii_letters + string.digits)  # RFC 9110


@dataclass(frozen=True, slots=True)
class Preflight:
    """A preflight this middleware answered: the ``Origin`` it came from (None: it sent
    none) and whether that origin was allowed (the answer carried CORS headers)."""

    origin: str | None
    allowed: bool

    def rule(self) -> dict[str, object]:
        """As the activity row's ``rule``."""
        return {"kind": "cors", "origin": self.origin, "allowed": self.allowed}


PREFLIGHT: web.RequestKey[Preflight] = web.RequestKey("cors_preflight", Preflight)


def _no_policy() -> CorsPolicy | None:
    return None


def _add_vary(response: web.StreamResponse, token: str) -> None:
    """``token`` appended to ``Vary`` (one line), unless it is there already."""
    existing = response.headers.get("Vary")
    if not existing:
        response.headers["Vary"] = token
    elif token.lower() not in {part.strip().lower() for part in existing.split(",")}:
        response.headers["Vary"] = f"{existing}, {token}"


def _asked_headers(value: str) -> str:
    """The header names a preflight asks for that are valid names (the rest dropped)."""
    names = (part.strip() for part in value.split(","))
    return ", ".join(n for n in names if n and all(c in _TOKEN_CHARS for c in n))


class Cors:
    def __init__(
        self,
        origins: tuple[str, ...] | Callable[[], tuple[str, ...]],
        policy: Callable[[], CorsPolicy | None] = _no_policy,
    ) -> None:
        """``origins`` (``corsOrigins``), or a function returning the current ones, and
        ``policy``, the current ``security.cors`` (a reload changes both)."""
        self._origins = origins if callable(origins) else lambda: origins
        self._policy = policy

    def allowed_origin(self, request: web.Request) -> str | None:
        origin = request.headers.get("Origin")
        allowed = self._origins()
        if not origin or not allowed:
            return None
        return origin if origin in allowed or "*" in allowed else None

    @web.middleware
    async def preflight(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        policy = self._policy()
        if policy is not None:
            if request.method != "OPTIONS":
                return await handler(request)
            return self._policy_preflight(request, policy)
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return await handler(request)
        origin = self.allowed_origin(request)
        request[PREFLIGHT] = Preflight(request.headers.get("Origin"), origin is not None)
        if origin is None:  # the gateway's error, in its envelope: a code and the origin
            sent = request.headers.get("Origin")
            return error_response(
                f"CORS origin {echo(sent) if sent else '(none)'} is not allowed "
                "(security.corsOrigins).",
                403,
                code="cors_origin_not_allowed",
            )
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Origin": origin,
                "Access-Control-Allow-Methods": ALLOW_METHODS,
                "Access-Control-Allow-Headers": ALLOW_HEADERS,
                "Access-Control-Max-Age": MAX_AGE,
                "Vary": "Origin",
            },
        )

    async def on_prepare(self, request: web.Request, response: web.StreamResponse) -> None:
        policy = self._policy()
        if policy is not None:
            if "Access-Control-Allow-Origin" not in response.headers:  # a preflight has them
                allow = _policy_origin(policy, request.headers.get("Origin"))
                if allow is not None:
                    _shared_headers(policy, response, allow)
            return
        origin = self.allowed_origin(request)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Expose-Headers"] = EXPOSE_HEADERS
            _add_vary(response, "Origin")

    @staticmethod
    def _policy_preflight(request: web.Request, policy: CorsPolicy) -> web.Response:
        """Every OPTIONS is answered here, 204; the headers a browser needs to go on only for
        an allowed origin."""
        response = web.Response(status=204)
        sent = request.headers.get("Origin")
        allow = _policy_origin(policy, sent)
        request[PREFLIGHT] = Preflight(sent, allow is not None)
        if allow is None:
            return response
        _shared_headers(policy, response, allow)
        response.headers["Access-Control-Allow-Methods"] = ", ".join(policy.allowed_methods)
        if policy.allowed_headers:
            response.headers["Access-Control-Allow-Headers"] = ", ".join(policy.allowed_headers)
        elif asked := _asked_headers(request.headers.get("Access-Control-Request-Headers", "")):
            response.headers["Access-Control-Allow-Headers"] = asked
            _add_vary(response, "Access-Control-Request-Headers")
        else:
            response.headers["Access-Control-Allow-Headers"] = DEFAULT_ALLOWED_HEADERS
        response.headers["Access-Control-Max-Age"] = str(policy.max_age)
        private = request.headers.get("Access-Control-Request-Private-Network", "")
        if policy.allow_private_network and private.lower() == "true":
            response.headers["Access-Control-Allow-Private-Network"] = "true"
        return response


def _policy_origin(policy: CorsPolicy, origin: str | None) -> str | None:
    """``Access-Control-Allow-Origin`` for a request from ``origin``: ``*`` for any, the
    request's own spelling for a listed one, else None (no CORS headers at all)."""
    if not origin:
        return None
    if policy.any_origin:
        return "*"
    return origin if origin.lower() in policy.origins else None


def _shared_headers(policy: CorsPolicy, response: web.StreamResponse, allow: str) -> None:
    """The headers a preflight and an answer both get."""
    response.headers["Access-Control-Allow-Origin"] = allow
    _add_vary(response, "Origin")  # even for *: a request without Origin gets none
    if policy.allow_credentials:
        response.headers["Access-Control-Allow-Credentials"] = "true"
    if policy.exposed_headers:
        response.headers["Access-Control-Expose-Headers"] = ", ".join(policy.exposed_headers)
