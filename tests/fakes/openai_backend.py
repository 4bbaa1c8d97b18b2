"""A fake local inference server (llama.cpp's llama-server or vLLM) for modelswap's tests.

This is a real program, started as a subprocess by the tests:

    python tests/fakes/openai_backend.py --port 8081 --flavor llamacpp --load-delay 0.5

It speaks enough of the OpenAI-compatible HTTP API (chat completions, completions, embeddings,
model listing, health) to stand in for a real backend, and it can misbehave on request: load
slowly, fail to start, crash in the middle of a stream, hang, ignore SIGTERM, fork a grandchild
that escapes the process group, or exit on its own while idle. ``GET /stats`` reports what it saw,
and every other method and path echoes the request back so tests can check byte-exact forwarding.

For the reliability suite: ``--echo-id`` answers with the client's ``X-Request-Id`` (as the
completion's ``id``, ``chatcmpl-<id>``, and as a response header), ``--stall-after N`` stops a
stream after N tokens without ending it (until the file ``--stall-until FILE`` names exists, if
given: a test holds a stream in flight for as long as it needs, then lets it finish),
``--count-connections`` serves ``GET /connections`` (the TCP connections open to this server, not
counting the one asking), ``--barrier N`` holds every inference request until N have arrived
(then they all go on, and every later one at once: a test knows N were in flight together), and
``--blackhole-after-ready`` stops accepting connections once ready
(its listen queue stays full, so a new connection hangs in ``connect()``).

For weight prefetch: ``--weights FILE`` is read whole while loading (as a real server reads
its model, so a cold page cache shows in its start), and ``--stop-delay S`` waits S seconds
after SIGTERM before exiting (a server that takes its time to stop).

For capabilities (issue 30), llama.cpp's ``/props`` says what ``--modalities vision,audio`` and
``--template-tools`` (its chat template carries tools) name; without them it has neither key.

For the prompt cache kept across a swap (issue 30), ``--slot-save-path DIR`` (or
``LLAMA_ARG_SLOT_SAVE_PATH``, as llama-server) serves llama.cpp's slots API over words as
tokens: ``GET /slots``, ``POST /slots/{id}?action=save|restore|erase``, files of
``--slot-bytes-per-token`` bytes a token written ``--slot-save-seconds`` late; a chat or
completion reports the words its slot already held as ``cached_tokens``.
As real backends do, ``--content-type-params '; charset=utf-8'`` sends
``text/event-stream; charset=utf-8`` and ``application/json; charset=utf-8`` (vLLM's and SGLang's
streams; the default is the bare type), and ``--no-stream-cache-control`` sends a stream without
``Cache-Control`` (as vLLM and SGLang), so a gateway's own streaming headers are its own.
As llama.cpp, a
request's ``cache_salt`` reuses only a slot filled with the same salt, and a restore leaves the
slot unsalted. For the restore's proof (issue 38): ``--slot-restore-noop`` answers a restore
as done and keeps the slot empty (ggml-org/llama.cpp#26676); ``--no-slots`` answers ``/slots``
404, as a server without the API; ``--slot-save-until FILE`` holds a save until FILE exists (a
test sees what else runs while it saves). ``--llamacpp-errors`` answers as a ``llama-server``
started without ``--embeddings``: embeddings 501 ``not_supported_error``, a POST to a path it
does not serve 404 ``File Not Found`` (its own words and shape).
Only the standard library and aiohttp are used; the modelswap package is never imported.
"""

# ruff: noqa: E402 - RAN_AT is taken before the other imports, on purpose

from __future__ import annotations

import os
import time

# When this process began running Python code: before the imports — or, run by a launcher that
# stamps first (bench/silent_start.py), before this file was even compiled (~20 ms).
RAN_AT = float(os.environ.pop("FAKE_RAN_AT", "0")) or time.monotonic()

import argparse
import asyncio
import base64
import contextlib
import dataclasses
import hashlib
import io
import json
import signal
import socket
import struct
import subprocess
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, NoReturn

from aiohttp import web

INFERENCE_PATHS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/v1/embeddings": "embedding",
}
MODELS_PATHS = ("/v1/models", "/models")
MAX_TOKENS_CAP = 10000
LOG_INTERVAL = 0.1
EMBEDDING_DIM = 8

# The grandchild leaves our session, says so on its stdout, and then sleeps.
GRANDCHILD_CODE = """
import os, sys, time
os.setsid()
sys.stdout.write("ok\\n")
sys.stdout.flush()
time.sleep(600)
"""


@dataclasses.dataclass
class Config:
    host: str
    port: int
    model: str
    strict_model: bool
    flavor: str
    owned_by: str | None
    load_delay: float
    ctx: int
    tps: float
    tokens: int
    ignore_sigterm: bool
    crash_after: int | None
    fail_start: bool
    fork_grandchild: str | None
    hang: bool
    exit_after_ready: float | None
    print_log: str | None = None
    late_log: str | None = None
    quiet_loading: bool = False
    silent_bind: bool = False
    silent_after: float | None = None
    progress_interval: float = 0.1
    metadata_delay: float = 0.0
    metadata_forever: bool = False
    models_body_file: str | None = None
    modalities: tuple[str, ...] = ()
    template_tools: bool = False
    sleep_mode: bool = False
    echo_id: bool = False
    stall_after: int | None = None
    stall_until: str | None = None
    count_connections: bool = False
    blackhole_after_ready: bool = False
    weights: str | None = None
    stop_delay: float = 0.0
    cached_tokens: int | None = None
    timestamps: str | None = None
    barrier: int = 0
    slot_save_path: str | None = None
    slot_file_mode: int | None = None
    slots: int = 1
    slot_bytes_per_token: int = 100
    slot_save_seconds: float = 0.0
    content_type_params: str = ""
    stream_cache_control: bool = True
    slot_restore_noop: bool = False
    slot_save_until: str | None = None
    no_slots: bool = False
    llamacpp_errors: bool = False


@dataclasses.dataclass
class Stats:
    requests: int = 0
    in_flight: int = 0
    completed: int = 0
    disconnected: int = 0
    sleeps: int = 0
    wakes: int = 0


class BadRequest(Exception):
    """The body of an inference request cannot be used."""


SLOT_MAGIC = b"FAKESLOT1\n"


@dataclasses.dataclass
class FakeSlot:
    words: list[str] = dataclasses.field(default_factory=list)
    task: int | None = None  # as llama.cpp: None until a task used it (a restore is no task)
    used: int = 0
    salt: str | None = None  # the cache_salt of the request that filled it


class FakeSlots:
    """llama.cpp's slots API (``--slot-save-path``) over words as tokens. A prompt goes to the
    slot holding its longest prefix (else the least recently used), which then holds the
    prompt and the answer; a saved file is ``SLOT_MAGIC``, a JSON line of the words, padded to
    ``--slot-bytes-per-token`` bytes a word. A file that does not read back whole is refused as
    llama.cpp refuses it."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.slots = [FakeSlot() for _ in range(max(1, cfg.slots))]
        self.tasks = 0

    def use(self, words: list[str], answer: list[str], salt: str | None = None) -> int:
        """Serve ``words``: the cached tokens (the prefix its slot already held, filled with
        the same ``salt``)."""

        def shared(slot: FakeSlot) -> int:
            if slot.salt != salt:
                return 0
            n = 0
            for a, b in zip(slot.words, words, strict=False):
                if a != b:
                    break
                n += 1
            return n

        best = max(self.slots, key=lambda slot: (shared(slot), -slot.used))
        cached = shared(best)
        if cached == 0:
            best = min(self.slots, key=lambda slot: slot.used)
        self.tasks += 1
        best.words, best.task, best.used = [*words, *answer], self.tasks, self.tasks
        best.salt = salt
        return min(cached, max(0, len(words) - 1))  # llama.cpp evaluates at least one token

    def listing(self) -> list[dict[str, Any]]:
        rows = []
        for index, slot in enumerate(self.slots):
            row: dict[str, Any] = {
                "id": index,
                "n_ctx": self.cfg.ctx,
                "speculative": False,
                "is_processing": False,
            }
            if slot.task is not None:
                row |= {"id_task": slot.task, "n_prompt_tokens": len(slot.words)}
            rows.append(row)
        return rows

    async def action(self, request: web.Request) -> web.Response:
        if not self.cfg.slot_save_path:
            return json_response(
                {
                    "error": {
                        "code": 501,
                        "message": "This server does not support slots action. Start it with "
                        "`--slot-save-path`",
                        "type": "not_supported_error",
                    }
                },
                501,
            )
        try:
            index = int(request.match_info.get("tail", "").rpartition("/")[2])
            slot = self.slots[index]
        except (ValueError, IndexError):
            return error_400("Invalid slot id")
        action = request.query.get("action")
        if action == "erase":
            n, slot.words, slot.task = len(slot.words), [], None
            return json_response({"id_slot": index, "n_erased": n})
        body = await request.json()
        name = body.get("filename") if isinstance(body, dict) else None
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            return error_400("Invalid filename")
        path = Path(self.cfg.slot_save_path) / name
        began = time.monotonic()
        if action == "save":
            header = SLOT_MAGIC + json.dumps(slot.words).encode() + b"\n"
            header += self.cfg.model.encode() + b"\n"  # another --model: other bytes
            size = max(len(header), len(slot.words) * self.cfg.slot_bytes_per_token)
            with path.open("wb") as fh:
                fh.write(header)
                fh.flush()
                if self.cfg.slot_save_seconds:  # a large slot: written slowly
                    await asyncio.sleep(self.cfg.slot_save_seconds)
                until = self.cfg.slot_save_until
                while until and not os.path.exists(until):  # noqa: ASYNC110, ASYNC240
                    await asyncio.sleep(0.02)
                fh.write(b"\0" * (size - len(header)))
            if self.cfg.slot_file_mode is not None:
                os.chmod(path, self.cfg.slot_file_mode)
            ms = (time.monotonic() - began) * 1000
            return json_response(
                {
                    "id_slot": index,
                    "filename": name,
                    "n_saved": len(slot.words),
                    "n_written": size,
                    "timings": {"save_ms": ms},
                }
            )
        if action == "restore":
            try:
                data = path.read_bytes()
                if not data.startswith(SLOT_MAGIC):
                    raise ValueError("no magic")
                line, _, _ = data[len(SLOT_MAGIC) :].partition(b"\n")
                words = json.loads(line)
                if not isinstance(words, list) or len(data) < len(words) * (
                    self.cfg.slot_bytes_per_token
                ):
                    raise ValueError("short")
            except (OSError, ValueError):
                return error_400(
                    "Unable to restore slot, no available space in KV cache or invalid slot save "
                    "file"
                )
            kept = [] if self.cfg.slot_restore_noop else [str(w) for w in words]
            slot.words, slot.task, slot.salt = kept, None, None
            ms = (time.monotonic() - began) * 1000
            return json_response(
                {
                    "id_slot": index,
                    "filename": name,
                    "n_restored": len(words),
                    "n_read": len(data),
                    "timings": {"restore_ms": ms},
                }
            )
        return error_400("Invalid action")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def out(msg: str) -> None:
    print(msg, flush=True)


def vllm_ts() -> str:
    return time.strftime("%m-%d %H:%M:%S")


def hard_exit(code: int, msg: str | None = None) -> NoReturn:
    if msg is not None:
        log(msg)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def count_words(value: Any) -> int:
    """Whitespace-separated words in a prompt-like value (strings, lists, content parts)."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, int) and not isinstance(value, bool):
        return 1  # a token id
    if isinstance(value, list):
        return sum(count_words(item) for item in value)
    if isinstance(value, dict):
        text = value.get("text")
        return count_words(text) if isinstance(text, str) else 0
    return 0


def embedding_for(text: str) -> list[float]:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    values = struct.unpack(f">{EMBEDDING_DIM}H", digest[: 2 * EMBEDDING_DIM])
    return [round(v / 65535.0 * 2.0 - 1.0, 6) for v in values]


# What follows the media type in every Content-Type sent (``--content-type-params``): vLLM and
# SGLang (FastAPI) say ``text/event-stream; charset=utf-8`` and ``application/json``, llama.cpp
# ``application/json; charset=utf-8``; the fake's default is the bare type.
CONTENT_TYPE_PARAMS = ""


def content_type(media_type: str) -> str:
    return media_type + CONTENT_TYPE_PARAMS


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(data).encode("utf-8"),
        headers={"Content-Type": content_type("application/json")},
    )


def error_400(message: str) -> web.Response:
    return json_response(
        {"error": {"message": message, "type": "invalid_request_error", "code": 400}}, 400
    )


class FakeBackend:
    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.stats = Stats()
        self.ready = False
        self.sleeping = False
        self.created = int(time.time())
        self.pid = os.getpid()
        self.runner: web.AppRunner | None = None  # set once serving (--count-connections)
        self.stats_health_ok = False  # a /health answered 200 (--blackhole-after-ready)
        self.cached: int | None = None  # the last request's cached tokens (slots)
        self.blackhole_sockets: list[socket.socket] = []
        self.barrier = asyncio.Event()  # --barrier: set once that many requests have arrived
        self.slots = FakeSlots(cfg) if cfg.slot_save_path is not None else None

    # ----------------------------------------------------------------- app
    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.on_response_prepare.append(self._add_pid_header)
        app.router.add_route("*", "/{tail:.*}", self.dispatch)
        return app

    async def _add_pid_header(self, request: web.Request, response: web.StreamResponse) -> None:
        response.headers["X-Fake-Pid"] = str(self.pid)
        if self.cfg.echo_id and "X-Request-Id" in request.headers:
            response.headers["X-Request-Id"] = request.headers["X-Request-Id"]

    def completion_id(self, request: web.Request, default: str) -> str:
        """The response's ``id``: ``<default>-<X-Request-Id>`` with --echo-id, else as ever."""
        rid = request.headers.get("X-Request-Id")
        return f"{default}-{rid}" if self.cfg.echo_id and rid else default

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        method, path = request.method, request.path
        if method == "GET" and path == "/stats":
            return json_response({**dataclasses.asdict(self.stats), "pid": self.pid})
        if self.cfg.count_connections and method == "GET" and path == "/connections":
            server = self.runner.server if self.runner is not None else None
            open_now = len(server.connections) if server is not None else 0
            return json_response({"open": max(0, open_now - 1), "pid": self.pid})
        if method == "GET" and path in (*MODELS_PATHS, "/props", "/api/ps"):
            if self.cfg.late_log and self.ready:
                # The gateway asks for metadata only once it has called us ready.
                late, self.cfg.late_log = self.cfg.late_log, None
                for line in Path(late).read_text(errors="replace").splitlines():  # noqa: ASYNC240
                    log(line)
            special = await self.metadata_special(request)
            if special is not None:
                return special
        if method == "GET" and path in MODELS_PATHS:
            return json_response(self.models_body())
        if not self.ready:
            # Only reachable for the llamacpp flavor: vllm binds the port once loaded.
            return json_response(
                {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}},
                503,
            )
        if self.cfg.sleep_mode and path in ("/sleep", "/wake_up", "/is_sleeping"):
            return self.sleep_endpoint(method, path)
        if self.sleeping and INFERENCE_PATHS.get(path) is not None:
            return json_response(
                {"error": {"code": 503, "message": "model is sleeping", "type": "unavailable"}},
                503,
            )
        if method == "GET" and path == "/health":
            self.stats_health_ok = True
            if self.cfg.flavor == "vllm":
                return web.Response(status=200)
            return json_response({"status": "ok"})
        if self.cfg.no_slots and (path == "/slots" or path.startswith("/slots/")):
            return json_response({"error": {"code": 404, "message": "File Not Found"}}, 404)
        if self.slots is not None and path == "/slots" and method == "GET":
            return json_response(self.slots.listing())
        if self.slots is not None and path.startswith("/slots/") and method == "POST":
            return await self.slots.action(request)
        if method == "GET" and path == "/props":
            if self.cfg.flavor == "vllm":
                return json_response({"detail": "Not Found"}, 404)
            return json_response(self.props_body())
        kind = INFERENCE_PATHS.get(path)
        if self.cfg.llamacpp_errors and method == "POST":
            if kind == "embedding":  # llama-server's own answer, word for word
                message = "This server does not support embeddings. Start it with `--embeddings`"
                error = {"code": 501, "message": message, "type": "not_supported_error"}
                return json_response({"error": error}, 501)
            if kind is None:
                error = {"message": "File Not Found", "type": "not_found_error", "code": 404}
                return json_response({"error": error}, 404)
        if method == "POST" and kind is not None:
            return await self.inference(request, kind)
        return await self.echo(request)

    def sleep_endpoint(self, method: str, path: str) -> web.Response:
        """vLLM's sleep mode (with --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1)."""
        if method == "GET" and path == "/is_sleeping":
            return json_response({"is_sleeping": self.sleeping})
        if method != "POST" or path == "/is_sleeping":
            return json_response({"detail": "Method Not Allowed"}, 405)
        if path == "/sleep":
            self.sleeping = True
            self.stats.sleeps += 1
            log("INFO fake: sleep mode level 1: weights offloaded, KV cache discarded")
        else:
            self.sleeping = False
            self.stats.wakes += 1
            log("INFO fake: woke up")
        return web.Response(status=200)

    async def metadata_special(self, request: web.Request) -> web.StreamResponse | None:
        """--metadata-delay, --metadata-forever and --models-body, for probe tests."""
        if self.cfg.metadata_delay > 0:
            await asyncio.sleep(self.cfg.metadata_delay)
        if self.cfg.metadata_forever:
            response = web.StreamResponse(
                headers={"Content-Type": content_type("application/json")}
            )
            await response.prepare(request)
            await response.write(b'{"object":"list","data":[')
            for _ in range(1_000_000):  # bounded: ~1 GB at most, the reader gives up far sooner
                await response.write(b'{"id":"x","object":"model"},' * 64)
            return response
        if self.cfg.models_body_file and request.path in MODELS_PATHS:
            body = Path(self.cfg.models_body_file).read_bytes()  # tiny test file  # noqa: ASYNC240
            return web.Response(
                body=body, headers={"Content-Type": content_type("application/json")}
            )
        return None

    def models_body(self) -> dict[str, Any]:
        entry: dict[str, Any]
        if self.cfg.flavor == "vllm":
            entry = {
                "id": self.cfg.model,
                "object": "model",
                "created": self.created,
                "owned_by": self.cfg.owned_by or "vllm",
                "root": "/fake/model",
                "parent": None,
                "max_model_len": self.cfg.ctx,
            }
        else:
            entry = {
                "id": self.cfg.model,
                "object": "model",
                "created": self.created,
                "owned_by": "llamacpp",
                "meta": {"n_ctx": self.cfg.ctx, "n_ctx_train": 8192},
            }
        return {"object": "list", "data": [entry]}

    def props_body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "default_generation_settings": {"n_ctx": self.cfg.ctx, "model": self.cfg.model},
            "total_slots": 1,
            "model_path": "/fake/model.gguf",
            "build_info": "fake",
        }
        if self.cfg.modalities:  # as llama.cpp says them: every kind, true or false
            said = set(self.cfg.modalities)
            body["modalities"] = {kind: kind in said for kind in ("vision", "video", "audio")}
        if self.cfg.template_tools:
            body["chat_template"] = "{% if tools %}{{ tools | tojson }}{% endif %}"
            body["chat_template_caps"] = {"supports_tools": True, "supports_tool_calls": True}
        return body

    async def echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers: dict[str, str] = {}
        for name, value in request.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        return json_response(
            {
                "echo": True,
                "method": request.method,
                "path": request.path,
                "raw_path": request.raw_path,
                "query": request.rel_url.raw_query_string,
                "headers": headers,
                "body_b64": base64.b64encode(body).decode("ascii"),
                "body_sha256": hashlib.sha256(body).hexdigest(),
            }
        )

    # ----------------------------------------------------------- inference
    async def inference(self, request: web.Request, kind: str) -> web.StreamResponse:
        self.stats.requests += 1
        number = self.stats.requests
        if number == 1:
            stamp(self.cfg, "request")
        self.stats.in_flight += 1
        outcome = "completed"
        try:
            if self.cfg.barrier:
                if number >= self.cfg.barrier:
                    self.barrier.set()
                await self.barrier.wait()
            return await self._inference(request, kind, number)
        except (asyncio.CancelledError, ConnectionResetError):
            outcome = "disconnected"
            raise
        finally:
            self.stats.in_flight -= 1
            if outcome == "completed":
                self.stats.completed += 1
            else:
                self.stats.disconnected += 1

    async def _inference(self, request: web.Request, kind: str, number: int) -> web.StreamResponse:
        crash = self.cfg.crash_after is not None and number == self.cfg.crash_after
        raw = await request.read()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            body = None
            parse_error: str | None = f"Invalid JSON body: {exc}"
        else:
            parse_error = None if isinstance(body, dict) else "The JSON body must be an object"
        stream = isinstance(body, dict) and body.get("stream") is True and kind != "embedding"
        if crash and not stream:
            hard_exit(3, "FATAL: simulated crash")
        if parse_error is not None or not isinstance(body, dict):
            return error_400(parse_error or "The JSON body must be an object")

        requested = body.get("model")
        if self.cfg.strict_model and requested is not None and requested != self.cfg.model:
            return json_response(
                {
                    "error": {
                        "message": f"The model `{requested}` does not exist.",
                        "type": "NotFoundError",
                        "param": "model",
                        "code": 404,
                    }
                },
                404,
            )
        model = requested if isinstance(requested, str) and requested else self.cfg.model

        if self.cfg.hang:
            await asyncio.Event().wait()

        try:
            if kind == "embedding":
                return self.embeddings(body, model)
            n_tokens = self.completion_tokens(body)
            prompt_tokens = max(1, self.prompt_words(body, kind))
        except BadRequest as exc:
            return error_400(str(exc))
        self.cached = None
        if self.slots is not None:  # what its slot held: the prompt cache kept or lost
            words = self.word_list(body, kind)
            salt = body.get("cache_salt")
            self.cached = self.slots.use(
                words,
                [f"tok{i}" for i in range(n_tokens)],
                salt if isinstance(salt, str) and salt else None,
            )
        if stream:
            return await self.stream(request, body, kind, model, prompt_tokens, n_tokens, crash)
        if self.cfg.tps > 0 and n_tokens > 0:
            await asyncio.sleep(n_tokens / self.cfg.tps)
        text = "".join(f"tok{i} " for i in range(n_tokens))
        usage = self.with_cached(
            {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": n_tokens,
                "total_tokens": prompt_tokens + n_tokens,
            }
        )
        if kind == "chat":
            return json_response(
                {
                    "id": self.completion_id(request, "chatcmpl-fake"),
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "length",
                        }
                    ],
                    "usage": usage,
                }
            )
        return json_response(
            {
                "id": self.completion_id(request, "cmpl-fake"),
                "object": "text_completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
                ],
                "usage": usage,
            }
        )

    def with_cached(self, usage: dict[str, Any]) -> dict[str, Any]:
        """``--cached-tokens`` (or, with slots, what the prompt's slot held): OpenAI's
        ``prompt_tokens_details.cached_tokens``."""
        cached = self.cfg.cached_tokens if self.cfg.cached_tokens is not None else self.cached
        if cached is None:
            return usage
        return {**usage, "prompt_tokens_details": {"cached_tokens": cached}}

    def word_list(self, body: dict[str, Any], kind: str) -> list[str]:
        """The prompt as words (the fake's tokens): each message's role and words, in order."""
        if kind != "chat":
            prompt = body.get("prompt")
            return prompt.split() if isinstance(prompt, str) else [json.dumps(prompt)]
        words: list[str] = []
        for message in body.get("messages") or []:
            if isinstance(message, dict):
                content = message.get("content")
                text = content if isinstance(content, str) else json.dumps(content)
                words += [f"<{message.get('role')}>", *text.split()]
        return words

    def completion_tokens(self, body: dict[str, Any]) -> int:
        for key in ("max_completion_tokens", "max_tokens"):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise BadRequest(f"`{key}` must be a non-negative integer")
            return min(value, MAX_TOKENS_CAP)
        return self.cfg.tokens

    def prompt_words(self, body: dict[str, Any], kind: str) -> int:
        if kind == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list):
                raise BadRequest("`messages` must be a list")
            return sum(count_words(m.get("content")) for m in messages if isinstance(m, dict))
        return count_words(body.get("prompt"))

    def embeddings(self, body: dict[str, Any], model: str) -> web.Response:
        raw_input = body.get("input")
        if raw_input is None:
            return error_400("`input` is required")
        inputs: list[Any] = raw_input if isinstance(raw_input, list) else [raw_input]
        if inputs and all(isinstance(x, int) for x in inputs):
            inputs = [inputs]  # a single list of token ids
        data = []
        for index, item in enumerate(inputs):
            text = item if isinstance(item, str) else json.dumps(item)
            data.append({"object": "embedding", "index": index, "embedding": embedding_for(text)})
        prompt_tokens = max(1, count_words(inputs))
        return json_response(
            {
                "object": "list",
                "data": data,
                "model": model,
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
            }
        )

    async def stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        kind: str,
        model: str,
        prompt_tokens: int,
        n_tokens: int,
        crash: bool,
    ) -> web.StreamResponse:
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        chat = kind == "chat"
        created = int(time.time())
        base: dict[str, Any] = {
            "id": self.completion_id(request, "chatcmpl-fake" if chat else "cmpl-fake"),
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": model,
        }

        def choice(text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {}
                if role:
                    delta = {"role": "assistant", "content": None}
                elif text is not None:
                    delta = {"content": text}
                return {"index": 0, "delta": delta, "finish_reason": finish}
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}

        headers = {"Content-Type": content_type("text/event-stream")}
        if self.cfg.stream_cache_control:
            headers["Cache-Control"] = "no-cache"
        response = web.StreamResponse(status=200, headers=headers)
        await response.prepare(request)

        async def send(payload: dict[str, Any] | str) -> None:
            data = payload if isinstance(payload, str) else json.dumps(payload)
            await response.write(f"data: {data}\n\n".encode())

        if chat:
            await send({**base, "choices": [choice(None, None, role=True)]})
        crash_at = max(1, n_tokens // 2) if crash else -1
        if crash and n_tokens == 0:
            hard_exit(3, "FATAL: simulated crash")
        loop = asyncio.get_running_loop()
        start = loop.time()
        for i in range(n_tokens):
            if self.cfg.tps > 0:
                delay = start + (i + 1) / self.cfg.tps - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
            await send({**base, "choices": [choice(f"tok{i} ", None)]})
            if i + 1 == crash_at:
                hard_exit(3, "FATAL: simulated crash")
            if self.cfg.stall_after is not None and i + 1 == self.cfg.stall_after:
                log(f"fake: stalling the stream after {i + 1} tokens")
                until = self.cfg.stall_until
                if until is None:
                    await asyncio.Event().wait()
                else:
                    while not os.path.exists(until):  # noqa: ASYNC110, ASYNC240
                        await asyncio.sleep(0.02)
                    log(f"fake: {until} exists, the stream goes on")
        await send({**base, "choices": [choice(None, "length")]})
        if include_usage:
            usage = self.with_cached(
                {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": n_tokens,
                    "total_tokens": prompt_tokens + n_tokens,
                }
            )
            await send({**base, "choices": [], "usage": usage})
        await send("[DONE]")
        await response.write_eof()
        return response


# --------------------------------------------------------------------- lifecycle
def fork_grandchild(pidfile: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen(
        [sys.executable, "-c", GRANDCHILD_CODE],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    # Wait until it has called setsid(), so whoever reads PIDFILE sees it in its own session.
    assert child.stdout is not None
    child.stdout.readline()
    child.stdout.close()
    directory = os.path.dirname(os.path.abspath(pidfile))
    fd, tmp = tempfile.mkstemp(prefix=".pid-", dir=directory)
    with os.fdopen(fd, "w") as fh:
        fh.write(f"{child.pid}\n")
    os.replace(tmp, pidfile)
    out(f"grandchild pid {child.pid}")
    return child


async def reap(child: subprocess.Popen[bytes]) -> None:
    """Reap the grandchild if it dies first, so it does not linger as a zombie."""
    while True:
        await asyncio.sleep(0.2)
        if child.poll() is not None:
            return


async def loading_phase(cfg: Config) -> None:
    """Print loading progress every --progress-interval seconds for cfg.load_delay seconds
    (nothing with --quiet-loading; nothing more after --silent-after seconds); --print-log
    lines are spread over the same time."""
    if cfg.print_log:
        await print_log_file(cfg)
        return
    if cfg.quiet_loading:
        await asyncio.sleep(cfg.load_delay)
        return
    loop = asyncio.get_running_loop()
    start = loop.time()
    if cfg.flavor == "vllm":
        log(f"INFO {vllm_ts()} [api_server.py:1] vLLM API server version fake")
        log(f"INFO {vllm_ts()} [gpu_model_runner.py:2] Starting to load model {cfg.model}...")
    else:
        log("llama_model_loader: loaded meta data from /fake/model.gguf")
        log("main: loading model")
    step = 0
    while True:
        elapsed = loop.time() - start
        pct = 100 if cfg.load_delay <= 0 else min(100, int(elapsed / cfg.load_delay * 100))
        silent = cfg.silent_after is not None and elapsed >= cfg.silent_after
        if not silent:
            step += 1
            if cfg.flavor == "vllm":
                log(
                    f"Capturing CUDA graphs (decode, FULL): {pct:3d}%|#####     | "
                    f"{min(step, 51)}/51 [00:01<00:01, 20.00it/s]"
                )
            else:
                log(f"load_tensors: loading model tensors ... {pct}%")
        remaining = cfg.load_delay - (loop.time() - start)
        if remaining <= 0:
            break
        await asyncio.sleep(min(cfg.progress_interval, remaining))
    took = loop.time() - start
    if cfg.flavor == "vllm":
        log(f"INFO {vllm_ts()} [default_loader.py:4] Loading weights took {took:.2f} seconds")
    else:
        log(f"llama_context: n_ctx = {cfg.ctx}")


async def print_log_file(cfg: Config) -> None:
    """Print a saved startup log, its lines spread evenly over --load-delay."""
    assert cfg.print_log is not None
    lines = Path(cfg.print_log).read_text(errors="replace").splitlines()  # noqa: ASYNC240
    pause = cfg.load_delay / max(1, len(lines))
    for line in lines:
        log(line)
        if pause:
            await asyncio.sleep(pause)


def print_failure(cfg: Config) -> None:
    if cfg.flavor == "vllm":
        log(f"ERROR {vllm_ts()} [core.py:5] EngineCore failed to start.")
        log("Traceback (most recent call last):")
        log('  File "/fake/vllm/engine.py", line 1, in <module>')
        log("ValueError: simulated failure")
    else:
        log("llama_model_load: error loading model: simulated failure")
        log("llama_model_load_from_file_impl: failed to load model")
        log("main: exiting due to model loading error")


async def life(cfg: Config, backend: FakeBackend, start_site: Callable[[], Awaitable[None]]) -> int:
    """Load, become ready, and (optionally) exit on our own. Returns an exit code."""
    if cfg.flavor == "llamacpp":
        await start_site()
        log(f"main: HTTP port bound, hostname: {cfg.host}, port: {cfg.port}")
    await loading_phase(cfg)
    if cfg.weights:
        await asyncio.to_thread(read_weights, cfg.weights)
    if cfg.fail_start:
        print_failure(cfg)
        return 1
    if cfg.flavor == "vllm":
        await start_site()
        if not cfg.silent_bind:
            where = f"{cfg.host}:{cfg.port}"
            log(f"INFO {vllm_ts()} [api_server.py:6] Starting vLLM API server on {where}")
        backend.ready = True
        if not cfg.silent_bind:
            log(f"INFO {vllm_ts()} [launcher.py:7] Application startup complete.")
    else:
        backend.ready = True
        if not cfg.silent_bind:
            url = f"http://{cfg.host}:{cfg.port}"
            log(f"main: server is listening on {url} - starting the main loop")
    if not cfg.silent_bind:
        out(f"fake backend ready on http://{cfg.host}:{cfg.port}")
    if cfg.blackhole_after_ready:
        await blackhole(cfg, backend)
    if cfg.exit_after_ready is not None:
        await asyncio.sleep(cfg.exit_after_ready)
        hard_exit(2, "FATAL: simulated exit after ready")
    await asyncio.Event().wait()
    return 0  # pragma: no cover - never reached


def read_weights(path: str) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass
    out(f"fake backend: read the weights {path}")


async def blackhole(cfg: Config, backend: FakeBackend) -> None:
    """Once a health check has succeeded, stop accepting: close the server's listening socket
    and listen again on the same port with a backlog of 0, filled by our own connections, so
    the kernel drops every new SYN and a client hangs in ``connect()``."""
    for _ in range(200):  # bounded: 20 s for the gateway's first health check
        if backend.stats_health_ok:
            break
        await asyncio.sleep(0.1)
    assert backend.runner is not None
    for site in list(backend.runner.sites):
        await site.stop()
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((cfg.host, cfg.port))
    listener.listen(0)
    fillers = []
    for _ in range(2):  # the queue holds backlog + 1 connections
        filler = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect((cfg.host, cfg.port))
        fillers.append(filler)
    await asyncio.sleep(0.2)
    out(f"fake backend: blackhole on {cfg.host}:{cfg.port} (listen queue full)")
    backend.blackhole_sockets = [listener, *fillers]  # kept open until we exit


async def amain(cfg: Config) -> int:
    loop = asyncio.get_running_loop()
    # Fork first, so the grandchild does not inherit SIG_IGN dispositions.
    grandchild = fork_grandchild(cfg.fork_grandchild) if cfg.fork_grandchild else None
    reaper = asyncio.create_task(reap(grandchild)) if grandchild is not None else None
    stop = asyncio.Event()
    if cfg.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)

    backend = FakeBackend(cfg)
    runner = web.AppRunner(
        backend.make_app(), handler_cancellation=True, access_log=None, shutdown_timeout=0.1
    )
    await runner.setup()
    backend.runner = runner

    async def start_site() -> None:
        site = web.TCPSite(runner, cfg.host, cfg.port)
        try:
            await site.start()
        except OSError as exc:
            hard_exit(1, f"error: cannot bind {cfg.host}:{cfg.port}: {exc}")
        stamp(cfg, "listen")

    life_task = asyncio.create_task(life(cfg, backend, start_site))
    stop_task = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({life_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
    code = life_task.result() if life_task in done else 0
    if stop_task in done:
        out("fake backend: received signal, shutting down")
        if cfg.stop_delay:
            await asyncio.sleep(cfg.stop_delay)
    for task in (life_task, stop_task, reaper):
        if task is not None:
            task.cancel()
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(runner.cleanup(), timeout=0.3)
    return code  # a live grandchild is left running on purpose: it escaped the session


def parse_args(argv: list[str] | None) -> Config:
    p = argparse.ArgumentParser(description="Fake llama.cpp / vLLM server for modelswap tests.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model", default="fake")
    p.add_argument("--strict-model", action="store_true")
    p.add_argument("--flavor", choices=("llamacpp", "vllm"), default="llamacpp")
    # The /v1/models row's owned_by (default: the flavor's): a vllm-shaped row with another
    # owner is a server that is neither llama.cpp nor vLLM but reports max_model_len.
    p.add_argument("--owned-by", default=None)
    p.add_argument("--load-delay", type=float, default=0.0)
    p.add_argument("--ctx", type=int, default=2048)
    p.add_argument("--tps", type=float, default=0.0)
    p.add_argument("--tokens", type=int, default=8)
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--crash-after", type=int, default=None)
    p.add_argument("--fail-start", action="store_true")
    p.add_argument("--fork-grandchild", metavar="PIDFILE", default=None)
    p.add_argument("--hang", action="store_true")
    p.add_argument("--exit-after-ready", type=float, default=None)
    p.add_argument("--print-log", metavar="FILE", default=None, help="print FILE while loading")
    p.add_argument(
        "--late-log",
        metavar="FILE",
        default=None,
        help="print FILE at the first metadata request once ready (after the gateway's READY)",
    )
    p.add_argument("--quiet-loading", action="store_true", help="print nothing while loading")
    p.add_argument(
        "--silent-bind", action="store_true", help="print nothing when the port binds or is ready"
    )
    p.add_argument("--silent-after", type=float, default=None, help="go quiet after S s")
    p.add_argument("--progress-interval", type=float, default=LOG_INTERVAL)
    p.add_argument("--metadata-delay", type=float, default=0.0, help="delay model metadata")
    p.add_argument("--metadata-forever", action="store_true", help="endless metadata bodies")
    p.add_argument("--models-body", metavar="FILE", default=None, help="serve FILE as /v1/models")
    p.add_argument("--modalities", default=None, help="/props modalities, e.g. vision,audio")
    p.add_argument("--template-tools", action="store_true", help="/props: template has tools")
    # Accepted and ignored, so a test's command line can carry what a real one would.
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("-c", "--ctx-size", type=int, default=None)
    p.add_argument("-np", "--parallel", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument(
        "--enable-sleep-mode", action="store_true", help="serve /sleep, /wake_up, /is_sleeping"
    )
    p.add_argument(
        "--echo-id", action="store_true", help="answer with the client's X-Request-Id as `id`"
    )
    p.add_argument(
        "--stall-after", type=int, default=None, help="stop a stream after N tokens (no end)"
    )
    p.add_argument(
        "--stall-until", metavar="FILE", default=None, help="with --stall-after: until FILE exists"
    )
    p.add_argument(
        "--count-connections", action="store_true", help="serve GET /connections (open count)"
    )
    p.add_argument(
        "--blackhole-after-ready",
        action="store_true",
        help="once ready, stop accepting connections (connects hang)",
    )
    p.add_argument("--weights", metavar="FILE", default=None, help="read FILE while loading")
    p.add_argument(
        "--timestamps",
        metavar="FILE",
        default=None,
        help="append JSON lines: the monotonic time it ran, listened, got its first request",
    )
    p.add_argument("--stop-delay", type=float, default=0.0, help="after SIGTERM, exit S s later")
    p.add_argument(
        "--cached-tokens",
        type=int,
        default=None,
        help="report N prompt tokens as cached (usage.prompt_tokens_details.cached_tokens)",
    )
    p.add_argument(
        "--barrier",
        type=int,
        default=0,
        metavar="N",
        help="hold every inference request until N have arrived (0: none)",
    )
    p.add_argument(
        "--slot-save-path",
        default=os.environ.get("LLAMA_ARG_SLOT_SAVE_PATH"),
        help="serve llama.cpp's slots API, saving into this folder",
    )
    p.add_argument("--slot-bytes-per-token", type=int, default=100, help="a saved slot's size")
    p.add_argument(
        "--slot-file-mode",
        type=lambda text: int(text, 8),
        default=None,
        help="chmod each saved slot file to this (octal): a backend that ignores its umask",
    )
    p.add_argument(
        "--slot-save-seconds", type=float, default=0.0, help="a save takes S s (a large slot)"
    )
    p.add_argument(
        "--content-type-params",
        default="",
        metavar="TEXT",
        help="append TEXT to every Content-Type, e.g. '; charset=utf-8' (vLLM's, SGLang's)",
    )
    p.add_argument(
        "--no-stream-cache-control",
        action="store_true",
        help="send no Cache-Control on a stream (as vLLM and SGLang)",
    )
    p.add_argument(
        "--slot-restore-noop", action="store_true", help="a restore answers done, keeps nothing"
    )
    p.add_argument("--no-slots", action="store_true", help="answer /slots 404")
    p.add_argument(
        "--llamacpp-errors", action="store_true", help="no embeddings (501), unknown POST 404"
    )
    p.add_argument("--slot-save-until", metavar="FILE", default=None, help="save once FILE is")
    a = p.parse_args(argv)
    if a.crash_after is not None and a.crash_after < 1:
        p.error("--crash-after must be >= 1")
    return Config(
        host=a.host,
        port=a.port,
        model=a.model,
        strict_model=a.strict_model,
        flavor=a.flavor,
        owned_by=a.owned_by,
        load_delay=max(0.0, a.load_delay),
        ctx=a.ctx,
        tps=max(0.0, a.tps),
        tokens=max(0, min(a.tokens, MAX_TOKENS_CAP)),
        ignore_sigterm=a.ignore_sigterm,
        crash_after=a.crash_after,
        fail_start=a.fail_start,
        fork_grandchild=a.fork_grandchild,
        hang=a.hang,
        exit_after_ready=a.exit_after_ready,
        print_log=a.print_log,
        late_log=a.late_log,
        quiet_loading=a.quiet_loading,
        silent_bind=a.silent_bind,
        silent_after=a.silent_after,
        progress_interval=max(0.01, a.progress_interval),
        metadata_delay=max(0.0, a.metadata_delay),
        metadata_forever=a.metadata_forever,
        models_body_file=a.models_body,
        modalities=tuple(a.modalities.split(",")) if a.modalities else (),
        template_tools=a.template_tools,
        sleep_mode=a.enable_sleep_mode,
        echo_id=a.echo_id,
        stall_after=a.stall_after,
        stall_until=a.stall_until,
        count_connections=a.count_connections,
        blackhole_after_ready=a.blackhole_after_ready,
        weights=a.weights,
        stop_delay=max(0.0, a.stop_delay),
        cached_tokens=a.cached_tokens,
        timestamps=a.timestamps,
        barrier=max(0, a.barrier),
        slot_save_path=a.slot_save_path or None,
        slot_file_mode=a.slot_file_mode,
        slots=a.parallel or 1,
        slot_bytes_per_token=max(1, a.slot_bytes_per_token),
        slot_save_seconds=max(0.0, a.slot_save_seconds),
        content_type_params=a.content_type_params,
        stream_cache_control=not a.no_stream_cache_control,
        slot_restore_noop=a.slot_restore_noop,
        slot_save_until=a.slot_save_until,
        no_slots=a.no_slots,
        llamacpp_errors=a.llamacpp_errors,
    )


def stamp(cfg: Config, event: str, at: float | None = None) -> None:
    """``--timestamps``: CLOCK_MONOTONIC is one clock for every process of the machine, so a
    bench can set these against its own (spawn, request sent, first byte)."""
    if cfg.timestamps is not None:
        line = json.dumps({"event": event, "t": time.monotonic() if at is None else at})
        with open(cfg.timestamps, "a") as fh:
            fh.write(line + "\n")


def main(argv: list[str] | None = None) -> int:
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(line_buffering=True)
    cfg = parse_args(argv)
    global CONTENT_TYPE_PARAMS
    CONTENT_TYPE_PARAMS = cfg.content_type_params
    stamp(cfg, "ran", RAN_AT)
    mask = os.umask(0o077)  # read back (the keeper's, issue 38), then put back
    os.umask(mask)
    out(
        f"fake backend starting: pid={os.getpid()} flavor={cfg.flavor} model={cfg.model} "
        f"listen={cfg.host}:{cfg.port} load_delay={cfg.load_delay} umask={mask:03o}"
    )
    code = asyncio.run(amain(cfg))
    out(f"fake backend exiting with code {code}")
    return code


if __name__ == "__main__":
    sys.exit(main())
