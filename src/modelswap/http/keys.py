"""Typed keys for what the aiohttp application carries."""

from __future__ import annotations

from aiohttp import web

from modelswap.runtime import Runtime

RUNTIME: web.AppKey[Runtime] = web.AppKey("runtime", Runtime)
# The client's key after authentication (None when no keys are configured). Plain string key:
# aiohttp's typed RequestKey cannot carry an Optional type.
API_KEY = "modelswap.api_key"
