"""The DNS wire format, as far as peer discovery needs it: one A or AAAA question out, the
addresses of the answer back (RFC 1035 §4, RFC 3596, RFC 6891 for the EDNS0 OPT record).

Pure: bytes in, bytes out. Every read is bounds-checked and every name is followed through at
most ``MAX_POINTERS`` compression pointers, so a hostile or broken answer is a ``ValueError``,
never a loop or an ``IndexError``.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

TYPE_A = 1
TYPE_AAAA = 28
TYPE_OPT = 41
CLASS_IN = 1
RCODE_OK = 0
RCODE_NXDOMAIN = 3
EDNS_PAYLOAD = 4096  # what we tell the server we accept over UDP
MAX_POINTERS = 32
MAX_RECORDS = 1024
_ADDRESS_SIZE = {TYPE_A: 4, TYPE_AAAA: 16}
_HEADER = struct.Struct("!HHHHHH")
_RR_FIXED = struct.Struct("!HHIH")


class NotThisAnswerError(ValueError):
    """A datagram that answers another question (another id): to be ignored, not an error."""


@dataclass(frozen=True, slots=True)
class Answer:
    rcode: int
    truncated: bool
    addresses: tuple[str, ...]


def encode_name(name: str) -> bytes:
    """``a.b.c`` as length-prefixed labels; ValueError for a name DNS cannot carry."""
    labels = name.rstrip(".").split(".")
    if not name.strip(".") or any(not label for label in labels):
        raise ValueError(f"{name!r} is not a DNS name")
    out = bytearray()
    for label in labels:
        raw = label.encode("idna") if not label.isascii() else label.encode("ascii")
        if len(raw) > 63:
            raise ValueError(f"{name!r} has a label longer than 63 bytes")
        out += bytes([len(raw)]) + raw
    out += b"\x00"
    if len(out) > 255:
        raise ValueError(f"{name!r} is longer than 253 characters")
    return bytes(out)


def build_query(name: str, qtype: int, query_id: int, *, edns: bool = True) -> bytes:
    """One recursive question for ``name``'s ``qtype`` records (with an EDNS0 OPT record
    offering ``EDNS_PAYLOAD`` bytes unless ``edns`` is false, as over TCP)."""
    header = _HEADER.pack(query_id, 0x0100, 1, 0, 0, 1 if edns else 0)  # RD
    question = encode_name(name) + struct.pack("!HH", qtype, CLASS_IN)
    opt = b"\x00" + _RR_FIXED.pack(TYPE_OPT, EDNS_PAYLOAD, 0, 0) if edns else b""
    return header + question + opt


def parse_answer(data: bytes, query_id: int, qtype: int) -> Answer:
    """The ``qtype`` addresses in the answer section of ``data`` (CNAME chains included: every
    record of the asked type in the answer counts). ValueError if ``data`` is not a response to
    this query or is malformed."""
    if len(data) < _HEADER.size:
        raise ValueError("the DNS answer is shorter than its header")
    ident, flags, qdcount, ancount, _, _ = _HEADER.unpack_from(data)
    if ident != query_id or not flags & 0x8000:
        raise NotThisAnswerError("not the answer to this query")
    rcode = flags & 0x000F
    offset = _HEADER.size
    for _ in range(qdcount):
        offset = skip_name(data, offset) + 4
    if ancount > MAX_RECORDS:
        raise ValueError(f"the DNS answer holds more than {MAX_RECORDS} records")
    found: list[str] = []
    for _ in range(ancount):
        offset = skip_name(data, offset)
        if offset + _RR_FIXED.size > len(data):
            raise ValueError("a DNS record is cut short")
        rtype, rclass, _ttl, length = _RR_FIXED.unpack_from(data, offset)
        offset += _RR_FIXED.size
        if offset + length > len(data):
            raise ValueError("a DNS record's data is cut short")
        if rtype == qtype and rclass == CLASS_IN and length == _ADDRESS_SIZE.get(qtype):
            found.append(str(ipaddress.ip_address(data[offset : offset + length])))
        offset += length
    return Answer(rcode, bool(flags & 0x0200), tuple(dict.fromkeys(found)))


def skip_name(data: bytes, offset: int) -> int:
    """The offset just past the (possibly compressed) name at ``offset``."""
    end: int | None = None
    for _ in range(MAX_POINTERS):
        while True:
            if offset >= len(data):
                raise ValueError("a DNS name runs past the end of the answer")
            length = data[offset]
            if length == 0:
                return end if end is not None else offset + 1
            if length & 0xC0 == 0xC0:
                if offset + 1 >= len(data):
                    raise ValueError("a DNS name pointer is cut short")
                if end is None:
                    end = offset + 2
                offset = ((length & 0x3F) << 8) | data[offset + 1]
                break
            if length & 0xC0:
                raise ValueError("a DNS label has an unknown type")
            offset += 1 + length
    raise ValueError("a DNS name has too many compression pointers")
