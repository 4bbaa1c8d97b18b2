"""The metadata probe: after a backend is ready, ask it what it actually allocated
(docs/backends.md §7; docs/architecture.md, "The catalog").

Bounded in every way: one total timeout (2 s) for all requests, each body read as a stream and
abandoned past 64 KiB, http/https only. Any failure means "metadata unavailable" (``None``),
logged once at debug level: it never fails a start and never marks a healthy model unhealthy.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from modelswap.backends import metadata as parse
from modelswap.capped import BodyOverLimitError, read_capped
from modelswap.config import ModelConfig
from modelswap.reported import ModelMetadata

log = logging.getLogger(__name__)

PROBE_TIMEOUT = 2.0
MAX_BODY = 64 * 1024


class _Unavailable(Exception):
    pass


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
        except (_Unavailable, aiohttp.ClientError, OSError, ValueError) as exc:
            reason = str(exc) or type(exc).__name__
        except asyncio.CancelledError:
            log.debug("model %s: metadata unavailable: the probe was cancelled", config.id)
            raise
        log.debug("model %s: metadata unavailable: %s", config.id, reason)
        return None

    async def _probe(self, config: ModelConfig) -> ModelMetadata | None:
        base, name = config.proxy, config.upstream_name
        configured = None if config.backend in ("auto", "generic") else config.backend
        if configured == "ollama":
            context = parse.ollama_context(await self._get(base + "/api/ps"), name)
            return ModelMetadata("ollama", context, source="/api/ps") if context else None
        row = None
        try:
            row = parse.select_row(parse.model_rows(await self._get(base + "/v1/models")), name)
        except _Unavailable:
            if configured != "llamacpp":  # llama.cpp still has /props
                raise
        kind = configured or parse.kind_of(row) or "generic"
        if kind == "llamacpp":
            return await self._llamacpp(base, row)
        if row is None:
            return None
        if kind in ("vllm", "sglang"):
            context = parse.positive_int(row.get("max_model_len"))
        else:
            context = parse.row_context(row)
        if context is None:
            return None
        return ModelMetadata(kind, context, parse.row_n_ctx_train(row), source="/v1/models")

    async def _llamacpp(self, base: str, row: Mapping[str, Any] | None) -> ModelMetadata | None:
        """``/props`` first (per-slot n_ctx, total_slots, input modalities, tools);
        ``/v1/models`` ``meta.n_ctx`` else."""
        n_ctx, slots, caps = None, None, None
        try:
            props = await self._get(base + "/props")
            n_ctx, slots = parse.llamacpp_props(props)
            caps = parse.llamacpp_capabilities(props)
        except _Unavailable:
            if row is None:
                raise  # nothing to fall back on: report why

        n_ctx_train = parse.row_n_ctx_train(row) if row is not None else None
        if n_ctx is not None:
            inputs, tools = caps if caps is not None else (None, None)
            return ModelMetadata(
                "llamacpp", n_ctx, n_ctx_train, slots, "/props", inputs=inputs, tools=tools
            )
        if row is not None:
            fallback = parse.row_context(row)
            if fallback is not None:
                return ModelMetadata("llamacpp", fallback, n_ctx_train, slots, "/v1/models")
        return None

    async def _get(self, url: str) -> bytes:
        async with self._session.get(url, allow_redirects=False) as response:
            if response.status != 200:
                raise _Unavailable(f"GET {urlsplit(url).path} answered {response.status}")
            try:
                return await read_capped(response.content.iter_any(), self._max_body)
            except BodyOverLimitError as exc:
                raise _Unavailable(f"GET {urlsplit(url).path}: {exc}") from exc
