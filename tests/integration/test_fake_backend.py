"""Self-test of the fake inference backend (tests/fakes/openai_backend.py).

Each test starts the fake as a real subprocess on a free loopback port and talks HTTP to it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.conftest import free_port

FAKE = Path(__file__).resolve().parents[1] / "fakes" / "openai_backend.py"
# The ceiling of every wait here (a state, a line, an exit): it only ends a hang.
DEADLINE = 60.0
# A load long enough that a test surely looks while the fake is still loading, however loaded
# the machine (the look itself takes milliseconds).
LOADING = "4"


@dataclass
class Fake:
    proc: subprocess.Popen[bytes]
    port: int
    stdout_path: Path
    stderr_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stdout(self) -> str:
        return self.stdout_path.read_text()

    def stderr(self) -> str:
        return self.stderr_path.read_text()

    async def wait_exit(self) -> int:
        deadline = time.monotonic() + DEADLINE
        while (code := self.proc.poll()) is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"fake did not exit; stderr:\n{self.stderr()}")
            await asyncio.sleep(0.02)
        return code

    async def wait_stderr(self, text: str) -> None:
        deadline = time.monotonic() + DEADLINE
        while text not in self.stderr():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"{text!r} not in stderr:\n{self.stderr()}")
            await asyncio.sleep(0.02)

    async def wait_ready(self, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + DEADLINE
        while True:
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with session.get(f"{self.url}/health") as resp:
                    if resp.status == 200:
                        return
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"fake not ready; stderr:\n{self.stderr()}")
            await asyncio.sleep(0.03)


SpawnFn = Callable[..., Fake]


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[SpawnFn]:
    started: list[Fake] = []

    def _spawn(*args: str) -> Fake:
        port = free_port()
        n = len(started)
        out_path, err_path = tmp_path / f"fake{n}.out", tmp_path / f"fake{n}.err"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            proc = subprocess.Popen(
                [sys.executable, str(FAKE), "--port", str(port), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        fake = Fake(proc, port, out_path, err_path)
        started.append(fake)
        return fake

    yield _spawn
    for fake in started:
        if fake.proc.poll() is None:
            fake.proc.kill()
        fake.proc.wait(timeout=DEADLINE)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE)) as s:
        yield s


async def ready_fake(spawn: SpawnFn, session: aiohttp.ClientSession, *args: str) -> Fake:
    fake = spawn(*args)
    await fake.wait_ready(session)
    return fake


async def read_sse(resp: aiohttp.ClientResponse) -> list[Any]:
    """Parse `data: ...` events; returns decoded JSON objects and the literal "[DONE]"."""
    events: list[Any] = []
    async for raw in resp.content:
        line = raw.decode().rstrip("\r\n")
        if not line:
            continue
        assert line.startswith("data: "), line
        data = line[len("data: ") :]
        events.append(data if data == "[DONE]" else json.loads(data))
    return events


async def collect_lines(
    session: aiohttp.ClientSession, url: str, req: dict[str, Any], lines: list[bytes]
) -> None:
    """POST and append every non-empty response line to `lines` (which survives errors)."""
    async with session.post(url, json=req) as resp:
        async for raw in resp.content:
            if raw.strip():
                lines.append(raw)


def socket_fds(pid: int) -> list[str]:
    """The socket fds a process holds (Linux /proc; empty where /proc is missing)."""
    fd_dir = Path(f"/proc/{pid}/fd")
    if not fd_dir.is_dir():
        return []
    targets = [os.readlink(fd_dir / fd) for fd in os.listdir(fd_dir)]
    return [t for t in targets if t.startswith("socket:")]


CHAT = {"model": "fake", "messages": [{"role": "user", "content": "hello there world"}]}


@pytest.mark.integration
async def test_llamacpp_loading_503_then_ready(
    spawn: SpawnFn, session: aiohttp.ClientSession
) -> None:
    fake = spawn("--flavor", "llamacpp", "--load-delay", LOADING, "--ctx", "4096")
    deadline = time.monotonic() + DEADLINE
    while True:  # the port is bound immediately, before the model is loaded
        try:
            async with session.get(f"{fake.url}/health") as resp:
                status, body = resp.status, await resp.json()
                break
        except aiohttp.ClientConnectionError:
            assert time.monotonic() < deadline, fake.stderr()
            await asyncio.sleep(0.02)
    assert status == 503
    assert body == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
    async with session.post(f"{fake.url}/v1/chat/completions", json=CHAT) as resp:
        assert resp.status == 503
    async with session.get(f"{fake.url}/v1/models") as resp:
        assert resp.status == 200
        models = await resp.json()
    assert models["object"] == "list"
    entry = models["data"][0]
    assert entry["id"] == "fake"
    assert entry["owned_by"] == "llamacpp"
    assert entry["meta"] == {"n_ctx": 4096, "n_ctx_train": 8192}

    await fake.wait_ready(session)
    async with session.get(f"{fake.url}/health") as resp:
        assert await resp.json() == {"status": "ok"}
        assert resp.headers["X-Fake-Pid"] == str(fake.proc.pid)
    async with session.get(f"{fake.url}/props") as resp:
        props = await resp.json()
    assert props["default_generation_settings"]["n_ctx"] == 4096
    assert props["total_slots"] == 1
    err = fake.stderr()
    assert "load_tensors: loading model tensors" in err
    assert "llama_context: n_ctx = 4096" in err
    assert f"main: server is listening on http://127.0.0.1:{fake.port}" in err


@pytest.mark.integration
async def test_vllm_refuses_while_loading_then_empty_health(
    spawn: SpawnFn, session: aiohttp.ClientSession
) -> None:
    fake = spawn("--flavor", "vllm", "--load-delay", LOADING, "--ctx", "1024", "--model", "m1")
    await fake.wait_stderr("Starting to load model m1")
    with pytest.raises(aiohttp.ClientConnectorError):
        async with session.get(f"{fake.url}/health"):
            pass
    await fake.wait_ready(session)
    async with session.get(f"{fake.url}/health") as resp:
        assert resp.status == 200
        assert await resp.read() == b""
    async with session.get(f"{fake.url}/props") as resp:
        assert resp.status == 404
    async with session.get(f"{fake.url}/v1/models") as resp:
        entry = (await resp.json())["data"][0]
    assert entry["id"] == "m1"
    assert entry["owned_by"] == "vllm"
    assert entry["max_model_len"] == 1024
    assert "Application startup complete." in fake.stderr()


@pytest.mark.integration
async def test_chat_and_completion_non_stream(
    spawn: SpawnFn, session: aiohttp.ClientSession
) -> None:
    fake = await ready_fake(spawn, session, "--tokens", "3")
    async with session.post(f"{fake.url}/v1/chat/completions", json=CHAT) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert body["object"] == "chat.completion"
    assert body["model"] == "fake"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "tok0 tok1 tok2 "},
            "finish_reason": "length",
        }
    ]
    assert body["usage"] == {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}

    req = {"model": "anything", "prompt": "a b", "max_tokens": 2}
    async with session.post(f"{fake.url}/v1/completions", json=req) as resp:
        body = await resp.json()
    assert body["object"] == "text_completion"
    assert body["model"] == "anything"  # not strict: echoed back
    assert body["choices"][0]["text"] == "tok0 tok1 "
    assert body["usage"]["prompt_tokens"] == 2

    async with session.post(f"{fake.url}/v1/chat/completions", data=b"{not json") as resp:
        assert resp.status == 400
        assert (await resp.json())["error"]["type"] == "invalid_request_error"

    async with session.get(f"{fake.url}/stats") as resp:
        stats = await resp.json()
    assert stats == {
        "requests": 3,
        "in_flight": 0,
        "completed": 3,
        "disconnected": 0,
        "sleeps": 0,
        "wakes": 0,
        "pid": fake.proc.pid,
    }


@pytest.mark.integration
@pytest.mark.parametrize("include_usage", [False, True])
async def test_chat_stream(
    spawn: SpawnFn, session: aiohttp.ClientSession, include_usage: bool
) -> None:
    fake = await ready_fake(spawn, session)
    req = {**CHAT, "stream": True, "max_tokens": 4}
    if include_usage:
        req["stream_options"] = {"include_usage": True}
    async with session.post(f"{fake.url}/v1/chat/completions", json=req) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = await read_sse(resp)
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"] == [
        {"index": 0, "delta": {"role": "assistant", "content": None}, "finish_reason": None}
    ]
    tokens = [c["choices"][0]["delta"]["content"] for c in chunks[1:5]]
    assert tokens == ["tok0 ", "tok1 ", "tok2 ", "tok3 "]
    assert chunks[5]["choices"] == [{"index": 0, "delta": {}, "finish_reason": "length"}]
    if include_usage:
        assert len(chunks) == 7
        assert chunks[6]["choices"] == []
        assert chunks[6]["usage"] == {
            "prompt_tokens": 3,
            "completion_tokens": 4,
            "total_tokens": 7,
        }
    else:
        assert len(chunks) == 6
        assert all("usage" not in c for c in chunks)


@pytest.mark.integration
async def test_content_types_as_vllm_sends_them(
    spawn: SpawnFn, session: aiohttp.ClientSession
) -> None:
    fake = await ready_fake(
        spawn, session, "--content-type-params", "; charset=utf-8", "--no-stream-cache-control"
    )
    url = f"{fake.url}/v1/chat/completions"
    async with session.post(url, json={**CHAT, "stream": True, "max_tokens": 2}) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        assert "Cache-Control" not in resp.headers
        assert (await read_sse(resp))[-1] == "[DONE]"
    async with session.post(url, json={**CHAT, "max_tokens": 2}) as resp:
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
        assert (await resp.json())["usage"]["completion_tokens"] == 2
    async with session.post(url, json={**CHAT, "max_tokens": "x"}) as resp:
        assert resp.status == 400
        assert resp.headers["Content-Type"] == "application/json; charset=utf-8"
    # The default: the bare types, and Cache-Control on a stream.
    plain = await ready_fake(spawn, session)
    url = f"{plain.url}/v1/chat/completions"
    async with session.post(url, json={**CHAT, "stream": True, "max_tokens": 2}) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        assert resp.headers["Cache-Control"] == "no-cache"
        await resp.read()


@pytest.mark.integration
async def test_completion_stream_and_embeddings(
    spawn: SpawnFn, session: aiohttp.ClientSession
) -> None:
    fake = await ready_fake(spawn, session, "--tokens", "2")
    req = {"prompt": "x", "stream": True}
    async with session.post(f"{fake.url}/v1/completions", json=req) as resp:
        events = await read_sse(resp)
    assert [e["choices"][0]["text"] for e in events[:2]] == ["tok0 ", "tok1 "]
    assert events[2]["choices"][0]["finish_reason"] == "length"
    assert events[-1] == "[DONE]"

    req2 = {"input": ["alpha", "beta gamma"]}
    async with session.post(f"{fake.url}/v1/embeddings", json=req2) as resp:
        first = await resp.json()
    async with session.post(f"{fake.url}/v1/embeddings", json={"input": "alpha"}) as resp:
        single = await resp.json()
    assert first["object"] == "list"
    assert [d["index"] for d in first["data"]] == [0, 1]
    assert all(len(d["embedding"]) == 8 for d in first["data"])
    assert first["data"][0]["embedding"] != first["data"][1]["embedding"]
    assert single["data"][0]["embedding"] == first["data"][0]["embedding"]
    assert first["usage"]["prompt_tokens"] == 3


@pytest.mark.integration
async def test_strict_model(spawn: SpawnFn, session: aiohttp.ClientSession) -> None:
    fake = await ready_fake(spawn, session, "--strict-model", "--model", "served")
    bad = {**CHAT, "model": "other"}
    async with session.post(f"{fake.url}/v1/chat/completions", json=bad) as resp:
        assert resp.status == 404
        body = await resp.json()
    assert body == {
        "error": {
            "message": "The model `other` does not exist.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }
    good = {**CHAT, "model": "served"}
    async with session.post(f"{fake.url}/v1/chat/completions", json=good) as resp:
        assert resp.status == 200
        assert (await resp.json())["model"] == "served"


@pytest.mark.integration
async def test_catch_all_echoes_exact_bytes(spawn: SpawnFn, session: aiohttp.ClientSession) -> None:
    fake = await ready_fake(spawn, session)
    payload = bytes(range(256)) * 3 + b"\r\n\x00tail"
    headers = {"X-Custom": "Value-1", "Content-Type": "application/octet-stream"}
    url = f"{fake.url}/v1/rerank?a=1&b=%20x"
    async with session.post(url, data=payload, headers=headers) as resp:
        assert resp.status == 200
        assert resp.headers["X-Fake-Pid"] == str(fake.proc.pid)
        echo = await resp.json()
    assert echo["echo"] is True
    assert echo["method"] == "POST"
    assert echo["path"] == "/v1/rerank"
    assert echo["query"] == "a=1&b=%20x"
    assert echo["headers"]["x-custom"] == "Value-1"
    assert base64.b64decode(echo["body_b64"]) == payload
    assert echo["body_sha256"] == hashlib.sha256(payload).hexdigest()

    async with session.delete(f"{fake.url}/echo/anything") as resp:
        echo = await resp.json()
    assert (echo["method"], echo["path"], echo["body_b64"]) == ("DELETE", "/echo/anything", "")


@pytest.mark.integration
async def test_client_disconnect_is_counted(spawn: SpawnFn, session: aiohttp.ClientSession) -> None:
    fake = await ready_fake(spawn, session, "--tps", "50", "--tokens", "500")
    req = {**CHAT, "stream": True}
    async with session.post(f"{fake.url}/v1/chat/completions", json=req) as resp:
        await resp.content.readline()
        resp.close()  # drop the connection mid-stream
    deadline = time.monotonic() + DEADLINE
    while True:
        async with session.get(f"{fake.url}/stats") as resp:
            stats = await resp.json()
        if stats["disconnected"] == 1:
            break
        assert time.monotonic() < deadline, stats
        await asyncio.sleep(0.02)
    assert stats["in_flight"] == 0
    assert stats["completed"] == 0


@pytest.mark.integration
async def test_hang_never_answers_but_health_works(
    spawn: SpawnFn, session: aiohttp.ClientSession
) -> None:
    fake = await ready_fake(spawn, session, "--hang")
    with pytest.raises(asyncio.TimeoutError):
        async with session.post(
            f"{fake.url}/v1/chat/completions",
            json=CHAT,
            timeout=aiohttp.ClientTimeout(total=0.3),
        ):
            pass
    async with session.get(f"{fake.url}/health") as resp:
        assert resp.status == 200


@pytest.mark.integration
async def test_crash_after_mid_stream(spawn: SpawnFn, session: aiohttp.ClientSession) -> None:
    fake = await ready_fake(spawn, session, "--crash-after", "1", "--tokens", "8")
    req = {**CHAT, "stream": True}
    lines: list[bytes] = []
    with pytest.raises(aiohttp.ClientError):
        await collect_lines(session, f"{fake.url}/v1/chat/completions", req, lines)
    assert len(lines) == 1 + 4  # role chunk plus half of the 8 token chunks
    assert await fake.wait_exit() == 3
    assert "FATAL: simulated crash" in fake.stderr()


@pytest.mark.integration
async def test_crash_after_non_stream(spawn: SpawnFn, session: aiohttp.ClientSession) -> None:
    fake = await ready_fake(spawn, session, "--crash-after", "2")
    async with session.post(f"{fake.url}/v1/embeddings", json={"input": "x"}) as resp:
        assert resp.status == 200
    with pytest.raises(aiohttp.ClientError):
        async with session.post(f"{fake.url}/v1/chat/completions", json=CHAT) as resp:
            await resp.read()
    assert await fake.wait_exit() == 3


@pytest.mark.integration
async def test_sigterm_exits_promptly(spawn: SpawnFn, session: aiohttp.ClientSession) -> None:
    fake = await ready_fake(spawn, session)
    fake.proc.send_signal(signal.SIGTERM)
    assert await fake.wait_exit() == 0  # it exits on its own, cleanly (how fast is not asked)


@pytest.mark.integration
async def test_ignore_sigterm(spawn: SpawnFn, session: aiohttp.ClientSession) -> None:
    fake = await ready_fake(spawn, session, "--ignore-sigterm")
    fake.proc.send_signal(signal.SIGTERM)
    await asyncio.sleep(0.5)  # a negative check: it is still there after a while
    assert fake.proc.poll() is None
    async with session.get(f"{fake.url}/health") as resp:
        assert resp.status == 200
    fake.proc.send_signal(signal.SIGKILL)
    assert await fake.wait_exit() == -signal.SIGKILL


@pytest.mark.integration
async def test_fork_grandchild_escapes_session(
    spawn: SpawnFn, session: aiohttp.ClientSession, tmp_path: Path
) -> None:
    pidfile = tmp_path / "grandchild.pid"
    fake = await ready_fake(spawn, session, "--fork-grandchild", str(pidfile))
    gpid = int(pidfile.read_text().strip())
    try:
        os.kill(gpid, 0)  # alive
        assert os.getsid(gpid) != os.getsid(fake.proc.pid)
        assert os.getpgid(gpid) != os.getpgid(fake.proc.pid)
        assert f"grandchild pid {gpid}" in fake.stdout()
        assert socket_fds(gpid) == []
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(gpid, signal.SIGKILL)


@pytest.mark.integration
@pytest.mark.parametrize(
    ("flavor", "line"),
    [
        ("llamacpp", "llama_model_load: error loading model: simulated failure"),
        ("vllm", "ValueError: simulated failure"),
    ],
)
async def test_fail_start_exits_1(spawn: SpawnFn, flavor: str, line: str) -> None:
    fake = spawn("--flavor", flavor, "--fail-start", "--load-delay", "0.2")
    assert await fake.wait_exit() == 1
    assert line in fake.stderr()


@pytest.mark.integration
async def test_exit_after_ready(spawn: SpawnFn, session: aiohttp.ClientSession) -> None:
    fake = await ready_fake(spawn, session, "--exit-after-ready", "0.2")
    assert await fake.wait_exit() == 2
