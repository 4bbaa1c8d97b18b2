"""Peers: another gateway's (or any OpenAI server's) models served through this one.

The peers here are real programs: ``tests/fakes/recording_peer.py`` (records every request it
gets, so a test sees exactly which headers and body reached the peer) and a second modelswap.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.e2e.conftest import (
    HANG,
    REPO,
    Gateway,
    chat,
    chat_body,
    fake_cmd,
    free_port,
    open_stream,
    request,
    stop_gateway,
    stream_tokens,
)

pytestmark = pytest.mark.e2e

RECORDER = REPO / "tests" / "fakes" / "recording_peer.py"
PEER_KEY = "peer-key-5f1c9e"
CLIENT_KEY = "client-key-a7d2"


class Recorder:
    """A running recording peer: its port and the requests it received."""

    def __init__(self, proc: subprocess.Popen[bytes], port: int, record: Path) -> None:
        self.proc, self.port, self.record = proc, port, record

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self, path: str = "/v1/chat/completions") -> list[dict[str, object]]:
        if not self.record.exists():
            return []
        rows = [json.loads(line) for line in self.record.read_text().splitlines()]
        return [row for row in rows if row["path"] == path]


def _wait_listening(port: int, proc: subprocess.Popen[bytes], timeout: float = HANG) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the recording peer exited"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise AssertionError("the recording peer did not listen")


@pytest.fixture
def recorder(tmp_path: Path) -> Iterator[Callable[..., Recorder]]:
    started: list[subprocess.Popen[bytes]] = []

    def start(*flags: str, port: int | None = None) -> Recorder:
        port = port or free_port()
        record = tmp_path / f"peer-{len(started)}.jsonl"
        cmd = [sys.executable, str(RECORDER), "--port", str(port), "--record", str(record)]
        proc = subprocess.Popen([*cmd, *flags], stdin=subprocess.DEVNULL)
        started.append(proc)
        _wait_listening(port, proc)
        return Recorder(proc, port, record)

    yield start
    for proc in started:  # by handle: only what this fixture started
        proc.terminate()
        try:
            proc.wait(timeout=HANG)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def refusing_port() -> socket.socket:
    """A loopback port that refuses connections: bound, never listening. Held (not just
    found free) so the gateway started next cannot take it."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    return sock


def _content(reply_body: bytes) -> str:
    return str(json.loads(reply_body)["choices"][0]["message"]["content"])


def _auth(key: str) -> dict[str, str]:
    return {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}


def test_peer_models_are_routed_by_qualified_and_bare_names_and_local_ids_win(
    gateway: Callable[..., Gateway], recorder: Callable[..., Recorder]
) -> None:
    peer = recorder("--models", "beta,alpha")
    gw = gateway(
        f"  alpha:\n    cmd: {fake_cmd('--model', 'alpha')}\n",
        extra_top=f"peers:\n  box:\n    proxy: {peer.url}\n    models: [beta, alpha]\n",
    )
    qualified = chat(gw, "box/beta")
    assert qualified.status == 200, qualified.body
    assert _content(qualified.body) == "from-peer:beta"  # the peer got its own name
    bare = chat(gw, "beta")
    assert bare.status == 200
    assert _content(bare.body) == "from-peer:beta"
    local = chat(gw, "alpha")  # both serve alpha: the local model wins
    assert local.status == 200
    assert not _content(local.body).startswith("from-peer")
    remote_alpha = chat(gw, "box/alpha")
    assert _content(remote_alpha.body) == "from-peer:alpha"
    sent = [json.loads(str(r["body"]))["model"] for r in peer.requests()]
    assert sent == ["beta", "beta", "alpha"]

    rows = {row["id"]: row for row in gw.get_json("/v1/models")["data"]}  # type: ignore[union-attr]
    assert rows["box/beta"]["owned_by"] == "box"
    for field in ("state", "context_length", "max_model_len", "meta", "configured"):
        assert field not in rows["box/beta"]  # a peer's runtime fields are its own to report
    assert rows["alpha"]["owned_by"] == "modelswap"
    missing = chat(gw, "box/nothing")
    assert missing.status == 404


def test_bare_name_served_by_two_peers_is_ambiguous(
    gateway: Callable[..., Gateway], recorder: Callable[..., Recorder]
) -> None:
    one, two = recorder("--models", "m"), recorder("--models", "m")
    gw = gateway(
        f"  local:\n    cmd: {fake_cmd()}\n",
        extra_top=(
            f"peers:\n  one:\n    proxy: {one.url}\n    models: [m]\n"
            f"  two:\n    proxy: {two.url}\n    models: [m]\n"
        ),
    )
    reply = chat(gw, "m")
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["code"] == "ambiguous_model"
    assert error["suggestions"] == ["one/m", "two/m"]
    assert chat(gw, "two/m").status == 200
    assert len(two.requests()) == 1
    assert not one.requests()


def test_discovery_reads_the_peers_model_list_and_skips_its_peer_rows(
    gateway: Callable[..., Gateway], recorder: Callable[..., Recorder]
) -> None:
    peer = recorder("--models", "gamma,delta", "--peer-row")
    gw = gateway(
        f"  local:\n    cmd: {fake_cmd()}\n",
        extra_top=f"peers:\n  far:\n    proxy: {peer.url}\n    discover: true\n",
    )

    def ids() -> set[str]:
        return {str(row["id"]) for row in gw.get_json("/v1/models")["data"]}  # type: ignore[union-attr]

    gw.wait_for(lambda: "far/gamma" in ids())
    assert {"far/gamma", "far/delta"} <= ids()
    assert not any("far" in i for i in ids() - {"far/gamma", "far/delta"})  # no far/other/far
    reply = chat(gw, "delta")
    assert reply.status == 200
    assert _content(reply.body) == "from-peer:delta"
    status = gw.get_json("/api/peers")["peers"]
    assert status == [  # type: ignore[comparison-overlap]
        {
            "id": "far",
            "proxy": peer.url,
            "breaker": "closed",
            "consecutive_failures": 0,
            "models": ["gamma", "delta"],
            "discover": True,
        }
    ]


def test_the_peer_gets_its_key_and_never_the_clients(
    gateway: Callable[..., Gateway], recorder: Callable[..., Recorder], tmp_path: Path
) -> None:
    peer = recorder("--models", "beta")
    gw = gateway(
        f"  local:\n    cmd: {fake_cmd()}\n",
        extra_top=(
            f"apiKeys:\n  - key: {CLIENT_KEY}\n    scopes: [inference, read, admin]\n"
            f"peers:\n  box:\n    proxy: {peer.url}\n    apiKey: {PEER_KEY}\n"
            "    models: [beta]\n"
        ),
    )
    headers = {**_auth(CLIENT_KEY), "x-api-key": CLIENT_KEY, "api-key": CLIENT_KEY}
    reply = request(gw, "POST", "/v1/chat/completions", chat_body("box/beta"), headers)
    assert reply.status == 200, reply.body
    (received,) = peer.requests()
    sent_headers = {k.lower(): v for k, v in received["headers"].items()}  # type: ignore[attr-defined]
    assert sent_headers["authorization"] == f"Bearer {PEER_KEY}"
    assert CLIENT_KEY not in json.dumps(received)
    # The peer's key is in no listing, export, status or log of this gateway.
    for path in ("/v1/models", "/api/peers", "/api/config", "/running", "/api/security"):
        got = request(gw, "GET", path, headers=_auth(CLIENT_KEY))
        assert PEER_KEY not in got.body.decode(errors="replace"), path
    assert PEER_KEY not in gw.log()


def test_fallback_before_the_first_byte_goes_to_the_next_target(
    gateway: Callable[..., Gateway], recorder: Callable[..., Recorder]
) -> None:
    broken = recorder("--models", "x", "--status", "500")
    good = recorder("--models", "beta")
    refusing = refusing_port()
    closed_port = refusing.getsockname()[1]
    gw = gateway(
        f"  cannot-start:\n    cmd: {fake_cmd('--fail-start')}\n"
        "    fallback: [gone/x, sick/x, good/beta]\n"
        f"  sick-first:\n    cmd: {fake_cmd('--fail-start')}\n    fallback: [sick/x]\n",
        extra_top=(
            "peers:\n"
            f"  gone:\n    proxy: http://127.0.0.1:{closed_port}\n    models: [x]\n"
            f"  sick:\n    proxy: {broken.url}\n    models: [x]\n"
            f"  good:\n    proxy: {good.url}\n    models: [beta]\n"
        ),
    )
    # start failure → connection refused → 500 → answered by the last target
    reply = chat(gw, "cannot-start")
    assert reply.status == 200, reply.body
    assert _content(reply.body) == "from-peer:beta"
    assert len(broken.requests()) == 1
    assert len(good.requests()) == 1
    # Streams too, into the same response.
    with open_stream(gw, "cannot-start") as resp:
        assert resp.status == 200
        tokens, _ = stream_tokens(resp)
    assert "".join(tokens).startswith("from-peer:beta")
    # The last target's own answer is relayed as it is, 5xx included.
    last = chat(gw, "sick-first")
    assert last.status == 500
    assert last.json() == {"error": {"message": "peer is broken"}}
    assert last.headers.get("X-Modelswap-Error") is None  # the peer's answer, not ours
    refusing.close()


def test_no_fallback_once_bytes_reached_the_client(
    gateway: Callable[..., Gateway], recorder: Callable[..., Recorder]
) -> None:
    spare = recorder("--models", "beta")
    gw = gateway(
        f"  crashy:\n    cmd: {fake_cmd('--crash-after', '1', '--tokens', '40', '--tps', '200')}\n"
        "    fallback: [spare/beta]\n",
        extra_top=f"peers:\n  spare:\n    proxy: {spare.url}\n    models: [beta]\n",
    )
    with open_stream(gw, "crashy") as resp:
        assert resp.status == 200
        tokens, events = stream_tokens(resp)
    assert tokens, "the bytes produced before the crash reached the client"
    assert "error" in json.loads(events[-1])  # then a terminated stream with an error event
    assert spare.requests() == []  # and no second answer from the fallback


def test_breaker_opens_after_failures_and_a_probe_closes_it(
    gateway: Callable[..., Gateway], recorder: Callable[..., Recorder]
) -> None:
    refusing = refusing_port()
    port = refusing.getsockname()[1]
    gw = gateway(
        f"  local:\n    cmd: {fake_cmd()}\n",
        extra_top=(
            f"peers:\n  flaky:\n    proxy: http://127.0.0.1:{port}\n    models: [m]\n"
            # The cooldown must not run out before the test has seen the breaker open, however
            # loaded the machine: several seconds (the test then waits for it, as it must).
            "    breaker: {failures: 2, cooldown: 5}\n"
        ),
    )
    assert [chat(gw, "flaky/m").status for _ in range(2)] == [502, 502]
    fast = chat(gw, "flaky/m")  # answered by the open breaker, without a try
    assert fast.status == 503
    assert fast.json()["error"]["code"] == "peer_unavailable"
    assert int(fast.headers["Retry-After"]) >= 1
    (row,) = gw.get_json("/api/peers")["peers"]  # type: ignore[misc]
    assert row["breaker"] == "open"
    assert row["consecutive_failures"] == 2

    refusing.close()
    peer = recorder("--models", "m", port=port)  # the peer comes back
    gw.wait_for(lambda: chat(gw, "flaky/m").status == 200)  # half-open probe
    (row,) = gw.get_json("/api/peers")["peers"]  # type: ignore[misc]
    assert row["breaker"] == "closed"
    assert row["consecutive_failures"] == 0
    assert len(peer.requests()) == 1  # exactly one probe went through


def test_two_gateways_one_a_peer_of_the_other(gateway: Callable[..., Gateway]) -> None:
    """A real modelswap as the peer: it needs its own key; the client's key for the front
    gateway would be refused there, so a 200 proves only the peer key was sent."""
    back = gateway(
        f"  remote:\n    cmd: {fake_cmd('--model', 'remote')}\n    aliases: [remote-alias]\n",
        extra_top=f"apiKeys:\n  - key: {PEER_KEY}\n    scopes: [inference, read]\n",
    )
    front = gateway(
        f"  near:\n    cmd: {fake_cmd()}\n",
        extra_top=(
            f"apiKeys:\n  - {CLIENT_KEY}\n"
            f"peers:\n  back:\n    proxy: {back.base_url}\n    apiKey: {PEER_KEY}\n"
            "    discover: true\n    discoverInterval: 0.2\n"
        ),
    )

    def front_ids() -> set[str]:
        got = request(front, "GET", "/v1/models", headers=_auth(CLIENT_KEY))
        return {str(row["id"]) for row in got.json()["data"]}

    front.wait_for(lambda: "back/remote" in front_ids())
    assert "back/remote-alias" in front_ids()
    for name in ("back/remote", "remote", "remote-alias"):
        reply = request(front, "POST", "/v1/chat/completions", chat_body(name), _auth(CLIENT_KEY))
        assert reply.status == 200, (name, reply.body)
        assert reply.json()["object"] == "chat.completion"
    # The back gateway saw requests for its own names, and ran its model.
    rows = request(back, "GET", "/running", headers=_auth(PEER_KEY)).json()["running"]
    assert {row["model"]: row["state"] for row in rows} == {"remote": "ready"}
    stop_gateway(back)  # the peer goes away: a clean 502, no hang
    reply = request(front, "POST", "/v1/chat/completions", chat_body("remote"), _auth(CLIENT_KEY))
    assert reply.status == 502
    assert reply.json()["error"]["code"] == "upstream_error"
