"""The metadata probe: after a backend is ready, ask it what it actually allocated
(docs/backends.md §7; docs/architecture.md, "The catalog").

Bounded in every way: one total timeout (2 s) for all requests, each body read as a stream and
abandoned past 64 KiB, http/https only. Any failure means "metadata unavailable" (``None``),
logged once at debug level: it never fails a start and never marks a healthy model unhealthy.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import aiohttp

from modelswap.backends import registry
from modelswap.backends.adapter import ModelList, Unavailable
from modelswap.bounded_read import BodyOverLimitError, read_capped
from modelswap.config import ModelConfig
from modelswap.reported import ModelMetadata

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 2.0
MAX_BODY = 64 * 1024


class MetadataProbe:
    """Reads a ready backend's model metadata through an injected client session."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        *,
        timeout: float = PROBE_TIMEOUT,
        max_body: int = MAX_BODY,
    ) -> None:
        self._session = session
        self._timeout = timeout
        self._max_body = max_body

    async def probe(self, config: ModelConfig) -> ModelMetadata | None:
        if urlsplit(config.proxy).scheme not in ("http", "https"):
            log.debug("model %s: metadata unavailable: %s is not http(s)", config.id, config.proxy)
            return None
        try:
            async with asyncio.timeout(self._timeout):
                found = await self._probe(config)
            if found is None:
                log.debug("model %s: metadata unavailable: no context reported", config.id)
            return found
        except TimeoutError:
            reason = f"no answer within {self._timeout:g} s"
        except (Unavailable, aiohttp.ClientError, OSError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
        except asyncio.CancelledError:
            log.debug("model %s: metadata unavailable: the probe was cancelled", config.id)
            raise
        log.debug("model %s: metadata unavailable: %s", config.id, reason)
        return None

    async def _probe(self, config: ModelConfig) -> ModelMetadata | None:
        """The configured backend's adapter reads its endpoints; with ``auto`` (or
        ``generic``), the one whose ``owned_by`` the ``/v1/models`` row carries, else the
        generic one."""
        base = config.proxy

        async def ask(path: str) -> bytes:
            return await self._get(base + path)

        models = ModelList(ask, config.upstream_name)
        adapter = registry.configured(config.backend)
        if adapter is None:
            row = await models.row()
            adapter = registry.owning(row.get("owned_by") if row else None) or registry.GENERIC
        return await adapter.read_metadata(ask, config.upstream_name, models)

    async def _get(self, url: str) -> bytes:
        async with self._session.get(url, allow_redirects=False) as response:
            if response.status != 200:
                raise Unavailable(f"GET {urlsplit(url).path} answered {response.status}")
            try:
                return await read_capped(response.content.iter_any(), self._max_body)
            except BodyOverLimitError as exc:
                raise Unavailable(f"GET {urlsplit(url).path}: {exc}") from exc
