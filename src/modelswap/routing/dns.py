"""Resolving a peer pool's DNS name to its members' addresses, bounded like every other read:
``DNS_TIMEOUT`` seconds for the whole resolution.

Two ways. Without ``nameserver``, the system resolver (``getaddrinfo`` in asyncio's executor),
so ``/etc/resolv.conf`` — Kubernetes' search domains included — and ``/etc/hosts`` apply. With
``nameserver``, dnspython's asynchronous resolver asks that server alone one A and one AAAA
question (over UDP, again over TCP when the answer is truncated); tests point discovery at a DNS
server they run this way. dnspython replaces a hand-written wire client: the message format,
truncation, retries and answer matching are its well-tested work, not ours.

A name that does not exist (NXDOMAIN) or has no address is an answer: no members. Anything
else that fails (no answer in time, a refused or failing server) raises DnsError, and the pool
keeps the members it had.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import TYPE_CHECKING

from modelswap.config.resolved import DnsDiscovery

if TYPE_CHECKING:  # dnspython is imported only when a pool names its nameserver (~3 MiB)
    import dns.asyncresolver
    import dns.rdatatype
    import dns.resolver

DNS_TIMEOUT = 5.0
UDP_RESEND = 1.0  # a lost datagram is asked again after this long (within DNS_TIMEOUT)
_NO_SUCH_NAME = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


class DnsError(Exception):
    """The name could not be resolved now (the last known members are kept)."""


async def resolve_addresses(dns_: DnsDiscovery) -> tuple[str, ...]:
    """Every address of ``dns_.name``, IPv4 first, each once, in a stable order; () when the
    name does not exist or has none. Raises DnsError."""
    try:
        async with asyncio.timeout(DNS_TIMEOUT):
            if dns_.nameserver is None:
                found = await _system_addresses(dns_.name)
            else:
                import dns.rdatatype

                resolver = _resolver(dns_.nameserver)
                a, aaaa = await asyncio.gather(
                    _ask(resolver, dns_.name, dns.rdatatype.A),
                    _ask(resolver, dns_.name, dns.rdatatype.AAAA),
                )
                found = a + aaaa
    except TimeoutError:
        raise DnsError(f"no answer for {dns_.name} within {DNS_TIMEOUT:g} s") from None
    except OSError as exc:
        raise DnsError(f"cannot ask for {dns_.name}: {exc.strerror or exc}") from None
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


def _resolver(server: tuple[str, int]) -> dns.asyncresolver.Resolver:
    """A resolver that asks ``server`` alone: no /etc/resolv.conf, no search domains."""
    import dns.asyncresolver

    resolver = dns.asyncresolver.Resolver(configure=False)
    resolver.nameservers = [server[0]]
    resolver.port = server[1]
    resolver.timeout = UDP_RESEND
    resolver.lifetime = DNS_TIMEOUT
    resolver.use_edns(0, 0, 4096)
    return resolver


async def _ask(
    resolver: dns.asyncresolver.Resolver, name: str, qtype: dns.rdatatype.RdataType
) -> tuple[str, ...]:
    import dns.exception
    import dns.resolver

    server = f"{resolver.nameservers[0]}:{resolver.port}"
    try:
        answer = await resolver.resolve(name, qtype, search=False, raise_on_no_answer=False)
    except dns.resolver.NXDOMAIN:
        return ()
    except dns.resolver.NoNameservers as exc:  # it answered SERVFAIL, REFUSED, ... or nothing
        raise DnsError(f"{server} could not answer for {name}: {_reason(exc)}") from None
    except dns.exception.Timeout:
        raise DnsError(f"cannot ask {server} for {name}: no answer in time") from None
    except dns.exception.DNSException as exc:
        raise DnsError(f"a DNS answer from {server} for {name} is unusable: {exc}") from None
    return tuple(str(rdata.address) for rdata in answer if rdata.rdtype == qtype)


def _reason(exc: dns.resolver.NoNameservers) -> str:
    """The server's own answer (``SERVFAIL``...) when it gave one, else what went wrong."""
    errors = exc.kwargs.get("errors") or []
    for _server, _tcp, _port, error, _answer in errors:
        if isinstance(error, str):
            return error
        if error is not None:
            return str(error)
    return str(exc)
