"""One client address with many requests in flight is served; its idle connections are still
capped (issue 28, part 1).

``limits.maxConnectionsPerClient`` counts a client's connections that are not at work: without a
complete request head yet, refused for their key, or idle between requests. A connection whose
request is served does not count, so one client (an Open WebUI, an evaluation harness, a
benchmark at ``--concurrency 512``) with more requests in flight than the share gets no error
under the default limits. The fake backend's ``--barrier N`` holds every request until N have
arrived: the requests were all in flight at once when they are answered, however slowly this
machine runs. Setup and probes use another address (127.0.0.2), so that only the client under
test holds connections from 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import http.client
import json
import os
import select
import signal
import socket
import time

import aiohttp
import pytest
from tests.e2e.conftest import HANG, Gateway, chat_body, descriptors, fake_cmd

pytestmark = pytest.mark.e2e

JSON = {"Content-Type": "application/json"}
OTHER = "127.0.0.2"  # setup and probes: never the client under test


def post(
    gw: Gateway, path: str, body: bytes = b"", source: str = OTHER, method: str = "POST"
) -> tuple[int, bytes, str | None]:
    """One request on its own connection from ``source``: status, body, Connection header."""
    conn = http.client.HTTPConnection(
        "127.0.0.1", gw.port, timeout=HANG, source_address=(source, 0)
    )
    try:
        conn.request(method, path, body=body or None, headers=JSON if body else {})
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.getheader("Connection")
    finally:
        conn.close()


def check_answer(status: int, body: bytes, stream: bool) -> None:
    assert status == 200, body[:500]
    if stream:
        events = [line[6:] for line in body.split(b"\n") if line.startswith(b"data: ")]
        assert events[-1] == b"[DONE]", body[-300:]
        assert sum(b'"content": "tok' in event for event in events) == 2, body[-300:]
    else:
        assert json.loads(body)["choices"][0]["message"]["content"] == "tok0 tok1 ", body


async def in_flight_together(gw: Gateway, count: int, stream: bool) -> None:
    """``count`` requests at once from 127.0.0.1, each on its own connection, twice: the first
    round meets the backend's barrier; the second reuses what the first kept alive and opens
    the rest anew. The first failure ends the round (the rest are cancelled) and the test."""
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=HANG)
    body = chat_body("fake", stream=stream)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one() -> None:
            async with session.post(gw.url("/v1/chat/completions"), data=body, headers=JSON) as r:
                check_answer(r.status, await r.read(), stream)

        for _ in range(2):
            async with asyncio.TaskGroup() as group:
                for _ in range(count):
                    group.create_task(one())


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "non-streamed"])
@pytest.mark.parametrize("count", [128, 512])
async def test_one_client_with_hundreds_of_requests_in_flight_gets_no_error(
    gateway: type[Gateway], count: int, stream: bool
) -> None:
    with descriptors(4 * count + 512):  # the client's, the gateway's both ways, the backend's
        gw = gateway(  # type: ignore[call-arg]
            f"  fake:\n    cmd: {fake_cmd('--barrier', str(count), '--tokens', '2')}\n"
        )
        assert post(gw, "/api/models/load/fake")[0] == 200
        await in_flight_together(gw, count, stream)
    assert "too_many_connections" not in gw.log()
    assert "refusing connections" not in gw.log()


def test_idle_and_new_connections_over_the_share_are_closed_or_refused(
    gateway: type[Gateway],
) -> None:
    share = 4
    gw = gateway(  # type: ignore[call-arg]
        f"  fake:\n    cmd: {fake_cmd('--barrier', str(2 * share), '--tokens', '2')}\n",
        # nothing is closed for its headerTimeout during the test: only the shares act
        extra_top=f"limits: {{maxConnectionsPerClient: {share}, headerTimeout: {HANG}}}",
    )
    assert post(gw, "/api/models/load/fake")[0] == 200
    conns = [
        http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG) for _ in range(2 * share)
    ]
    slow: list[socket.socket] = []

    def ask(conn: http.client.HTTPConnection) -> tuple[int, bytes, str | None]:
        conn.request("POST", "/v1/chat/completions", body=chat_body("fake"), headers=JSON)
        resp = conn.getresponse()
        return resp.status, resp.read(), resp.getheader("Connection")

    try:
        # Twice the share in flight at once from one address: every one is served.
        with concurrent.futures.ThreadPoolExecutor(len(conns)) as pool:
            answers = list(pool.map(ask, conns))
        for status, body, _ in answers:
            check_answer(status, body, stream=False)
        # The share is kept alive after its answer; the rest are told to close.
        kept = [c for c, (_, _, header) in zip(conns, answers, strict=True) if header != "close"]
        assert len(kept) == share, [header for _, _, header in answers]
        for conn in conns:
            if conn not in kept:
                assert conn.sock is None  # http.client closed it, as the answer said

        # A share of new connections that never finish their head (slow headers): one more
        # from the address waits for a place, gets none and is refused; the idle connections
        # are not in the way of either, and another address has its own share.
        for _ in range(share):
            sock = socket.create_connection(("127.0.0.1", gw.port), timeout=HANG)
            slow.append(sock)
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        status, body, header = post(gw, "/v1/chat/completions", chat_body("fake"), "127.0.0.1")
        assert status == 503, body
        assert header == "close"
        error = json.loads(body)["error"]
        assert error["code"] == "too_many_connections"
        assert f"limits.maxConnectionsPerClient: {share}" in error["message"]
        assert post(gw, "/v1/chat/completions", chat_body("fake"))[0] == 200

        # The idle connections kept alive are served on meanwhile.
        for conn in kept:
            status, body, header = ask(conn)
            check_answer(status, body, stream=False)
            assert header != "close"
    finally:
        for conn in conns:
            conn.close()
        for sock in slow:
            sock.close()
    # Once the slow ones are closed the address is served again. A new connection waits for a
    # place, so it is served as soon as the gateway has seen the closes; it is asked again only
    # if a very busy machine delayed those past the wait.
    statuses: list[int] = []
    while len(statuses) < 20 and 200 not in statuses:
        statuses.append(post(gw, "/health", source="127.0.0.1", method="GET")[0])
    assert statuses[-1] == 200, statuses


def read_until(sock: socket.socket, marker: bytes) -> bytes:
    """What ``sock`` receives until ``marker`` (bounded: the socket's timeout, 64 reads)."""
    data = b""
    for _ in range(64):
        if marker in data:
            break
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_with_keys_a_connection_is_at_work_only_with_a_valid_key(gateway: type[Gateway]) -> None:
    key, share = "sk-connection-share-key-0001", 2  # the two kinds of keyless connection below
    gw = gateway(  # type: ignore[call-arg]
        f"  fake:\n    cmd: {fake_cmd()}\n",
        extra_top=f"apiKeys: [{{key: {key}, scopes: [read]}}]\n"
        f"limits: {{maxConnectionsPerClient: {share}}}",
    )
    opened: list[socket.socket] = []

    def ask(path: str, auth: str = "") -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", gw.port), timeout=HANG)
        opened.append(sock)
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
        return sock

    try:
        # More event streams with the key than the share: requests at work, all served.
        for _ in range(share + 1):
            stream = ask("/api/events", f"x-api-key: {key}\r\n")
            assert b"event: snapshot" in read_until(stream, b"event: snapshot")
        # Connections kept open after a request without a key take the share: one answered 401,
        # one answered on an open route (served, but not with a key).
        head = read_until(ask("/api/events"), b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401"), head
        head = read_until(ask("/health"), b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        status, body, _ = post(gw, "/api/events", source="127.0.0.1", method="GET")
        assert status == 503, body
        assert f"limits.maxConnectionsPerClient: {share}" in json.loads(body)["error"]["message"]
    finally:
        for sock in opened:
            sock.close()


def test_a_burst_of_connects_while_the_gateway_is_busy_waits_in_the_accept_queue(
    gateway: type[Gateway],
) -> None:
    """While the gateway's loop cannot accept (here: stopped outright), the kernel completes
    the handshakes of a burst of connects in the listener's accept queue. With a short queue
    (aiohttp's 128) the SYNs past it are dropped and each such client waits out a 1 s
    retransmit, then another; the listener asks for the longest queue the kernel allows."""
    burst = 400
    with open("/proc/sys/net/core/somaxconn") as f:
        if int(f.read()) < burst:
            pytest.skip(f"net.core.somaxconn is under {burst}")
    gw = gateway(f"  fake:\n    cmd: {fake_cmd()}\n")  # type: ignore[call-arg]
    socks: list[socket.socket] = []
    os.kill(gw.proc.pid, signal.SIGSTOP)
    try:
        for _ in range(burst):
            sock = socket.socket()
            sock.setblocking(False)
            socks.append(sock)
            with contextlib.suppress(BlockingIOError):
                sock.connect(("127.0.0.1", gw.port))
        # Established (writable, no error) once the kernel has queued it; a dropped SYN stays
        # pending for as long as the gateway cannot accept, here past the ceiling.
        pending = {sock.fileno(): sock for sock in socks}
        poller = select.poll()
        for fd in pending:
            poller.register(fd, select.POLLOUT)
        deadline = time.monotonic() + HANG
        while pending and time.monotonic() < deadline:
            for fd, _ in poller.poll(500):
                assert pending[fd].getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                poller.unregister(fd)
                del pending[fd]
        assert not pending, f"{len(pending)} of {burst} connects not queued by the kernel"
    finally:
        os.kill(gw.proc.pid, signal.SIGCONT)
        for sock in socks:
            sock.close()
    assert post(gw, "/health", method="GET")[0] == 200
