"""A minimal, fast fake OpenAI-compatible server for the benchmark suite (stdlib only).

    python bench/fake_backend.py --port 8081 [--load-delay 0.3]

Raw ``asyncio`` protocol with its own small HTTP/1.1 parser, so the backend is not the
bottleneck. It speaks just enough for the bench:

* ``GET /health`` → 200; ``GET /v1/models`` → one model.
* ``POST /v1/chat/completions``. What to answer is read from the last message's text, which
  every gateway forwards as it is: ``n=<chunks>`` (default 4) and ``rate=<chunks per second>``
  (default 0: as fast as possible). The answer's text is ``len=<chars of that message>``
  followed by `` w0 w1 … w<n-1>``, so a client can check that its whole body arrived and every
  chunk came back in order. Streamed (``"stream": true``): one role chunk, one chunk per word
  (every chunk's text differs: LiteLLM aborts a stream after 100 identical chunks), a finish
  chunk, a usage chunk when ``stream_options.include_usage`` is set, then ``data: [DONE]``;
  each event is written (and sent) on its own, as a real token-by-token server does.

``--load-delay`` seconds pass before the port is bound (connections are refused while
"loading", as vLLM's are); then ``server is listening on …`` is printed, as llama.cpp does.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import signal
import sys

_N = re.compile(r"\bn=(\d+)")
_RATE = re.compile(r"\brate=(\d+(?:\.\d+)?)")
MAX_CHUNKS = 1_000_000
MAX_HEAD = 64 * 1024
MAX_BODY = 256 * 1024 * 1024
HIGH_WATER = 256 * 1024

_CHUNK_HEAD = (
    b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
    b'"model":"%s","choices":[{"index":0,"delta":'
)


def answer_text(message: str, n: int) -> str:
    return f"len={len(message)}" + "".join(f" w{i}" for i in range(n))


def directives(body: bytes) -> tuple[dict[str, object], str, int, float]:
    """(request JSON, last message text, chunk count, rate per second)."""
    data = json.loads(body)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    text = ""
    messages = data.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[-1], dict):
        content = messages[-1].get("content")
        text = content if isinstance(content, str) else json.dumps(content)
    head = text[:200]
    n_match, rate_match = _N.search(head), _RATE.search(head)
    n = min(int(n_match.group(1)), MAX_CHUNKS) if n_match else 4
    rate = float(rate_match.group(1)) if rate_match else 0.0
    return data, text, n, rate


def _http_chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _response(status: str, body: bytes, content_type: bytes = b"application/json") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status.encode(),
        content_type,
        len(body),
        body,
    )


class Server(asyncio.Protocol):
    """One connection. Requests are handled in order; a streamed answer runs as a task."""

    def __init__(self, model: bytes) -> None:
        self.model = model
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy: asyncio.Task[None] | None = None
        self.can_write = asyncio.Event()
        self.can_write.set()
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.set_write_buffer_limits(high=HIGH_WATER)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.can_write.set()
        if self.busy is not None:
            self.busy.cancel()

    def pause_writing(self) -> None:
        self.can_write.clear()

    def resume_writing(self) -> None:
        self.can_write.set()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.busy is None:
            self.process()

    def process(self) -> None:
        """Handle every complete request in the buffer (stops at a streamed answer)."""
        while self.busy is None and not self.closed:
            request = self.take_request()
            if request is None:
                return
            self.handle(*request)

    def take_request(self) -> tuple[bytes, bytes, bytes] | None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > MAX_HEAD:
                self.fail(b"431 Request Header Fields Too Large")
            return None
        head = bytes(self.buf[:end]).decode("latin-1")
        lines = head.split("\r\n")
        method, path = [*lines[0].split(" "), "", ""][:2]
        length, chunked = 0, False
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value)
            elif name == "transfer-encoding" and "chunked" in value.lower():
                chunked = True
        start = end + 4
        if chunked:
            body = self.dechunk(start)
            if body is None:
                return None
            return method.encode(), path.encode(), body
        if length > MAX_BODY:
            self.fail(b"413 Payload Too Large")
            return None
        if len(self.buf) - start < length:
            return None
        body = bytes(self.buf[start : start + length])
        del self.buf[: start + length]
        return method.encode(), path.encode(), body

    def dechunk(self, pos: int) -> bytes | None:
        parts: list[bytes] = []
        while True:
            eol = self.buf.find(b"\r\n", pos)
            if eol < 0:
                return None
            size = int(bytes(self.buf[pos:eol]).split(b";")[0], 16)
            if size == 0:
                end = self.buf.find(b"\r\n\r\n", eol)  # after any trailers
                if end < 0:
                    return None
                del self.buf[: end + 4]
                return b"".join(parts)
            if len(self.buf) < eol + 2 + size + 2:
                return None
            parts.append(bytes(self.buf[eol + 2 : eol + 2 + size]))
            pos = eol + 2 + size + 2

    def fail(self, status: bytes) -> None:
        assert self.transport is not None
        self.transport.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 0\r\n\r\n")
        self.transport.close()
        self.closed = True

    def handle(self, method: bytes, path: bytes, body: bytes) -> None:
        assert self.transport is not None
        path = path.split(b"?", 1)[0]
        if method == b"GET" and path == b"/health":
            self.transport.write(_response("200 OK", b'{"status":"ok"}'))
        elif method == b"GET" and path in (b"/v1/models", b"/models"):
            listing = {"object": "list", "data": [{"id": self.model.decode(), "object": "model"}]}
            self.transport.write(_response("200 OK", json.dumps(listing).encode()))
        elif method == b"POST" and path == b"/v1/chat/completions":
            try:
                data, text, n, rate = directives(body)
            except (ValueError, UnicodeDecodeError):
                err = b'{"error":{"message":"bad JSON","type":"invalid_request_error"}}'
                self.transport.write(_response("400 Bad Request", err))
                return
            if data.get("stream") is True:
                options = data.get("stream_options")
                usage = isinstance(options, dict) and options.get("include_usage") is True
                self.busy = asyncio.get_running_loop().create_task(
                    self.stream(len(text), n, rate, usage)
                )
                self.busy.add_done_callback(self.stream_done)
            else:
                self.transport.write(_response("200 OK", self.completion(text, n)))
        else:
            self.transport.write(_response("404 Not Found", b'{"error":"no route"}'))

    def completion(self, text: str, n: int) -> bytes:
        answer = {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": self.model.decode(),
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer_text(text, n)},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": len(text),
                "completion_tokens": n,
                "total_tokens": len(text) + n,
            },
        }
        return json.dumps(answer, separators=(",", ":")).encode()

    def stream_done(self, task: asyncio.Task[None]) -> None:
        self.busy = None
        if not task.cancelled() and task.exception() is not None and self.transport is not None:
            self.transport.close()
        if not self.closed:
            self.process()

    async def send(self, event: bytes) -> None:
        assert self.transport is not None
        if not self.can_write.is_set():
            await self.can_write.wait()
        if self.closed:
            raise ConnectionResetError("client went away")
        self.transport.write(_http_chunk(b"data: " + event + b"\n\n"))

    async def stream(self, chars: int, n: int, rate: float, usage: bool) -> None:
        assert self.transport is not None
        self.transport.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        head = _CHUNK_HEAD % self.model
        loop = asyncio.get_running_loop()
        await self.send(head + b'{"role":"assistant","content":""},"finish_reason":null}]}')
        started = loop.time()
        for i in range(n):
            if rate > 0:
                delay = started + i / rate - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            elif i:
                await asyncio.sleep(0)  # one token per loop turn, as a generating server
            await self.send(head + b'{"content":" w%d"},"finish_reason":null}]}' % i)
        await self.send(head + b'{},"finish_reason":"stop"}]}')
        if usage:
            await self.send(
                b'{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,'
                b'"model":"%s","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,'
                b'"total_tokens":%d}}' % (self.model, chars, n, chars + n)
            )
        await self.send(b"[DONE]")
        self.transport.write(b"0\r\n\r\n")


async def serve(host: str, port: int, model: str, load_delay: float) -> None:
    if load_delay > 0:
        print(f"loading model ({load_delay:g} s)", flush=True)
        await asyncio.sleep(load_delay)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: Server(model.encode()), host, port, backlog=1024, reuse_address=True
    )
    print(f"server is listening on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="fake")
    parser.add_argument("--load-delay", type=float, default=0.0)
    args = parser.parse_args()
    try:
        asyncio.run(serve(args.host, args.port, args.model, args.load_delay))
    except OSError as exc:
        print(f"fake backend: {exc}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
