"""The relay's transport on aiohttp's client session: what the pooled raw connections
(:mod:`modelswap.http.relay.backend_pool`) do not do — TLS, peers, llama-swap's per-model
connection settings (the runtime's session for them) — with aiohttp's failures mapped to the
seam's (:mod:`modelswap.http.relay.transport`)."""

from __future__ import annotations

import functools

import aiohttp
from multidict import CIMultiDict

from modelswap.config import Timeouts
from modelswap.http.relay.transport import (
    FIRST_BYTE,
    BackendBrokeError,
    BackendClosedError,
    BackendConnectTimeoutError,
    BackendRefusedError,
    Deadlines,
    ResponseHead,
    said,
)

_TEXT = ("utf-8", "surrogateescape")  # as aiohttp's server decoded the client's headers


@functools.lru_cache(maxsize=64)
def _client_timeout(connect: float | None) -> aiohttp.ClientTimeout:
    """The connect timeout as aiohttp takes it (built once per value, not per request)."""
    return aiohttp.ClientTimeout(total=None, sock_connect=connect)


class ClientTransport:
    """To ``base_url`` on ``session``. aiohttp alone sees when its connection is made, so it
    keeps the connect timeout itself; the relay's deadlines start at the first byte's."""

    __slots__ = ("_base_url", "_connect", "_session")

    def __init__(self, session: aiohttp.ClientSession, base_url: str, timeouts: Timeouts) -> None:
        self._session = session
        self._base_url = base_url
        connect = timeouts.connect or None  # 0: no limit (llama-swap's)
        if connect and timeouts.tls_handshake and base_url.startswith("https:"):  # timed as one
            connect += timeouts.tls_handshake
        self._connect = connect

    async def open(
        self,
        method: str,
        target: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        deadlines: Deadlines,
    ) -> tuple[ResponseHead, ClientBody]:
        deadlines.phase = FIRST_BYTE
        try:
            response = await self._session.request(
                method,
                self._base_url + target,
                data=body if body else None,
                headers=CIMultiDict(
                    (name.decode(*_TEXT), value.decode(*_TEXT)) for name, value in headers
                ),
                allow_redirects=False,
                timeout=_client_timeout(self._connect),
            )
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientConnectionResetError) as exc:
            raise BackendClosedError(True, said(exc)) from exc
        except aiohttp.ConnectionTimeoutError as exc:
            raise BackendConnectTimeoutError(self._connect or 0.0) from exc
        except aiohttp.ClientConnectorError as exc:
            raise BackendRefusedError(said(exc)) from exc
        except aiohttp.ClientError as exc:
            raise BackendBrokeError(said(exc)) from exc
        head = ResponseHead(
            response.status,
            (response.reason or "").encode("latin-1", "replace"),
            response.raw_headers,
            response.content_length,
            True,
            response.content_type == "text/event-stream",
        )
        return head, ClientBody(response)


class ClientBody:
    """An aiohttp answer's body, as the relay reads it."""

    __slots__ = ("_response",)
    has_data = False  # aiohttp's buffer is its own: every chunk is written as it comes

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def complete(self) -> bool:
        return self._response.content.at_eof()

    async def read(self) -> bytes:
        try:
            return await self._response.content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError) as exc:
            # (only the backend's side: a client that left fails the write, not this read)
            raise BackendBrokeError(said(exc)) from exc

    def finish(self, reusable: bool) -> None:
        if reusable:
            self._response.release()
        else:
            self._response.close()
