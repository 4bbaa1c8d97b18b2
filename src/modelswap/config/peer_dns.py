"""``peers.<id>.discover: {dns: NAME, port: P, …}``: a pool of peers found in DNS, checked.
Every problem names its key path (``peers.<id>.discover.dns`` …)."""

from __future__ import annotations

import ipaddress
import re

from modelswap.config.paths import Problems, key_path
from modelswap.config.resolved import DnsDiscovery
from modelswap.config.schema import RawDnsDiscovery

DNS_PORT = 53
_LABEL_RE = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def resolve_dns_discovery(
    raw: RawDnsDiscovery, base: tuple[str, ...], problems: Problems
) -> DnsDiscovery | None:
    """The pool's discovery, or None with every problem recorded."""
    path = (*base, "discover")
    name = raw.dns.strip().rstrip(".")
    found = len(problems)
    problem = dns_name_problem(name)
    if problem:
        problems.append((key_path(*path, "dns"), problem))
    nameserver = None
    if raw.nameserver is not None:
        nameserver = parse_nameserver(raw.nameserver)
        if nameserver is None:
            problems.append(
                (
                    key_path(*path, "nameserver"),
                    f"{raw.nameserver!r} is not an IP address with an optional port "
                    "(e.g. 10.96.0.10, 127.0.0.1:5353, [fd00::a]:53)",
                )
            )
    if len(problems) > found:
        return None
    return DnsDiscovery(name, raw.port, raw.interval, raw.scheme, nameserver)


def dns_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be looked up in DNS, if it cannot."""
    if not name:
        return "the name is empty"
    if "://" in name:
        return f"{name!r} is a URL; give the name alone (the scheme is discover.scheme)"
    if _is_ip(name):
        return None  # resolves to itself: a pool of one
    if ":" in name:
        return f"{name!r}: give the port as discover.port, not in the name"
    if len(name) > 253:
        return "the name is longer than 253 characters"
    bad = [label for label in name.split(".") if not _LABEL_RE.fullmatch(label)]
    if bad:
        return f"{name!r} is not a DNS name ({bad[0]!r} is not a valid label)"
    return None


def parse_nameserver(text: str) -> tuple[str, int] | None:
    """``IP``, ``IP:port`` or ``[IPv6]:port`` as ``(ip, port)``; None if it is none of them."""
    text = text.strip()
    host, port_text = text, str(DNS_PORT)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                return None
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    if not _is_ip(host) or not (port_text.isascii() and port_text.isdigit()):
        return None
    port = int(port_text)
    return (str(ipaddress.ip_address(host)), port) if 1 <= port <= 65535 else None


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True
