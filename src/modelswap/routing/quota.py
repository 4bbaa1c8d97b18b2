"""Per-client accounting (``apiKeys[].quota``): pure and synchronous; the caller gives ``now``
(monotonic seconds). docs/sharing.md says what a client sees.

Every rate limit is a **token bucket** refilled continuously: ``requestsPerMinute`` holds up to
N requests and gains N per minute, ``tokensPerMinute`` and ``tokensPerDay`` likewise in tokens.
Why a bucket rather than a sliding window: it costs O(1) memory and time per client whatever a
client sends (a window log grows with the requests it remembers), it allows the burst a person
expects after a pause, and "time until full" is exactly what OpenAI's ``x-ratelimit-reset-*``
headers mean. ``tokensPerDay`` is therefore a rolling 24 hours, not a calendar day.

The life of one request:

* :meth:`QuotaLedger.admit` when it arrives, before it queues: refused (the first limit over,
  its value, remaining, reset and Retry-After) or admitted with a :class:`Ticket` (the one
  object a request let in costs: its claim, and its limits as it left them). Admission
  takes one request from ``requestsPerMinute`` — once: waiting in the queue afterwards never
  counts again — and one place from ``concurrency`` (served *or* waiting).
* :meth:`QuotaLedger.finish` once, when the answer has ended (or failed, or the client left):
  the place is given back and the tokens charged. Tokens are the backend's usage (prompt +
  completion); where it reported none, the estimate the caller passes
  (:func:`estimate_tokens`: 4 bytes a token over the request body and the relayed answer).
  Tokens are known only at the end, so a request may overdraw a token bucket; the key's next
  request is then refused until the debt has refilled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from modelswap.config.resolved import Quota

MINUTE = 60.0
DAY = 86_400.0
# Retry-After for a client at its concurrency limit: when a place frees is not knowable here.
CONCURRENCY_RETRY_SECONDS = 1.0
BYTES_PER_TOKEN = 4  # the usual rule of thumb for English text and code
_NO_QUOTA = Quota()


def estimate_tokens(request_bytes: int, answer_bytes: int) -> int:
    """Tokens charged when the backend reported no usage: request body and answer bytes / 4."""
    return -(-(max(0, request_bytes) + max(0, answer_bytes)) // BYTES_PER_TOKEN)


@dataclass(slots=True)
class _Bucket:
    capacity: float
    per_second: float
    level: float
    at: float

    @classmethod
    def full(cls, capacity: int, period: float, now: float) -> _Bucket:
        return cls(float(capacity), capacity / period, float(capacity), now)

    def refill(self, now: float) -> None:
        if now > self.at:
            level = self.level + (now - self.at) * self.per_second
            self.level = level if level < self.capacity else self.capacity  # (min() is slower)
            self.at = now

    def seconds_until(self, level: float) -> float:
        """Seconds until the bucket holds ``level`` (0 if it does)."""
        return max(0.0, (level - self.level) / self.per_second)


@dataclass(frozen=True, slots=True)
class Window:
    """One limit as a client's headers show it: ``name`` is ``requests``, ``tokens``,
    ``tokens-day`` or ``concurrency``; ``reset`` the seconds until it is whole again."""

    name: str
    limit: int
    remaining: int
    reset: float


@dataclass(eq=False, slots=True)  # (not frozen: made for every request; frozen costs ~0.5 µs)
class Ticket:
    """One admitted request's claim on its client's account — finish it exactly once (again
    is a no-op) — and the client's limits and what was left of each as its admission left
    them (its headers are built from these only when asked: most answers need them once).
    A refusal's snapshot is a ticket already finished, with nothing to give back."""

    account: _Account | None
    quota: Quota = _NO_QUOTA
    in_flight: int = 0
    requests: float = 0.0
    tokens: float = 0.0
    tokens_day: float = 0.0
    head: bytes = b""  # the quota's :func:`head_template`
    finished: bool = False

    def head_bytes(self) -> bytes:
        """The headers as the lines of an answer's head (``name: value\r\n`` each), as
        :meth:`raw_headers` has them: one formatting of the quota's template (the fast door
        writes it on every answer; ~4 times cheaper than pairs formatted one by one)."""
        quota = self.quota
        values: list[int | float | bytes] = []
        if quota.concurrency:
            left = quota.concurrency - self.in_flight
            values.append(left if left > 0 else 0)
        # (each bucket written out: a loop over them costs as much as the rest together)
        if capacity := quota.requests_per_minute:
            level = self.requests
            reset = (capacity - level) * MINUTE / capacity
            values += (level if level > 0 else 0, _duration(reset) if reset >= 0.0005 else b"0ms")
        if capacity := quota.tokens_per_minute:
            level = self.tokens
            reset = (capacity - level) * MINUTE / capacity
            values += (level if level > 0 else 0, _duration(reset) if reset >= 0.0005 else b"0ms")
        if capacity := quota.tokens_per_day:
            level = self.tokens_day
            reset = (capacity - level) * DAY / capacity
            values += (level if level > 0 else 0, _duration(reset) if reset >= 0.0005 else b"0ms")
        return self.head % tuple(values)

    def headers(self) -> dict[str, str]:
        """:func:`window_headers` of :meth:`windows` (every answer of a limited key carries
        them), from :meth:`raw_headers`."""
        return {name.decode(): value.decode() for name, value in self.raw_headers()}

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers as the fast door writes them, made directly in bytes."""
        quota = self.quota
        found: list[tuple[bytes, bytes]] = []
        if quota.concurrency:
            left = quota.concurrency - self.in_flight
            limit, remaining, reset = _NAMES[0]
            found += (
                (limit, b"%d" % quota.concurrency),
                (remaining, b"%d" % (left if left > 0 else 0)),
                (reset, b"0ms"),
            )
        if quota.requests_per_minute:
            _bucket_headers(found, _NAMES[1], quota.requests_per_minute, MINUTE, self.requests)
        if quota.tokens_per_minute:
            _bucket_headers(found, _NAMES[2], quota.tokens_per_minute, MINUTE, self.tokens)
        if quota.tokens_per_day:
            _bucket_headers(found, _NAMES[3], quota.tokens_per_day, DAY, self.tokens_day)
        return found

    def windows(self) -> tuple[Window, ...]:
        quota = self.quota
        found: list[Window] = []
        if quota.concurrency:
            left = max(0, quota.concurrency - self.in_flight)
            found.append(Window("concurrency", quota.concurrency, left, 0.0))
        for name, capacity, period, level in (
            ("requests", quota.requests_per_minute, MINUTE, self.requests),
            ("tokens", quota.tokens_per_minute, MINUTE, self.tokens),
            ("tokens-day", quota.tokens_per_day, DAY, self.tokens_day),
        ):
            if capacity:
                reset = max(0.0, (capacity - level) * period / capacity)
                found.append(Window(name, capacity, max(0, math.floor(level)), reset))
        return tuple(found)


@dataclass(slots=True)  # (not frozen: made for every request)
class Verdict:
    """``admit``'s answer. Refused: ``refused_by`` names the limit, ``retry_after`` the
    seconds until a retry can pass it. ``windows``: every limit the client has, as this
    request left them."""

    ticket: Ticket | None
    levels: Ticket | None = None
    refused_by: str | None = None
    retry_after: float = 0.0

    @property
    def allowed(self) -> bool:
        return self.ticket is not None

    @property
    def windows(self) -> tuple[Window, ...]:
        return self.levels.windows() if self.levels is not None else ()

    @property
    def refusal(self) -> Window | None:
        """The limit that refused the request, as its headers show it."""
        if self.refused_by is None:
            return None
        return next((w for w in self.windows if w.name == self.refused_by), None)

    def raw_headers(self) -> list[tuple[bytes, bytes]]:
        """The ``x-ratelimit-*`` headers of an admitted request, in bytes."""
        return self.levels.raw_headers() if self.levels is not None else []

    def head_bytes(self) -> bytes:
        """The same as the lines of an answer's head (the fast door writes them as they are)."""
        return self.levels.head_bytes() if self.levels is not None else b""

    def headers(self) -> dict[str, str]:
        """The ``x-ratelimit-*`` headers (OpenAI's names for ``requests`` and ``tokens``),
        plus ``Retry-After`` (whole seconds) and ``retry-after-ms`` when refused."""
        found = self.levels.headers() if self.levels is not None else {}
        if self.refused_by is not None:
            found["retry-after"] = str(max(1, math.ceil(self.retry_after)))
            found["retry-after-ms"] = str(max(1, math.ceil(self.retry_after * 1000)))
        return found


# Each limit's three header names, in bytes: concurrency, requests, tokens, tokens-day.
_NAMES = tuple(
    tuple(f"x-ratelimit-{part}-{name}".encode() for part in ("limit", "remaining", "reset"))
    for name in ("concurrency", "requests", "tokens", "tokens-day")
)


def _bucket_headers(
    found: list[tuple[bytes, bytes]],
    names: tuple[bytes, ...],
    capacity: int,
    period: float,
    level: float,
) -> None:
    found += (
        (names[0], b"%d" % capacity),
        (names[1], b"%d" % level if level > 0 else b"0"),
        (names[2], _reset_text(capacity, period, level)),
    )


def _reset_text(capacity: int, period: float, level: float) -> bytes:
    """A bucket's ``x-ratelimit-reset-*`` value: the time until it is full again."""
    reset = (capacity - level) * period / capacity
    return _duration(reset) if reset >= 0.0005 else b"0ms"


def _duration(seconds: float) -> bytes:
    return duration_text(seconds).encode()


def head_template(quota: Quota) -> bytes:
    """The quota's headers as head lines, with ``%d`` (and ``%b`` for a reset) where each
    answer's values go: the limits are the quota's, fixed until it changes."""
    lines: list[bytes] = []
    if quota.concurrency:
        limit, remaining, reset = _NAMES[0]
        lines.append(
            b"%b: %d\r\n%b: %%d\r\n%b: 0ms\r\n" % (limit, quota.concurrency, remaining, reset)
        )
    for names, capacity in zip(
        _NAMES[1:],
        (quota.requests_per_minute, quota.tokens_per_minute, quota.tokens_per_day),
        strict=True,
    ):
        if capacity:
            limit, remaining, reset = names
            lines.append(b"%b: %d\r\n%b: %%d\r\n%b: %%b\r\n" % (limit, capacity, remaining, reset))
    return b"".join(lines)


def window_headers(windows: tuple[Window, ...]) -> dict[str, str]:
    found: dict[str, str] = {}
    for window in windows:
        found[f"x-ratelimit-limit-{window.name}"] = str(window.limit)
        found[f"x-ratelimit-remaining-{window.name}"] = str(window.remaining)
        found[f"x-ratelimit-reset-{window.name}"] = duration_text(window.reset)
    return found


def duration_text(seconds: float) -> str:
    """A duration as OpenAI writes ``x-ratelimit-reset-*``: ``250ms``, ``7.5s``, ``1m30s``."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    if seconds < 60 and seconds == int(seconds):
        return f"{int(seconds)}s"
    minutes, rest = divmod(seconds, 60.0)
    hours, minutes = divmod(int(minutes), 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    return f"{minutes}m{text}" if minutes else text


@dataclass(slots=True)
class _Account:
    quota: Quota
    in_flight: int = 0
    requests: _Bucket | None = None
    tokens: _Bucket | None = None
    tokens_day: _Bucket | None = None
    tickets: int = 0  # admitted, ever (for the usage view)
    charged: int = 0  # tokens charged, ever
    head: bytes = b""  # the quota's head_template (made when the quota is set)


# No quota: nothing to count, nothing to give back, no headers.
FREE_TICKET = Ticket(None, finished=True)
FREE = Verdict(FREE_TICKET)


class QuotaLedger:
    """Accounts of the clients that have a quota, by client name (bounded by the configured
    keys: an unknown name is never added by a request)."""

    def __init__(self) -> None:
        self._accounts: dict[str, _Account] = {}

    def admit(self, client: str, quota: Quota, now: float) -> Verdict:
        """Let one request of ``client`` in, or say which limit refuses it."""
        entered = self.enter(client, quota, now)
        if isinstance(entered, Verdict):
            return entered
        return Verdict(entered, entered) if entered is not FREE_TICKET else FREE

    def enter(self, client: str, quota: Quota, now: float) -> Ticket | Verdict:
        """:meth:`admit` as the gate's fast path has it: a request let in costs one object,
        its :class:`Ticket` (:data:`FREE_TICKET` for no quota); a refusal is its Verdict."""
        account = self._accounts.get(client)
        if account is None or account.quota is not quota:  # new, or reloaded
            if not quota:
                return FREE_TICKET
            account = self._account(client, quota, now)
        else:  # (the common case, without a look at the quota's four limits)
            self._refill(account, now)
        refused, retry = self._refusal(account)
        if refused is not None:
            return Verdict(None, self._ticket(account, finished=True), refused, retry)
        account.in_flight += 1
        account.tickets += 1
        if account.requests is not None:
            account.requests.level -= 1
        return self._ticket(account, finished=False)

    def finish(self, ticket: Ticket, now: float, tokens: int | None, estimate: int = 0) -> None:
        """The request has ended: give back its place, charge ``tokens`` (the backend's usage;
        None: unknown, so ``estimate`` is charged). Idempotent."""
        account = self._close(ticket)
        if account is None:
            return
        if account.in_flight > 0:
            account.in_flight -= 1
        charge = tokens if tokens is not None else estimate
        if charge <= 0:  # (nothing to take: a refill can wait for the next look)
            return
        account.charged += charge
        if (bucket := account.tokens) is not None:
            bucket.refill(now)
            bucket.level -= charge
        if (bucket := account.tokens_day) is not None:
            bucket.refill(now)
            bucket.level -= charge

    def refund(self, ticket: Ticket, now: float) -> None:
        """Undo an admission (the request was handed on, to be admitted again): its place,
        its request and its count back, nothing charged. Instead of :meth:`finish`."""
        account = self._close(ticket)
        if account is None:
            return
        account.in_flight = max(0, account.in_flight - 1)
        account.tickets = max(0, account.tickets - 1)
        requests = account.requests
        if requests is not None:
            requests.refill(now)
            requests.level = min(requests.capacity, requests.level + 1)

    def windows(self, client: str, quota: Quota, now: float) -> tuple[Window, ...]:
        """The client's limits as they stand (for the headers of every answer it gets)."""
        if not quota:
            return ()
        return self._ticket(self._account(client, quota, now), finished=True).windows()

    def usage(self, client: str) -> tuple[int, int, int]:
        """(in flight, requests admitted, tokens charged) since the gateway started."""
        account = self._accounts.get(client)
        if account is None:
            return 0, 0, 0
        return account.in_flight, account.tickets, account.charged

    # ---- inside ------------------------------------------------------------------------------

    def _account(self, client: str, quota: Quota, now: float) -> _Account:
        account = self._accounts.get(client)
        if account is None:
            account = self._accounts[client] = _Account(quota)
            self._reshape(account, quota, now)
        elif account.quota is not quota and account.quota != quota:  # reloaded: new sizes
            self._reshape(account, quota, now)
        self._refill(account, now)
        return account

    @staticmethod
    def _close(ticket: Ticket) -> _Account | None:
        """Mark ``ticket`` ended, once: its account the first time (None after, or for a
        client with no quota), so :meth:`finish` and :meth:`refund` settle it only once."""
        if ticket.finished:
            return None
        ticket.finished = True
        return ticket.account

    @staticmethod
    def _refill(account: _Account, now: float) -> None:
        if (bucket := account.requests) is not None:
            bucket.refill(now)
        if (bucket := account.tokens) is not None:
            bucket.refill(now)
        if (bucket := account.tokens_day) is not None:
            bucket.refill(now)

    @staticmethod
    def _reshape(account: _Account, quota: Quota, now: float) -> None:
        def bucket(old: _Bucket | None, capacity: int, period: float) -> _Bucket | None:
            if not capacity:
                return None
            new = _Bucket.full(capacity, period, now)
            if old is not None:  # the debt is kept
                old.refill(now)
                new.level = min(new.capacity, old.level)
            return new

        account.requests = bucket(account.requests, quota.requests_per_minute, MINUTE)
        account.tokens = bucket(account.tokens, quota.tokens_per_minute, MINUTE)
        account.tokens_day = bucket(account.tokens_day, quota.tokens_per_day, DAY)
        account.quota = quota
        account.head = head_template(quota)

    @staticmethod
    def _refusal(account: _Account) -> tuple[str | None, float]:
        """The first limit that refuses one more request, and seconds until it would not."""
        concurrency = account.quota.concurrency
        if concurrency and account.in_flight >= concurrency:
            return "concurrency", CONCURRENCY_RETRY_SECONDS
        if account.requests is not None and account.requests.level < 1:
            return "requests", account.requests.seconds_until(1.0)
        if account.tokens is not None and account.tokens.level < 1:
            return "tokens", account.tokens.seconds_until(1.0)
        if account.tokens_day is not None and account.tokens_day.level < 1:
            return "tokens-day", account.tokens_day.seconds_until(1.0)
        return None, 0.0

    @staticmethod
    def _ticket(account: _Account, *, finished: bool) -> Ticket:
        requests, tokens, day = account.requests, account.tokens, account.tokens_day
        return Ticket(
            account,
            account.quota,
            account.in_flight,
            requests.level if requests is not None else 0.0,
            tokens.level if tokens is not None else 0.0,
            day.level if day is not None else 0.0,
            account.head,
            finished,
        )
