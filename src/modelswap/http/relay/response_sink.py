"""The relay's sink on aiohttp's side: an answer written through a ``web.StreamResponse``."""

from __future__ import annotations

from aiohttp import web

_TEXT = ("utf-8", "surrogateescape")  # as aiohttp's client decoded a backend's headers


class ResponseSink:
    """The client's side of a request served by aiohttp's routes. A stream opened early while
    its model loads (:meth:`open_early`) is one whose head already went out."""

    __slots__ = ("_out", "_request", "cut", "response")

    def __init__(self, request: web.Request) -> None:
        self._request = request
        self.response: web.StreamResponse | None = None
        self._out: list[bytes] = []
        self.cut: str | None = None  # why the answer was cut (the door closes the connection)

    @property
    def started(self) -> bool:
        return self.response is not None

    @property
    def backlogged(self) -> bool:
        """Anything written, or a head not sent: aiohttp's writes are awaited (it drains as
        it writes)."""
        response = self.response
        return bool(self._out) or (response is not None and not response.prepared)

    def flush(self) -> None:
        """Nothing: :attr:`backlogged` has the relay await :meth:`drained`."""

    async def open_early(self, response: web.StreamResponse) -> web.StreamResponse:
        await response.prepare(self._request)
        self.response = response
        return response

    def head(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], length: int | None
    ) -> None:
        response = web.StreamResponse(status=status, reason=reason.decode("latin-1") or None)
        for name, value in headers:
            response.headers.add(name.decode(*_TEXT), value.decode(*_TEXT))
        if length is not None:
            response.content_length = length
        self.response = response

    def write(self, data: bytes) -> None:
        self._out.append(data)

    async def drained(self) -> None:
        response = self.response
        assert response is not None
        if not response.prepared:
            await response.prepare(self._request)
        out = self._out
        if out:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            await response.write(data)

    async def end(self) -> None:
        await self.drained()
        assert self.response is not None
        await self.response.write_eof()

    def abort(self, reason: str) -> None:
        self.cut = reason
