"""Reading a body from outside with a cap on its total size. A leaf: standard library only.

Client bodies, backend metadata and peer model lists are all read this way: the cap counts
the whole body, not each chunk (a peer or a client decides how it chunks), and a body of
exactly ``limit`` bytes is accepted.
"""

from __future__ import annotations

from collections.abc import AsyncIterable

__all__ = ["BodyOverLimitError", "read_capped"]


class BodyOverLimitError(ValueError):
    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"body over {limit} B")


async def read_capped(chunks: AsyncIterable[bytes], limit: int) -> bytes:
    """All of ``chunks`` joined; :class:`BodyOverLimitError` as soon as more than ``limit``
    bytes arrived (the rest is left unread)."""
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise BodyOverLimitError(limit)
    return bytes(body)
