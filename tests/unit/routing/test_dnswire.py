"""The DNS wire format of peer discovery: questions as RFC 1035 spells them, answers read with
every bound checked (compression pointers, lengths, record counts). Pure: bytes only."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from modelswap.routing.dnswire import (
    TYPE_A,
    TYPE_AAAA,
    NotThisAnswerError,
    build_query,
    encode_name,
    parse_answer,
)

QNAME = encode_name("pool.test")
FIRST_OWNER = 12 + len(QNAME) + 4  # where the first answer record's owner name starts
SELF_POINTER = struct.pack("!H", 0xC000 | FIRST_OWNER)  # a name that points at itself


def response(
    ident: int,
    records: list[tuple[int, bytes]],
    *,
    flags: int = 0x8180,
    owner: bytes = b"\xc0\x0c",
    count: int | None = None,
) -> bytes:
    """An answer to ``pool.test`` holding ``records`` (type, rdata), owners compressed."""
    head = struct.pack("!HHHHHH", ident, flags, 1, len(records) if count is None else count, 0, 0)
    body = QNAME + struct.pack("!HH", TYPE_A, 1)
    for rtype, rdata in records:
        body += owner + struct.pack("!HHIH", rtype, 1, 5, len(rdata)) + rdata
    return head + body


def test_a_question_is_one_recursive_query_with_an_edns0_record() -> None:
    query = build_query("Pool.Test.", TYPE_AAAA, 0x1234)
    ident, flags, qd, an, ns, ar = struct.unpack_from("!HHHHHH", query)
    assert (ident, flags, qd, an, ns, ar) == (0x1234, 0x0100, 1, 0, 0, 1)
    assert query[12:23] == b"\x04Pool\x04Test\x00"
    assert struct.unpack_from("!HH", query, 23) == (TYPE_AAAA, 1)
    assert struct.unpack_from("!BHH", query, 27) == (0, 41, 4096)  # OPT: 4096-byte payload
    assert struct.unpack_from("!HHHHHH", build_query("a.b", TYPE_A, 1, edns=False))[5] == 0


@pytest.mark.parametrize("name", ["", ".", "a..b", "x" * 64 + ".test", ("a" * 60 + ".") * 5])
def test_names_dns_cannot_carry_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=r"DNS name|label|longer"):
        encode_name(name)


def test_the_asked_type_is_read_from_the_answer_section_cname_chains_included() -> None:
    cname = encode_name("member.pool.test")
    data = response(
        7,
        [
            (5, cname),  # CNAME: skipped, its target's records follow
            (TYPE_A, bytes([10, 0, 0, 5])),
            (TYPE_A, bytes([10, 0, 0, 6])),
            (TYPE_A, bytes([10, 0, 0, 5])),  # the same address twice counts once
            (TYPE_AAAA, bytes(16)),  # not the asked type
        ],
    )
    answer = parse_answer(data, 7, TYPE_A)
    assert answer.addresses == ("10.0.0.5", "10.0.0.6")
    assert (answer.rcode, answer.truncated) == (0, False)


def test_aaaa_records_become_ipv6_text() -> None:
    rdata = bytes.fromhex("fd000000000000000000000000000001")
    assert parse_answer(response(9, [(TYPE_AAAA, rdata)]), 9, TYPE_AAAA).addresses == ("fd00::1",)


def test_rcode_and_truncation_are_reported() -> None:
    nxdomain = parse_answer(response(3, [], flags=0x8183), 3, TYPE_A)
    assert (nxdomain.rcode, nxdomain.addresses) == (3, ())
    assert parse_answer(response(3, [], flags=0x8380), 3, TYPE_A).truncated


def test_an_answer_to_another_question_is_told_apart() -> None:
    with pytest.raises(NotThisAnswerError):
        parse_answer(response(1, []), 2, TYPE_A)
    with pytest.raises(NotThisAnswerError):  # a question, not an answer
        parse_answer(response(1, [], flags=0x0100), 1, TYPE_A)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x00\x07", "shorter than its header"),
        (response(7, [(TYPE_A, b"\x01\x02\x03\x04")])[:-2], "cut short"),
        (response(7, [(TYPE_A, b"\x01")], count=2), "past the end"),
        (response(7, [(TYPE_A, b"\x01\x02\x03\x04")], owner=SELF_POINTER), "too many compression"),
        (response(7, [(TYPE_A, b"\x01\x02\x03\x04")], owner=b"\x80"), "unknown type"),
        (response(7, [], count=5000), "more than"),
    ],
)
def test_malformed_answers_are_value_errors(data: bytes, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        parse_answer(data, 7, TYPE_A)


@given(st.binary(max_size=600), st.sampled_from([TYPE_A, TYPE_AAAA]))
def test_any_bytes_are_an_answer_or_a_value_error(data: bytes, qtype: int) -> None:
    ident = struct.unpack_from("!H", data)[0] if len(data) >= 2 else 0
    try:
        answer = parse_answer(data, ident, qtype)
    except ValueError:
        return
    assert all(isinstance(a, str) for a in answer.addresses)
