"""Typed keys for what the aiohttp application carries."""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from modelswap.config.resolved import ApiKey
from modelswap.runtime import Runtime

RUNTIME: web.AppKey[Runtime] = web.AppKey("runtime", Runtime)


@dataclass(frozen=True, slots=True)
class Client:
    """Who is asking: the matched key, or None when no keys are configured."""

    key: ApiKey | None = None


CLIENT: web.RequestKey[Client] = web.RequestKey("client", Client)


def client_key(request: web.Request) -> ApiKey | None:
    client = request.get(CLIENT)
    return client.key if client is not None else None
