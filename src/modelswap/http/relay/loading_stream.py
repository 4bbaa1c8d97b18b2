"""Keep a streaming client informed while its model starts.

A streaming request that has waited more than a second for its model gets its 200 event-stream
headers, then SSE comment lines — ``: loading model X — autotuning 7/16 (95 s)`` — whenever the
phase changes and every few seconds otherwise. OpenAI clients ignore comments, so no fake
content ever enters the answer; a client (or proxy) with a read timeout sees a live connection.
A model with ``sendLoadingState`` (llama-swap's) gets, on ``/v1/chat/completions`` (and the
versionless ``/v/chat/completions``), the same
text as ``reasoning_content`` chunks instead, which chat UIs show as thinking.
Non-streaming requests simply wait.

A request waiting its turn in the fair queue (docs/sharing.md) is told its place the same way:
a stream gets ``: queued 3rd for qwen, ~12 s`` whenever those words change (at most once a
second); a non-streamed answer that waited carries them in ``X-Modelswap-Queue``.

What the gateway writes into such a stream is the client's answer too: it is counted in the
request's bytes out, and a final error event marks the request as failed (its error code in the
activity log and the metrics), though its HTTP status was 200.
"""

from __future__ import annotations

import asyncio
import json
import time

from aiohttp import web

from modelswap.errors import ModelswapError
from modelswap.http.error_responses import error_code_of, response_for
from modelswap.http.relay.response_sink import ResponseSink
from modelswap.http.relay.sse import error_event, event_stream
from modelswap.http.request_obs import OBS
from modelswap.http.route_table import CHAT_PATHS
from modelswap.http.tracking.client_gate import QUEUE_PLACE
from modelswap.routing.clients import ANONYMOUS, Client
from modelswap.routing.local import Lease
from modelswap.routing.passage import Acquire
from modelswap.runtime import Runtime

EARLY_AFTER = 1.0  # a quick start or swap needs no comments: the answer starts normally
TICK = 0.5
KEEPALIVE = 5.0
PLACE_EVERY = 1.0  # a waiter's place is told at most this often


class LoadingStream:
    """``acquire`` like the router's; opens ``sink`` early when the wait is long (the relay
    then writes the answer into it). ``client``: whose request it is, in the fair queue."""

    def __init__(
        self,
        request: web.Request,
        runtime: Runtime,
        sink: ResponseSink | None = None,
        client: Client = ANONYMOUS,
    ) -> None:
        self._request = request
        self._runtime = runtime
        self._client = client
        self.sink = sink if sink is not None else ResponseSink(request)

    @property
    def response(self) -> web.StreamResponse | None:
        """The stream, once opened early."""
        return self.sink.response

    async def acquire(self, model: str) -> Lease:
        runtime = self._runtime
        pending = runtime.admit(model, self._client)
        future = pending.future
        if future.done():
            return future.result()  # ready and free: no waiting machinery, no extra loop turn
        try:
            done, _ = await asyncio.wait({future}, timeout=EARLY_AFTER)
            started = time.monotonic() - EARLY_AFTER
            last_label, last_sent = "", 0.0
            last_place, place_sent = b"", 0.0
            while future not in done:
                label = runtime.model(model).phase()
                now = time.monotonic()
                if label != last_label or now - last_sent >= KEEPALIVE:
                    response = await self._open()
                    text = f"loading model {model} — {label} ({now - started:.0f} s)"
                    await self._write(response, self._progress(model, text))
                    last_label, last_sent = label, now
                place = runtime.wait_place(pending)
                comment = place.comment() if place is not None else last_place
                if comment != last_place and now - place_sent >= PLACE_EVERY:
                    await self._write(await self._open(), comment)
                    last_place, place_sent = comment, now
                done, _ = await asyncio.wait({future}, timeout=TICK)
            return future.result()
        except BaseException:
            # The client went away (or its stream broke) while waiting, or just as the lease
            # was granted: leave the queue, or give the unused lease back.
            runtime.withdraw(pending)
            raise

    def _progress(self, model: str, text: str) -> bytes:
        """An SSE comment; with ``sendLoadingState`` on a chat stream, llama-swap's chunk with
        the text as ``reasoning_content`` instead, for chat UIs that show thinking."""
        wanted = self._runtime.model(model).config.send_loading_state
        if not wanted or self._request.path not in CHAT_PATHS:
            return f": {text}\n\n".encode()
        chunk = {
            "id": f"loading-{model}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "delta": {"role": "assistant", "reasoning_content": f"{text}\n"},
                    "finish_reason": None,
                }
            ],
        }
        return f"data: {json.dumps(chunk)}\n\n".encode()

    async def _open(self) -> web.StreamResponse:
        if self.sink.response is None:
            return await self.sink.open_early(event_stream())
        return self.sink.response

    async def _write(self, response: web.StreamResponse, data: bytes) -> None:
        obs = self._request.get(OBS)
        if obs is not None:
            obs.wrote(data)
        await response.write(data)

    async def fail(self, error: ModelswapError) -> web.StreamResponse:
        """End the already-open stream with the error as a final ``data:`` event, and record
        its code (the request failed, though its status was 200)."""
        response = self.sink.response
        assert response is not None
        answer = response_for(error, self._runtime.redactor)
        data = json.loads(_body(answer))
        obs = self._request.get(OBS)
        if obs is not None:
            obs.error_event(error_code_of(data), str(error))
        await self._write(response, error_event(self._request.path, data, answer.status))
        await response.write_eof()
        return response


def queued_acquire(request: web.Request, runtime: Runtime, client: Client) -> Acquire:
    """A non-streamed request's acquire: the router's, for ``client``; one that waits notes
    its place (at most once a second) for its answer's ``X-Modelswap-Queue`` header."""

    async def acquire(model: str) -> Lease:
        pending = runtime.admit(model, client)
        future = pending.future
        if future.done():
            return future.result()
        try:
            while True:
                place = runtime.wait_place(pending)
                if place is not None:
                    request[QUEUE_PLACE] = place.header()
                done, _ = await asyncio.wait({future}, timeout=PLACE_EVERY)
                if done:
                    return future.result()
        except asyncio.CancelledError:
            runtime.withdraw(pending)  # the client left: out of the queue (or the lease back)
            raise

    return acquire


async def fail_or_raise(loading: LoadingStream | None, error: ModelswapError) -> web.StreamResponse:
    """How an error reaches a client: as the final event of a stream already opened early,
    else raised, for the error middleware to answer with a status."""
    if loading is not None and loading.response is not None:
        return await loading.fail(error)
    raise error


def _body(response: web.Response) -> bytes:
    body = response.body
    return body if isinstance(body, bytes) else b"{}"
