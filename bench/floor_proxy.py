"""The floor for a Python gateway: a minimal aiohttp pass-through proxy, written for the bench.

    python bench/floor_proxy.py --port 8082 --upstream http://127.0.0.1:8081

One catch-all route, one client session, no routing, no metrics, no logging: read the body,
send it upstream, relay the answer chunk by chunk as it arrives. Whatever a real gateway does
beyond this is what it costs on top of the floor.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Mapping

import aiohttp
from aiohttp import web

SKIP = frozenset({"host", "content-length", "transfer-encoding", "connection", "keep-alive"})
SESSION: web.AppKey[aiohttp.ClientSession] = web.AppKey("session", aiohttp.ClientSession)
UPSTREAM: web.AppKey[str] = web.AppKey("upstream", str)


def forwarded(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in SKIP}


async def proxy(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    session = request.app[SESSION]
    async with session.request(
        request.method,
        request.app[UPSTREAM] + request.path_qs,
        data=body or None,
        headers=forwarded(request.headers),
        allow_redirects=False,
    ) as upstream:
        response = web.StreamResponse(status=upstream.status, headers=forwarded(upstream.headers))
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def session_context(app: web.Application) -> AsyncIterator[None]:
    app[SESSION] = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=None)
    )
    yield
    await app[SESSION].close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    app = web.Application(client_max_size=256 * 1024 * 1024)
    app[UPSTREAM] = args.upstream.rstrip("/")
    app.cleanup_ctx.append(session_context)
    app.router.add_route("*", "/{tail:.*}", proxy)
    web.run_app(app, host=args.host, port=args.port, access_log=None, print=None)


if __name__ == "__main__":
    main()
