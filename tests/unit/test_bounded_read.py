"""read_capped: the cap counts the whole body, and exactly the limit is accepted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from modelswap.bounded_read import BodyOverLimitError, read_capped

KIB = 1024


async def chunks(*sizes: int) -> AsyncIterator[bytes]:
    for size in sizes:
        yield b"x" * size


async def test_the_cap_counts_the_body_not_each_chunk() -> None:
    # Every chunk is under the cap; together they are over it.
    with pytest.raises(BodyOverLimitError) as caught:
        await read_capped(chunks(40 * KIB, 40 * KIB), 64 * KIB)
    assert caught.value.limit == 64 * KIB


async def test_exactly_the_limit_is_accepted_one_byte_more_is_not() -> None:
    assert len(await read_capped(chunks(32 * KIB, 32 * KIB), 64 * KIB)) == 64 * KIB
    with pytest.raises(BodyOverLimitError):
        await read_capped(chunks(32 * KIB, 32 * KIB, 1), 64 * KIB)


async def test_an_over_limit_body_is_left_unread() -> None:
    read: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        while len(read) < 10_000:
            read.append(1)
            yield b"x" * KIB

    with pytest.raises(BodyOverLimitError):
        await read_capped(endless(), 4 * KIB)
    assert len(read) == 5


async def test_the_bytes_come_back_in_order() -> None:
    async def parts() -> AsyncIterator[bytes]:
        for part in (b"ab", b"", b"cd"):
            yield part

    assert await read_capped(parts(), 4) == b"abcd"
