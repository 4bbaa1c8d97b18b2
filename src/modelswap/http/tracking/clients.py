"""A client's network: the unit that authentication throttling and connection shares count by.

One IPv4 address (/32), or one IPv6 /64 — the block one host or site usually gets, so walking
through the addresses of one's own /64 buys nothing. An IPv4-mapped IPv6 address counts as its
IPv4 address.
"""

from __future__ import annotations

import ipaddress

IPV6_PREFIX = 64


def client_network(address: str | None) -> str:
    """``address`` (as aiohttp's ``request.remote`` or a socket's peer name gives it) as the
    network it counts in: ``192.0.2.7``, ``2001:db8:1:2::/64``; anything else as itself."""
    if not address:
        return "unknown"
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])  # drop an IPv6 zone (fe80::1%eth0)
    except ValueError:
        return address  # a Unix socket, say: one client
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, IPV6_PREFIX), strict=False))
    return str(ip)
