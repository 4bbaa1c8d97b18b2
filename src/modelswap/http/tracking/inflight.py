"""The requests in flight right now, and cancelling one (llama-swap's in-flight table).

Each observed request (inference and ``/upstream``) is registered by its
:class:`~modelswap.http.tracking.scope.RequestScope` for as long as it is served, under
llama-swap's id scheme: a decimal counter from 1, as a string. Nothing is done per chunk: a
listing reads the request's :class:`RequestObs` (bytes relayed, the model it resolved to) at
that moment.

Cancelling cancels the handler's task — the same path a client that hangs up takes, so the
upstream request is closed (the backend stops generating) and the model's lease released.
The client gets a 502 if nothing had reached it yet, else its answer ends where it was; the
activity log records ``request_cancelled``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol, cast

from aiohttp import web

from modelswap.config.resolved import ApiKey
from modelswap.http.request_obs import RequestObs
from modelswap.redact import Redactor

CANCELLED_CODE = "request_cancelled"


class Listed(Protocol):
    """What the listing reads of a request (its RequestScope)."""

    @property
    def path(self) -> str: ...
    @property
    def method(self) -> str: ...
    @property
    def headers(self) -> Mapping[str, str]: ...
    @property
    def remote(self) -> str | None: ...
    @property
    def request_id(self) -> str: ...
    @property
    def response_headers(self) -> Mapping[str, str] | None: ...
    @property
    def obs(self) -> RequestObs: ...
    @property
    def key(self) -> ApiKey | None: ...


@dataclass(eq=False, slots=True)
class InflightRequest:
    """One request being served. ``cancelled`` is set before its task is cancelled, so the
    middleware can tell an operator's cancel from a client's disconnect."""

    id: str
    request: Listed
    task: asyncio.Task[object] | None
    started: float = field(default_factory=time.monotonic)
    at: float = field(default_factory=time.time)
    cancelled: bool = False


class InflightRegistry:
    """The in-flight requests, by id. Used on the event loop only (no locks)."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._requests: dict[str, InflightRequest] = {}

    def add(
        self, request: Listed, task: asyncio.Task[object] | asyncio.Task[None] | None = None
    ) -> InflightRequest:
        """Register ``request``, served by ``task`` (by default the current one)."""
        entry = InflightRequest(
            str(next(self._ids)),
            request,
            cast("asyncio.Task[object] | None", task)
            if task is not None
            else asyncio.current_task(),
        )
        self._requests[entry.id] = entry
        return entry

    def remove(self, entry: InflightRequest) -> None:
        self._requests.pop(entry.id, None)

    def find(self, id_or_request_id: str) -> InflightRequest | None:
        """By llama-swap's id, else by the ``X-Request-Id`` the client got."""
        entry = self._requests.get(id_or_request_id)
        if entry is not None:
            return entry
        for candidate in self._requests.values():
            if candidate.request.request_id == id_or_request_id:
                return candidate
        return None

    def cancel(self, id_or_request_id: str) -> InflightRequest | None:
        """Cancel that request's handler; None when no such request is in flight."""
        entry = self.find(id_or_request_id)
        if entry is None or entry.task is None:
            return None
        entry.cancelled = True
        entry.task.cancel()
        return entry

    def entries(self) -> list[InflightRequest]:
        return sorted(self._requests.values(), key=lambda e: (e.at, int(e.id)))


INFLIGHT: web.AppKey[InflightRegistry] = web.AppKey("inflight", InflightRegistry)


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def _header_map(headers: Iterable[tuple[str, str]], redactor: Redactor) -> dict[str, str]:
    """One value per header (the first), credentials masked, as llama-swap lists them."""
    out: dict[str, str] = {}
    for name, value in redactor.headers(headers):
        out.setdefault(name, value)
    return out


def describe(
    entry: InflightRequest,
    redactor: Redactor,
    *,
    model: str | None,
    requested: str | None,
    bytes_out: int,
    key_name: str | None,
    relaying: bool,
    error_code: str | None = None,
    now: float | None = None,
) -> dict[str, object]:
    """llama-swap's ``InflightRequestEntry`` fields, then modelswap's own beside them."""
    request = entry.request
    response = request.response_headers
    elapsed = (time.monotonic() if now is None else now) - entry.started
    return {
        "id": entry.id,
        "timestamp": _rfc3339(entry.at),
        "model": model or requested or "",
        "req_path": request.path,
        "method": request.method,
        "req_headers": _header_map(list(request.headers.items()), redactor),
        "remote_ip": request.remote or "",
        "resp_headers": _header_map(list(response.items()), redactor)
        if response is not None
        else {},
        "resp_bytes": bytes_out,
        "elapsed_ms": max(0, int(elapsed * 1000)),
        # modelswap's
        "request_id": request.request_id,
        "requested": requested,
        "key_name": key_name,
        "state": "relaying" if relaying else "waiting",
        "cancelling": entry.cancelled,
        # set once an error event went into its 200 stream: the request failed, though 200
        "error_code": error_code,
    }
