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
# Set by authentication on a request it serves as asked: one with a valid key (of the scope it
# needs), or any when no keys are configured. Not on an open route reached without a key.
AUTHORISED: web.RequestKey[bool] = web.RequestKey("authorised", bool)


def client_key(request: web.Request) -> ApiKey | None:
    client = request.get(CLIENT)
    return client.key if client is not None else None
