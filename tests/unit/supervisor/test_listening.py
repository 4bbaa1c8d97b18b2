"""The listen watcher: one thread that looks for a starting backend's port, hardest where the
model's port listened before, and tells the start's event loop only when it accepts. Real
sockets and a real HTTP server on loopback; waits have a ceiling that only ends a hang."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer
from typing import ClassVar

import pytest

from modelswap.supervisor import listening
from modelswap.supervisor.listening import FAST, INTERVAL, SLOW, ListenWatcher, due_window

HANG = 30.0  # only ends a hang


def test_no_history_means_no_window() -> None:
    assert due_window(100.0, []) is None


def test_the_window_spans_the_last_starts_widened_for_a_busier_host() -> None:
    near, lo, hi = due_window(100.0, [0.5, 0.7, 0.6])  # type: ignore[misc]
    assert lo < 100.5 < 100.7 < hi  # every past listening moment is inside
    assert 100.0 < near < lo  # nearing it comes first; the loading before that is not near


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (10.0, SLOW),
        (11.48, 0.02),  # the look after this one is where the window is near
        (11.5, INTERVAL),  # near it: a start a little faster than the last ones
        (11.99, 0.01),  # ... whose next look is where the window begins
        (12.0, FAST),
        (12.5, FAST),
        (13.0, FAST),
        (13.01, INTERVAL),
    ],
)
def test_it_looks_rarely_before_the_window_often_inside_and_steadily_after(
    now: float, expected: float
) -> None:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        watch = listening._Watch(("127.0.0.1", 1), loop, future, None, (11.5, 12.0, 13.0))
        assert watch.interval(now) == pytest.approx(expected)
    finally:
        loop.close()


def test_without_a_window_it_looks_at_the_steady_interval() -> None:
    loop = asyncio.new_event_loop()
    try:
        watch = listening._Watch(("127.0.0.1", 1), loop, loop.create_future(), None, None)
        assert watch.interval(0.0) == INTERVAL
        watch.listening_at = 0.0  # then the health URL, at its own pace
        assert watch.interval(0.0) == listening.HEALTH_INTERVAL
    finally:
        loop.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Health(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[HTTPServer]:
    server = HTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


async def test_it_says_when_a_port_begins_to_listen() -> None:
    watcher = ListenWatcher()
    port = free_port()
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", port))
        seen = watcher.watch(("127.0.0.1", port))
        await asyncio.sleep(0.05)  # bound, not listening: refused, so not seen
        assert not seen.done()
        server.listen()
        result = await asyncio.wait_for(seen, HANG)
    assert result.healthy_at is None  # no health URL was given
    assert watcher.watching() == 0


async def test_it_waits_for_a_2xx_health_answer_once_the_port_listens(
    http_server: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_Health, "status", 503)  # llama.cpp while it loads
    port = http_server.server_address[1]
    watcher = ListenWatcher()
    seen = watcher.watch(("127.0.0.1", port), health_url=f"http://127.0.0.1:{port}/health")
    for _ in range(int(HANG / 0.01)):  # until the thread has seen the port listen
        if watcher.listening(seen) is not None:
            break
        await asyncio.sleep(0.01)
    listened_at = watcher.listening(seen)
    assert listened_at is not None
    await asyncio.sleep(0.05)  # several 503s: still not ready
    assert not seen.done()
    monkeypatch.setattr(_Health, "status", 200)
    result = await asyncio.wait_for(seen, HANG)
    assert result.listening_at == listened_at
    assert result.healthy_at is not None
    assert result.healthy_at > result.listening_at


def test_the_thread_asks_only_plain_http_health_urls() -> None:
    assert listening.watchable(None)
    assert listening.watchable("http://127.0.0.1:8080/health")
    assert not listening.watchable("https://127.0.0.1:8080/health")


async def test_a_cancelled_watch_is_dropped() -> None:
    watcher = ListenWatcher()
    seen = watcher.watch(("127.0.0.1", free_port()))
    assert watcher.watching() == 1
    seen.cancel()
    for _ in range(int(HANG / 0.01)):
        if watcher.watching() == 0:
            break
        await asyncio.sleep(0.01)
    assert watcher.watching() == 0


def test_a_health_url_that_is_not_plain_http_is_left_to_the_loop() -> None:
    for url in ("https://127.0.0.1:1/health", f"http://127.0.0.1:{free_port()}/health"):
        asker = listening.HealthAsker(url)  # https: not the thread's to ask; http: refused
        try:
            assert asker.ask() is False
        finally:
            asker.close()


def test_once_listening_it_asks_health_often_only_where_health_answered_before() -> None:
    loop = asyncio.new_event_loop()
    try:
        future = loop.create_future()
        # Past starts answered 2xx 4.0-4.5 s after their port listened (llama.cpp's load).
        watch = listening._Watch(("127.0.0.1", 1), loop, future, "http://x/", None, (4.0, 4.5))
        watch.listened(11.0)  # this start's port listened at 11.0: the window follows it
        assert watch.interval(12.0) == listening.SLOW_HEALTH  # loading: a 503 now and then
        assert watch.interval(15.0) == listening.FAST_HEALTH
        assert watch.interval(15.5) == listening.FAST_HEALTH
        assert watch.interval(16.0) == listening.HEALTH_INTERVAL
    finally:
        loop.close()


def test_with_no_past_start_health_is_asked_at_the_steady_interval() -> None:
    loop = asyncio.new_event_loop()
    try:
        watch = listening._Watch(("127.0.0.1", 1), loop, loop.create_future(), "http://x/", None)
        watch.listened(11.0)
        assert watch.healthy_due is None
        assert watch.interval(11.5) == listening.HEALTH_INTERVAL
    finally:
        loop.close()


class _KeepAlive(BaseHTTPRequestHandler):
    """HTTP/1.1, kept alive; counts the connections it accepted; after ``close_after`` answers
    on one connection it closes it without a word (as a server's keep-alive timeout does)."""

    protocol_version = "HTTP/1.1"
    status = 503
    body = b""
    close_after = 0  # 0: never
    connections = 0
    answers: ClassVar[list[int]] = []

    def setup(self) -> None:
        type(self).connections += 1
        self.served = 0
        super().setup()

    def do_GET(self) -> None:
        self.served += 1
        last = self.close_after and self.served >= self.close_after
        type(self).answers.append(self.status)  # before the answer: the client may look at once
        self.send_response(self.status)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        if last:
            self.close_connection = True
        self.wfile.write(self.body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def keep_alive() -> Iterator[tuple[HTTPServer, type[_KeepAlive]]]:
    handler = type("Handler", (_KeepAlive,), {"connections": 0, "answers": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def test_health_is_asked_again_over_the_connection_that_saw_the_port_listen(
    keep_alive: tuple[HTTPServer, type[_KeepAlive]],
) -> None:
    server, handler = keep_alive
    port = server.server_address[1]
    loop = asyncio.new_event_loop()
    try:
        url = f"http://127.0.0.1:{port}/health"
        watch = listening._Watch(("127.0.0.1", port), loop, loop.create_future(), url, None)
        for _ in range(5):  # llama.cpp while it loads: 503, 503, ...
            assert watch.look() is None
        assert watch.listening_at is not None
        handler.status = 200
        seen = watch.look()
        assert seen is not None
        assert seen.healthy_at is not None
    finally:
        loop.close()
    assert handler.answers == [503] * 5 + [200]
    assert handler.connections == 1  # one connection: the listen check's, kept alive


def test_a_kept_alive_connection_the_backend_closed_costs_no_look(
    keep_alive: tuple[HTTPServer, type[_KeepAlive]],
) -> None:
    server, handler = keep_alive
    handler.close_after = 2  # the backend ends each connection after its second answer
    asker = listening.HealthAsker(f"http://127.0.0.1:{server.server_address[1]}/health")
    try:
        assert [asker.ask() for _ in range(4)] == [False] * 4
        handler.status = 200
        assert asker.ask() is True  # asked on a fresh connection at once, not a miss
    finally:
        asker.close()
    assert handler.answers == [503] * 4 + [200]
    assert handler.connections == 3


def test_an_answer_too_long_to_read_is_not_left_on_the_connection(
    keep_alive: tuple[HTTPServer, type[_KeepAlive]],
) -> None:
    server, handler = keep_alive
    handler.body = b"x" * 100_000  # past the 64 KiB read: the rest must not be the next answer
    asker = listening.HealthAsker(f"http://127.0.0.1:{server.server_address[1]}/health")
    try:
        assert asker.ask() is False
        handler.status, handler.body = 200, b"ok"
        assert asker.ask() is True
    finally:
        asker.close()
    assert handler.answers == [503, 200]  # the second GET was not sent behind unread bytes
    assert handler.connections == 2


def test_a_health_url_elsewhere_does_not_take_the_listen_checks_connection(
    keep_alive: tuple[HTTPServer, type[_KeepAlive]],
) -> None:
    server, handler = keep_alive
    port = server.server_address[1]
    handler.status = 200
    asker = listening.HealthAsker(f"http://127.0.0.1:{port}/health")
    other = socket.create_connection(("127.0.0.1", port))
    try:
        asker.adopt(other, ("127.0.0.1", port + 1))  # not where the URL points: closed
        assert other.fileno() == -1
        assert asker.ask() is True
    finally:
        asker.close()


class _NoListener:
    """The socket table of a port that only NAT answers (a container's published port without
    a proxy process): no listener here, whatever accepts."""

    def __init__(self) -> None:
        self.asked = 0

    def listening(self, target: tuple[str, int]) -> bool:
        self.asked += 1
        return False


def test_a_port_the_table_cannot_see_is_still_found_by_connecting_now_and_then() -> None:
    loop = asyncio.new_event_loop()
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen()
            target = ("127.0.0.1", server.getsockname()[1])
            watch = listening._Watch(target, loop, loop.create_future(), None, None)
            table = _NoListener()
            seen = [watch.look(table) for _ in range(listening.TRUTH_EVERY)]
    finally:
        loop.close()
    assert seen[:-1] == [None] * (listening.TRUTH_EVERY - 1)  # the table's "no" was believed
    assert seen[-1] is not None  # until a connect found it accepting
    assert table.asked == listening.TRUTH_EVERY - 1
