"""Resolving a peer pool's DNS name to its members' addresses, bounded like every other read:
``DNS_TIMEOUT`` seconds for the whole resolution, answers of at most 64 KiB.

Two ways. Without ``nameserver``, the system resolver (``getaddrinfo`` in asyncio's executor),
so ``/etc/resolv.conf`` — Kubernetes' search domains included — and ``/etc/hosts`` apply. With
``nameserver``, one A and one AAAA question of our own over UDP (EDNS0, 4096 bytes; asked again
over TCP when the answer is truncated); tests point discovery at a DNS server they run this way.

A name that does not exist (NXDOMAIN) or has no address is an answer: no members. Anything
else that fails (no answer in time, a refused or failing server) raises DnsError, and the pool
keeps the members it had.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import secrets
import socket
import struct

from modelswap.config.resolved import DnsDiscovery
from modelswap.routing.dnswire import (
    RCODE_NXDOMAIN,
    RCODE_OK,
    TYPE_A,
    TYPE_AAAA,
    Answer,
    NotThisAnswerError,
    build_query,
    parse_answer,
)

DNS_TIMEOUT = 5.0
UDP_RESEND = 1.0  # a lost datagram is asked again after this long (within DNS_TIMEOUT)
MAX_DATAGRAM = 65535
_RCODES = {1: "FORMERR", 2: "SERVFAIL", 4: "NOTIMP", 5: "REFUSED"}
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


class DnsError(Exception):
    """The name could not be resolved now (the last known members are kept)."""


async def resolve_addresses(dns: DnsDiscovery) -> tuple[str, ...]:
    """Every address of ``dns.name``, IPv4 first, each once, in a stable order; () when the
    name does not exist or has none. Raises DnsError."""
    try:
        async with asyncio.timeout(DNS_TIMEOUT):
            if dns.nameserver is None:
                found = await _system_addresses(dns.name)
            else:
                a, aaaa = await asyncio.gather(
                    _ask(dns.nameserver, dns.name, TYPE_A),
                    _ask(dns.nameserver, dns.name, TYPE_AAAA),
                )
                found = a + aaaa
    except TimeoutError:
        raise DnsError(f"no answer for {dns.name} within {DNS_TIMEOUT:g} s") from None
    except OSError as exc:
        raise DnsError(f"cannot ask for {dns.name}: {exc.strerror or exc}") from None
    return ordered(found)


def ordered(addresses: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    parsed = {ipaddress.ip_address(a) for a in addresses}
    return tuple(str(a) for a in sorted(parsed, key=lambda a: (a.version, int(a))))


async def _system_addresses(name: str) -> tuple[str, ...]:
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(name, None, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno in _NO_SUCH_NAME:
            return ()
        raise DnsError(f"cannot resolve {name}: {exc.strerror}") from None
    return tuple(str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6))


async def _ask(server: tuple[str, int], name: str, qtype: int) -> tuple[str, ...]:
    query_id = secrets.randbits(16)
    answer = await _over_udp(server, build_query(name, qtype, query_id), query_id, qtype)
    if answer.truncated:
        query = build_query(name, qtype, query_id, edns=False)
        answer = await _over_tcp(server, query, query_id, qtype)
    if answer.rcode == RCODE_NXDOMAIN:
        return ()
    if answer.rcode != RCODE_OK:
        code = _RCODES.get(answer.rcode, str(answer.rcode))
        raise DnsError(f"{server[0]}:{server[1]} answered {code} for {name}")
    return answer.addresses


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET


async def _over_udp(server: tuple[str, int], query: bytes, query_id: int, qtype: int) -> Answer:
    loop = asyncio.get_running_loop()
    with socket.socket(_family(server[0]), socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        sock.connect(server)  # only the server's datagrams are received
        while True:
            await loop.sock_sendall(sock, query)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(UDP_RESEND):
                    return await _receive(loop, sock, query_id, qtype)


async def _receive(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, query_id: int, qtype: int
) -> Answer:
    while True:
        data = await loop.sock_recv(sock, MAX_DATAGRAM)
        try:
            return parse_answer(data, query_id, qtype)
        except NotThisAnswerError:
            continue  # a late answer to an earlier question
        except ValueError as exc:
            raise DnsError(f"a malformed DNS answer: {exc}") from None


async def _over_tcp(server: tuple[str, int], query: bytes, query_id: int, qtype: int) -> Answer:
    reader, writer = await asyncio.open_connection(*server)
    try:
        writer.write(struct.pack("!H", len(query)) + query)
        await writer.drain()
        (size,) = struct.unpack("!H", await reader.readexactly(2))
        data = await reader.readexactly(size)  # at most 65535 bytes by construction
    except asyncio.IncompleteReadError:
        raise DnsError("the DNS server closed the TCP connection mid-answer") from None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    try:
        return parse_answer(data, query_id, qtype)
    except ValueError as exc:
        raise DnsError(f"a malformed DNS answer: {exc}") from None
