"""Typed keys for what the aiohttp application carries."""

from __future__ import annotations

from aiohttp import web

from modelswap.runtime import Runtime

RUNTIME: web.AppKey[Runtime] = web.AppKey("runtime", Runtime)
