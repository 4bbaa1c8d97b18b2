"""The door a request passes on its way in: its client, its quota, and what its answer says
about both. The one call http/ makes per request (docs/sharing.md, "Wiring"):

    admitted = runtime.gate.admit(key)          # raises RateLimitedError (429) when over
    lease = await runtime.acquire(model_id, admitted.client)   # the fair queue
    ...answer, with admitted.headers() on it...
    admitted.finish(tokens, estimate_tokens(request_bytes, answer_bytes))   # once, at the end

The accounting itself is pure (``routing/quota.py``); this adds the clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from modelswap.config.resolved import ApiKey, KeyDefaults
from modelswap.errors import RateLimitedError
from modelswap.routing.clients import Client, client_for
from modelswap.routing.quota import (
    FREE_TICKET,
    QuotaLedger,
    Ticket,
    Verdict,
    Window,
    window_headers,
)

MAX_CLIENTS = 4096


@dataclass(eq=False, slots=True)  # (made for every request of a key with a quota)
class Admitted:
    """One request let in: whose it is, and its claim on the client's quota (its ticket,
    which also holds the limits its headers show)."""

    client: Client
    ticket: Ticket
    _gate: ClientGate = field(repr=False)
    # Whether the client has a quota: its answers carry headers, its end is accounted (the
    # fast path reads this one flag for a client without).
    limited: bool = True

    def headers(self) -> dict[str, str]:
        """The ``x-ratelimit-*`` headers for its answer (none for a client with no quota)."""
        return self.ticket.headers() if self.limited else {}

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The same, in bytes."""
        return self.ticket.raw_headers() if self.limited else []

    def head_bytes(self) -> bytes:
        """The same as the lines of an answer's head, ``name: value\r\n`` each (the fast
        door writes them as they are)."""
        return self.ticket.head_bytes() if self.limited else b""

    def finish(self, tokens: int | None, estimate: int = 0) -> None:
        """The answer ended (or failed, or its client left): give back the concurrency
        place and charge ``tokens`` — the backend's usage, prompt + completion; None when it
        reported none, then ``estimate`` is charged. A request that never reached a backend
        passes ``tokens=0``. Once; again is a no-op."""
        ticket = self.ticket
        if not ticket.finished:
            self._gate.finish(ticket, tokens, estimate)

    def refund(self) -> None:
        """Undo the admission, as if the request had never come (the fast door hands it to
        aiohttp's path, which admits it again): its place, its request and its count back.
        Instead of :meth:`finish`; once."""
        ticket = self.ticket
        if not ticket.finished:
            self._gate.refund(ticket)


@dataclass(frozen=True, slots=True)
class Standing:
    """One client's use against its limits (``GET /api/queue``'s ``keys``, the quota gauges):
    each limit's value, what is left and when it is whole again; since the gateway started,
    requests admitted and tokens charged. Counted only for a client with a quota."""

    client: Client
    windows: tuple[Window, ...]
    in_flight: int
    requests: int
    tokens: int

    def as_dict(self) -> dict[str, object]:
        return {
            "key": self.client.name,
            "class": self.client.priority,
            "weight": self.client.weight,
            "in_flight": self.in_flight,
            "requests": self.requests,
            "tokens": self.tokens,
            "limits": [
                {
                    "limit": w.name,
                    "value": w.limit,
                    "remaining": w.remaining,
                    "reset_seconds": round(w.reset, 3),
                }
                for w in self.windows
            ],
        }


class ClientGate:
    """Per-key limits at the door. ``defaults``: the anonymous client's (read at each call,
    so a reload applies); ``clock``: monotonic seconds."""

    def __init__(
        self, defaults: Callable[[], KeyDefaults], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._defaults = defaults
        self._clock = clock
        self.ledger = QuotaLedger()
        # key -> its Client, made once (the fast path), and for a client without a quota the
        # one Admitted all its requests share (nothing to count); a reload brings new keys and
        # defaults
        self._clients: dict[int, tuple[ApiKey | None, KeyDefaults, Client, Admitted | None]] = {}

    def client(self, key: ApiKey | None) -> Client:
        return self._known(key)[2]

    def _known(
        self, key: ApiKey | None
    ) -> tuple[ApiKey | None, KeyDefaults, Client, Admitted | None]:
        defaults = self._defaults()
        known = self._clients.get(id(key))
        if known is not None and known[0] is key and known[1] is defaults:
            return known
        client = client_for(key, defaults)
        free = None if client.quota else Admitted(client, FREE_TICKET, self, limited=False)
        if len(self._clients) > MAX_CLIENTS:  # old configs' keys: start again
            self._clients.clear()
        known = self._clients[id(key)] = (key, defaults, client, free)
        return known

    def admit(self, key: ApiKey | None) -> Admitted:
        """Let a request of ``key`` (None: no keys are configured) in, or raise
        :class:`RateLimitedError` naming the limit, with its headers and Retry-After."""
        _, _, client, free = self._known(key)
        if free is not None:
            return free  # no quota: nothing to count (~0.3 µs a request)
        entered = self.ledger.enter(client.name, client.quota, self._clock())
        if isinstance(entered, Verdict):  # refused
            refused = entered.refusal
            if refused is not None:
                raise RateLimitedError(
                    client.name, refused.name, refused.limit, entered.retry_after, entered.headers()
                )
            entered = FREE_TICKET  # (not reached: enter refuses or lets in)
        return Admitted(client, entered, self)

    def finish(self, ticket: Ticket, tokens: int | None, estimate: int) -> None:
        self.ledger.finish(ticket, self._clock(), tokens, estimate)

    def refund(self, ticket: Ticket) -> None:
        self.ledger.refund(ticket, self._clock())

    def standing(self, keys: Iterable[ApiKey | None]) -> list[Standing]:
        """Each of ``keys``' clients against its limits now (None: the anonymous client).
        Reads the ledger; admits and charges nothing."""
        now = self._clock()
        found = []
        for key in keys:
            client = self.client(key)
            in_flight, requests, tokens = self.ledger.usage(client.name)
            windows = self.ledger.windows(client.name, client.quota, now)
            found.append(Standing(client, windows, in_flight, requests, tokens))
        return found

    def headers(self, key: ApiKey | None) -> dict[str, str]:
        """The key's ``x-ratelimit-*`` headers as they stand now (an answer that did not go
        through :meth:`admit`)."""
        client = self.client(key)
        return window_headers(self.ledger.windows(client.name, client.quota, self._clock()))
