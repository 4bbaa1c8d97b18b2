"""One request served on the fast door (:mod:`modelswap.http.server.fast_door`): run through
the one relay, whose sink it is — the answer framed on the client's connection (chunked without
a length), flushed when the backend has nothing more in hand — and kept by a RequestScope.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web
from multidict import CIMultiDictProxy

from modelswap.config.resolved import ApiKey
from modelswap.errors import ModelswapError, UpstreamUnreachableError
from modelswap.http.error_responses import error_response, explained, response_for
from modelswap.http.reading import HEADER as REQUEST_ID_HEADER
from modelswap.http.reading import choose_request_id
from modelswap.http.relay.extract import RequestBody
from modelswap.http.relay.relay import Outgoing, Upstream, observe_payload, relay
from modelswap.http.tracking.client_gate import charge
from modelswap.http.tracking.drain import Drain
from modelswap.http.tracking.inflight import CANCELLED_CODE, InflightRegistry
from modelswap.http.tracking.scope import RequestScope
from modelswap.jsonsafe import loads
from modelswap.routing import gate
from modelswap.runtime import Runtime

log = logging.getLogger("modelswap")

_REQUEST_ID = REQUEST_ID_HEADER.encode()


class Door(Protocol):
    """What the answer reads of the door."""

    runtime: Runtime
    drain: Drain
    registry: InflightRegistry


class Connection(Protocol):
    """The client's connection, as the answer writes to it."""

    @property
    def door(self) -> Door: ...
    @property
    def peer(self) -> str | None: ...
    @property
    def backlogged(self) -> bool: ...
    def may_keep(self) -> bool: ...
    def date_header(self) -> bytes: ...
    def write(self, data: bytes) -> None: ...
    async def drained(self) -> None: ...
    def abort(self) -> None: ...
    def finished(self, keep_alive: bool, handed: str | None) -> None: ...


@dataclass(slots=True)
class Admitted:
    """A request the fast door serves, as its admit found it (its model leased)."""

    headers: CIMultiDictProxy[str]
    key: ApiKey | None
    body: RequestBody
    payload: bytes
    parsed: Mapping[str, object] | None
    upstream: Upstream
    let_in: gate.Admitted  # by the client gate: its client, its quota's claim and headers


class Answer:
    """One request served on the fast door: run through the relay, whose sink it is (the
    answer framed on the connection, flushed when the backend has nothing more in hand)."""

    __slots__ = (
        "admitted",
        "chunked",
        "connection",
        "head_sent",
        "keep_alive",
        "out",
        "path",
        "raw_headers",
        "request_id",
        "scope",
        "task",
    )

    def __init__(
        self,
        connection: Connection,
        url: bytes,
        raw_headers: list[tuple[bytes, bytes]],
        keep_alive: bool,
        admitted: Admitted,
    ) -> None:
        self.connection = connection
        self.admitted = admitted
        self.path = url.decode("latin-1")
        self.raw_headers = raw_headers  # the client's, as they came
        self.keep_alive = keep_alive
        self.request_id = choose_request_id(admitted.headers.get(REQUEST_ID_HEADER, ""))
        self.head_sent = False
        self.chunked = False
        self.scope: RequestScope | None = None
        self.task: asyncio.Task[None] | None = None
        self.out: list[bytes] = []  # what goes to the client at the next flush

    # -- the relay's sink

    @property
    def started(self) -> bool:
        return self.head_sent

    @property
    def backlogged(self) -> bool:
        return self.connection.backlogged

    def head(
        self, status: int, reason: bytes, headers: list[tuple[bytes, bytes]], length: int | None
    ) -> None:
        """The answer's head, as aiohttp's path sends it (``headers`` as they go, the request
        id, the framing, the keep-alive decision added); chunked without a length. It waits
        for the body's first bytes when they are in already (one write, one system call, for
        a whole small answer)."""
        connection = self.connection
        if not connection.may_keep():
            self.keep_alive = False
        headers.append((_REQUEST_ID, self.request_id.encode()))
        if status in (204, 304):
            length = 0  # no body may follow
        if length is not None:
            headers.append((b"Content-Length", b"%d" % length))
        else:
            headers.append((b"Transfer-Encoding", b"chunked"))
            self.chunked = True
        if not self.keep_alive:
            headers.append((b"Connection", b"close"))
        let_in = self.admitted.let_in
        limited = let_in.limited
        scope = self.scope
        if scope is not None:  # (the x-ratelimit-* pairs made only if the scope is read)
            scope.sent(headers, let_in.raw_headers if limited else None)
        self.head_sent = True
        lines = [b"HTTP/1.1 %d %b\r\n" % (status, reason)]
        lines.extend(b"%b: %b\r\n" % pair for pair in headers)
        if limited:  # x-ratelimit-*, on every answer of a key with a quota: lines made whole
            lines.append(let_in.head_bytes())
        lines.append(connection.date_header())
        lines.append(b"\r\n")
        self.out.append(b"".join(lines))

    def write(self, data: bytes) -> None:
        if self.chunked:
            self.out.append(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            self.out.append(data)

    def flush(self) -> None:
        out = self.out
        if out:
            self.connection.write(out[0] if len(out) == 1 else b"".join(out))
            out.clear()

    async def drained(self) -> None:
        self.flush()
        if self.connection.backlogged:
            await self.connection.drained()

    async def end(self) -> None:
        if self.chunked:
            self.out.append(b"0\r\n\r\n")
        self.flush()
        if self.connection.backlogged:
            await self.connection.drained()

    def abort(self, reason: str) -> None:
        self.keep_alive = False
        self.connection.abort()

    # -- the request

    async def run(self) -> None:
        connection = self.connection
        door = connection.door
        runtime = door.runtime
        admitted = self.admitted
        upstream = admitted.upstream
        path = self.path
        observing = runtime.observing
        scope = self.scope = RequestScope(
            runtime,
            path,
            method="POST",
            request_id=self.request_id,
            remote=connection.peer,
            headers=admitted.headers,
            key=admitted.key,
            registry=door.registry if observing else None,
            task=self.task,
            drain=door.drain,
            record=observing,
        )
        let_in = admitted.let_in
        # (a key with a quota is charged the backend's usage: read even when not recorded)
        obs = scope.obs if observing or let_in.limited else None
        scope.obs.requested = admitted.body.model
        status, code, handed = 500, None, None
        try:
            payload = observe_payload(
                obs,
                upstream.label,
                path,
                admitted.payload,
                admitted.parsed,
                streamed=admitted.body.stream,
            )
            outgoing = Outgoing("POST", path, path, self.raw_headers, self.request_id, payload)
            status = await relay(outgoing, upstream, self, runtime.redactor, obs)
        except UpstreamUnreachableError:
            # Refused at once: aiohttp's path notices a dead backend and starts it again.
            handed = "backend"
        except ModelswapError as exc:  # nothing went out yet: answered as aiohttp's path does
            response = response_for(exc, runtime.redactor)
            code = self._write_response(response)
            status = response.status
        except asyncio.CancelledError:
            cancelled = scope.cancelled(self.head_sent)
            status, code = scope.status, scope.code
            if cancelled is not None:
                self._write_response(cancelled)
            elif code == CANCELLED_CODE:
                connection.abort()
            else:
                self.keep_alive = False
        except Exception:
            log.exception("fast door: request to %s failed", upstream.label)
            self.keep_alive = False
            if not self.head_sent:
                failed = "modelswap failed to handle the request (see its log)."
                code = self._write_response(error_response(failed, 500))
            else:
                connection.abort()
        finally:
            upstream.release()  # (the relay has, unless it never began)
            if handed is None:
                charge(let_in, obs, len(admitted.body.raw))
                scope.status, scope.code = status, code
                scope.finish()
            else:
                let_in.refund()  # aiohttp's path admits it again
                scope.forget()  # aiohttp's path records it
            connection.finished(self.keep_alive, handed)

    def _write_response(self, response: web.Response) -> str | None:
        """A whole gateway-authored answer (an error), before anything else went out; its
        error code (its message and rule into the scope, as aiohttp's door records them)."""
        body = response.body if isinstance(response.body, bytes) else b""
        headers = [
            (name.encode("latin-1"), value.encode("latin-1", "replace"))
            for name, value in response.headers.items()
            if name.lower() not in ("content-length", "x-request-id")
        ]
        if "Content-Type" not in response.headers:
            headers.append((b"Content-Type", f"{response.content_type}; charset=utf-8".encode()))
        if self.scope is not None:
            self.scope.obs.wrote(body)  # (counted whether or not recorded)
        reason = (response.reason or "").encode("latin-1", "replace")
        self.head(response.status, reason, headers, len(body))
        self.write(body)
        self.flush()
        try:
            why = explained(loads(body))
        except ValueError:
            return None
        if why is None:
            return None
        if self.scope is not None:
            self.scope.error_message, self.scope.rule = why.message, why.rule
        return why.code
