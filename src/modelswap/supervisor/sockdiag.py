"""Is a TCP socket listening on this loopback address and port? Asked of the kernel's socket
table through netlink (``NETLINK_SOCK_DIAG``, what ``ss`` uses; no privilege needed), not by
connecting.

One request names the address and port; the kernel looks the listener up in its hash table
(``inet_diag_find_one_icsk``: the lookup a connecting SYN makes) and answers with the socket,
or ENOENT. No packet is sent and the backend sees nothing. From a thread that sleeps between
looks, one costs ~100 µs of CPU on a 2-core VM where a refused loopback ``connect()`` costs
~250 µs (the SYN, the RST and their softirq; ``docs/PERFORMANCE.md``).

Before its first answer is trusted, the lookup is tried on a socket of our own, listening and
then closed: where the kernel cannot answer (no ``tcp_diag``, a sandbox without netlink) or
answers wrongly, :meth:`SockDiag.listening` returns None for good and the caller connects. A
port reached through NAT (a container's published port without a proxy process) has no
listener here for the lookup to find: the caller still connects now and then
(``listening.TRUTH_EVERY``).
"""

from __future__ import annotations

import errno
import socket
import struct

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 0x2
TCP_LISTEN = 10
NO_COOKIE = 0xFFFFFFFF  # INET_DIAG_NOCOOKIE: match any socket, not one we saw before
TIMEOUT = 0.1  # the kernel answers in microseconds; past this, connect instead

_HEADER = struct.Struct("=IHHII")  # nlmsghdr: length, type, flags, sequence, port id
_REQUEST = struct.Struct("=BBBBI")  # inet_diag_req_v2: family, protocol, ext, pad, states
_SOCKID = struct.Struct("!HH16s16s")  # inet_diag_sockid: sport, dport, src, dst (big-endian)
_SOCKID_TAIL = struct.Struct("=III")  # interface, cookie (two words)


def request(host: str, port: int, sequence: int) -> bytes:
    """The netlink message that asks for the TCP listener on ``host``:``port``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    address = socket.inet_pton(family, host).ljust(16, b"\0")
    body = (
        _REQUEST.pack(family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN)
        + _SOCKID.pack(port, 0, address, bytes(16))
        + _SOCKID_TAIL.pack(0, NO_COOKIE, NO_COOKIE)
    )
    return (
        _HEADER.pack(_HEADER.size + len(body), SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, sequence, 0)
        + body
    )


def parse(reply: bytes, sequence: int) -> bool | None:
    """True: the answer names a listening socket; False: no such socket (ENOENT); None: not
    the answer to ``sequence``. Raises ValueError for an answer that says anything else."""
    if len(reply) < _HEADER.size + 4:
        raise ValueError("a short netlink answer")
    _, kind, _, seq, _ = _HEADER.unpack_from(reply)
    if seq != sequence:
        return None
    if kind == NLMSG_ERROR:
        (code,) = struct.unpack_from("=i", reply, _HEADER.size)
        if -code == errno.ENOENT:
            return False
        raise ValueError(f"netlink error {-code}")
    if kind != SOCK_DIAG_BY_FAMILY:
        raise ValueError(f"netlink answer of type {kind}")
    state = reply[_HEADER.size + 1]  # inet_diag_msg: family, then state
    return state == TCP_LISTEN


class SockDiag:
    """A netlink socket for listener lookups, kept open; for one thread at a time."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._sequence = 0
        self._trusted: dict[int, bool] = {}  # address family: the lookup answered rightly
        self._unavailable = False  # no netlink, or an answer not to be trusted: connect

    def listening(self, target: tuple[str, int]) -> bool | None:
        """Whether a TCP socket listens on ``target`` (an IP address and a port); None when
        the kernel cannot be asked here (then connect to find out)."""
        if self._unavailable:
            return None
        family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        trusted = self._trusted.get(family)
        if trusted is None:
            trusted = self._trusted[family] = self._calibrate(family)
        return self._ask(target) if trusted and not self._unavailable else None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _calibrate(self, family: int) -> bool:
        """Does the lookup find a socket of ours while it listens, and not once it is closed?"""
        host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
        try:
            with socket.socket(family, socket.SOCK_STREAM) as probe:
                probe.bind((host, 0))
                probe.listen(1)
                port = probe.getsockname()[1]
                if self._ask((host, port)) is not True:
                    return False
            return self._ask((host, port)) is False
        except OSError:  # no such family here: connect, as before
            return False

    def _ask(self, target: tuple[str, int]) -> bool | None:
        sock = self._socket()
        if sock is None:
            return None
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF
        try:
            sock.send(request(target[0], target[1], self._sequence))
            for _ in range(4):  # bounded: a late answer to an earlier request is skipped
                found = parse(sock.recv(8192), self._sequence)
                if found is not None:
                    return found
        except (OSError, ValueError):
            pass
        self._broken()
        return None

    def _broken(self) -> None:
        """An answer that cannot be trusted: connect from now on."""
        self.close()
        self._unavailable = True

    def _socket(self) -> socket.socket | None:
        if self._sock is None and not self._unavailable:
            try:
                sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG)
            except (OSError, AttributeError):  # no netlink here: connect, for good
                self._unavailable = True
                return None
            sock.settimeout(TIMEOUT)
            self._sock = sock
        return self._sock
