"""The kernel's socket table, asked whether a loopback port listens (supervisor/sockdiag.py):
real sockets on this machine, and the netlink answers it must read or refuse."""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from modelswap.supervisor import sockdiag
from modelswap.supervisor.sockdiag import SockDiag


def _answer(kind: int, sequence: int, payload: bytes) -> bytes:
    return struct.pack("=IHHII", 16 + len(payload), kind, 0, sequence, 0) + payload


def _error(code: int, sequence: int = 7) -> bytes:
    return _answer(sockdiag.NLMSG_ERROR, sequence, struct.pack("=i", -code) + bytes(16))


def _socket_answer(state: int, sequence: int = 7) -> bytes:
    return _answer(
        sockdiag.SOCK_DIAG_BY_FAMILY, sequence, bytes([socket.AF_INET, state]) + bytes(70)
    )


def test_an_answer_naming_a_listening_socket_means_listening() -> None:
    assert sockdiag.parse(_socket_answer(sockdiag.TCP_LISTEN), 7) is True
    assert sockdiag.parse(_socket_answer(1), 7) is False  # ESTABLISHED: no listener


def test_no_such_socket_means_not_listening() -> None:
    assert sockdiag.parse(_error(errno.ENOENT), 7) is False


def test_an_answer_to_another_request_is_skipped() -> None:
    assert sockdiag.parse(_error(errno.ENOENT, sequence=6), 7) is None


@pytest.mark.parametrize(
    "reply",
    [_error(errno.EPERM), _answer(3, 7, bytes(8)), b"\x00" * 8],
    ids=["another error", "another message type", "too short"],
)
def test_any_other_answer_is_refused(reply: bytes) -> None:
    with pytest.raises(ValueError, match="netlink"):
        sockdiag.parse(reply, 7)


def test_the_request_names_the_address_and_port_and_asks_for_listeners() -> None:
    message = sockdiag.request("127.0.0.1", 8080, 3)
    length, kind, flags, sequence, _ = struct.unpack_from("=IHHII", message)
    assert (length, kind, flags, sequence) == (len(message), 20, sockdiag.NLM_F_REQUEST, 3)
    family, protocol, _, _, states = struct.unpack_from("=BBBBI", message, 16)
    assert (family, protocol, states) == (socket.AF_INET, socket.IPPROTO_TCP, 1 << 10)
    sport, dport, src = struct.unpack_from("!HH4s", message, 24)
    assert (sport, dport, src) == (8080, 0, socket.inet_aton("127.0.0.1"))


def test_the_table_sees_a_port_listen_and_close() -> None:
    table = SockDiag()
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            port = server.getsockname()[1]
            seen_bound = table.listening(("127.0.0.1", port))
            if seen_bound is None:
                pytest.skip("this kernel's socket table cannot be asked (no NETLINK_SOCK_DIAG)")
            assert seen_bound is False  # bound, not listening: a connect would be refused
            server.listen()
            assert table.listening(("127.0.0.1", port)) is True
        assert table.listening(("127.0.0.1", port)) is False
    finally:
        table.close()


def test_a_listener_on_every_address_is_seen_on_loopback() -> None:
    table = SockDiag()
    try:
        with socket.socket() as server:
            server.bind(("0.0.0.0", 0))
            server.listen()
            found = table.listening(("127.0.0.1", server.getsockname()[1]))
        if found is None:
            pytest.skip("this kernel's socket table cannot be asked (no NETLINK_SOCK_DIAG)")
        assert found is True  # as a connect to 127.0.0.1 would be accepted
    finally:
        table.close()
