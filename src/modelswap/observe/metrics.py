"""Prometheus metrics (``GET /metrics``), on a registry of our own (no global state).

Request, token and start metrics are updated as things happen; per-model state, in-flight,
queue depth and the reported context/capacity are read when scraped (``ModelView``).

Requests carry their outcome: ``status`` is the HTTP status the client got, ``outcome`` is
``error`` for a status of 400 or more *and* for an error event inside a 200 stream (a stream the
gateway opened with loading comments before its model's start failed), ``code`` the error's code
(empty when none). The histograms carry ``outcome`` too, so failures can be left out of latency.

Per client (issue 40): request and token counters and the queue-wait histogram carry ``key``,
the client key's *name* (never the key; ``anonymous`` without one). Names come from the config,
so the label is bounded by the keys configured since the gateway started. The latency
histograms do not carry it (buckets × keys for every route); the queue wait is where fair
sharing shows. Each key's quota is read at scrape time (``KeyQuotaView``).

A client's own stop (499, no error sent) is ``stopped``, not an error. A CORS preflight
(``OPTIONS``) is no request for a model: it is counted apart, in
``modelswap_cors_preflights_total`` by whether its origin was allowed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from modelswap.observe.records import RequestRecord
from modelswap.states import ProcessState

NO_KEY = "anonymous"  # the ``key`` label of a request without a client key (none configured)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
START_BUCKETS = (0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800)


@dataclass(frozen=True, slots=True)
class ModelView:
    """What the scrape reads about one model at that moment."""

    state: ProcessState
    in_flight: int
    queued: int
    context_length: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None


@dataclass(frozen=True, slots=True)
class StateCounts:
    """What the scrape reads about the files of ``stateDir`` (issue 38): rows the activity log
    dropped, by reason; failed writes and files moved aside as corrupt, by file (``activity``,
    ``stats``, ``capabilities``, ``prompt-cache-index``)."""

    activity_dropped: Mapping[str, int]
    write_failures: Mapping[str, int]
    moved_aside: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class KeyQuotaView:
    """One client's quota as the scrape reads it: each limit (``concurrency``, ``requests``,
    ``tokens``, ``tokens-day``) with its value and what is left now."""

    key: str
    limits: Mapping[str, tuple[int, int]]  # limit -> (value, remaining)
    in_flight: int


class _KeyQuotaCollector:
    def __init__(self, read: Callable[[], Iterable[KeyQuotaView]]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        limit = GaugeMetricFamily(
            "modelswap_key_quota_limit",
            "A client key's quota, by limit (concurrency, requests and tokens per minute, "
            "tokens-day); keys without a quota are not listed",
            labels=["key", "limit"],
        )
        remaining = GaugeMetricFamily(
            "modelswap_key_quota_remaining",
            "What is left of a client key's quota now, by limit (a bucket refills continuously)",
            labels=["key", "limit"],
        )
        in_flight = GaugeMetricFamily(
            "modelswap_key_in_flight",
            "A limited client key's requests admitted and not finished (served or waiting)",
            labels=["key"],
        )
        for view in self._read():
            if not view.limits:
                continue
            in_flight.add_metric([view.key], view.in_flight)
            for name, (value, left) in sorted(view.limits.items()):
                limit.add_metric([view.key, name], value)
                remaining.add_metric([view.key, name], left)
        return [limit, remaining, in_flight]


class _StateCollector:
    def __init__(self, read: Callable[[], StateCounts]) -> None:
        self._read = read

    def collect(self) -> Iterable[Metric]:
        counts = self._read()
        families = []
        for name, text, label, values in (
            (
                "modelswap_activity_rows_dropped",
                "Activity rows not stored, by reason (unavailable, write_failed, queue_full, "
                "closed)",
                "reason",
                counts.activity_dropped,
            ),
            (
                "modelswap_state_write_failures",
                "Failed writes of a stateDir file (each retried later)",
                "file",
                counts.write_failures,
            ),
            (
                "modelswap_state_files_moved_aside",
                "stateDir files found corrupt, moved aside and started afresh",
                "file",
                counts.moved_aside,
            ),
        ):
            family = CounterMetricFamily(name, text, labels=[label])
            for key, value in sorted(values.items()):
                family.add_metric([key], value)
            families.append(family)
        return families


class _LiveCollector:
    def __init__(self, view: Callable[[], Mapping[str, ModelView]]) -> None:
        self._view = view

    def collect(self) -> Iterable[Metric]:
        views = self._view()
        state = GaugeMetricFamily(
            "modelswap_model_state", "1 for the model's current state", labels=["model", "state"]
        )
        in_flight = GaugeMetricFamily(
            "modelswap_in_flight", "Requests being served", labels=["model"]
        )
        queue = GaugeMetricFamily(
            "modelswap_queue_depth", "Requests waiting for the model", labels=["model"]
        )
        context = GaugeMetricFamily(
            "modelswap_context_length_tokens",
            "Context per request the running backend reported",
            labels=["model"],
        )
        kv = GaugeMetricFamily(
            "modelswap_kv_cache_tokens", "KV cache size the backend printed", labels=["model"]
        )
        conc = GaugeMetricFamily(
            "modelswap_max_concurrency", "Max concurrency the backend printed", labels=["model"]
        )
        for model, v in views.items():
            for s in ProcessState:
                state.add_metric([model, s.value], 1.0 if v.state is s else 0.0)
            in_flight.add_metric([model], v.in_flight)
            queue.add_metric([model], v.queued)
            if v.context_length is not None:
                context.add_metric([model], v.context_length)
            if v.kv_cache_tokens is not None:
                kv.add_metric([model], v.kv_cache_tokens)
            if v.max_concurrency is not None:
                conc.add_metric([model], v.max_concurrency)
        return [state, in_flight, queue, context, kv, conc]


class Metrics:
    def __init__(
        self,
        view: Callable[[], Mapping[str, ModelView]],
        state: Callable[[], StateCounts] | None = None,
        quotas: Callable[[], Iterable[KeyQuotaView]] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "modelswap_requests",
            "Requests by model, route, HTTP status, outcome (ok, error, stopped), error code and "
            "client key name",
            ["model", "route", "status", "outcome", "code", "key"],
            registry=r,
        )
        self.duration = Histogram(
            "modelswap_request_duration_seconds",
            "Whole request, first byte in to last out",
            ["model", "route", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttfb = Histogram(
            "modelswap_time_to_first_byte_seconds",
            "From arrival to the backend's first byte",
            ["model", "route", "outcome"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.preflights = Counter(
            "modelswap_cors_preflights",
            "CORS preflights (OPTIONS) answered, by route and whether the origin was allowed",
            ["route", "allowed"],
            registry=r,
        )
        self.tokens = Counter(
            "modelswap_tokens",
            "Tokens by model, kind (prompt, completion) and client key name",
            ["model", "kind", "key"],
            registry=r,
        )
        self.queue_wait = Histogram(
            "modelswap_queue_wait_seconds",
            "How long a request that queued waited in the scheduler for its grant (a start, a "
            "concurrency or in-flight limit, its turn), by model and client key name; a request "
            "granted at once is not observed",
            ["model", "key"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.starts = Counter(
            "modelswap_starts",
            "Backend starts by result (ready, failed)",
            ["model", "result"],
            registry=r,
        )
        self.start_duration = Histogram(
            "modelswap_start_duration_seconds",
            "Spawn to ready",
            ["model"],
            buckets=START_BUCKETS,
            registry=r,
        )
        # The prompt cache kept across a swap (issue 30): per slot saved, restored, kept,
        # skipped (the ceiling or the budget), failed or dropped; the bytes and tokens saved
        # and restored; failures (a slot failed or dropped, or the slots could not be listed).
        self.cache_slots = Counter(
            "modelswap_prompt_cache_slots",
            "llama.cpp slots by action (save, restore) and result (saved, restored, kept, "
            "skipped, failed, dropped)",
            ["model", "action", "result"],
            registry=r,
        )
        self.cache_bytes = Counter(
            "modelswap_prompt_cache_bytes",
            "Bytes of prompt cache saved and restored",
            ["model", "action"],
            registry=r,
        )
        self.cache_tokens = Counter(
            "modelswap_prompt_cache_tokens",
            "Tokens of prompt cache saved and restored",
            ["model", "action"],
            registry=r,
        )
        self.cache_failures = Counter(
            "modelswap_prompt_cache_failures",
            "Slots that failed to save or were dropped at a restore, and saves or restores "
            "that could not list the slots",
            ["model", "action"],
            registry=r,
        )
        # Each restore proved by the first answer after it (issue 38): works, partly, fails.
        self.cache_proofs = Counter(
            "modelswap_prompt_cache_proofs",
            "Restores proved by the first answer after them, by what it took from the cache "
            "(works, partly, fails)",
            ["model", "state"],
            registry=r,
        )
        r.register(_LiveCollector(view))
        if state is not None:
            r.register(_StateCollector(state))
        if quotas is not None:
            r.register(_KeyQuotaCollector(quotas))
        self._cache: dict[tuple[str, str, int, str | None, str], tuple[Any, Any]] = {}
        self._ttfb: dict[tuple[str, str, str], Any] = {}
        self._tokens: dict[tuple[str, str, str], Any] = {}

    def _children(
        self, model: str, route: str, status: int, code: str | None, outcome: str, key: str
    ) -> tuple[Any, Any]:
        cached = (model, route, status, code, key)  # the outcome follows from status and code
        found = self._cache.get(cached)
        if found is None:
            found = (
                self.requests.labels(model, route, str(status), outcome, code or "", key),
                self.duration.labels(model, route, outcome),
            )
            if len(self._cache) < 10_000:
                self._cache[cached] = found
        return found

    def request_finished(self, rec: RequestRecord) -> None:
        model = rec.model or ""
        outcome = rec.outcome
        if outcome == "preflight":  # a browser's check, not a request: counted apart
            allowed = rec.rule is not None and rec.rule.get("allowed") is True
            self.preflights.labels(rec.route, "true" if allowed else "false").inc()
            return
        key = rec.key_name or NO_KEY
        requests, duration = self._children(
            model, rec.route, rec.status, rec.error_code, outcome, key
        )
        requests.inc()
        duration.observe(rec.duration)
        if rec.first_byte is not None:  # rec.ttft is the first token (load excluded)
            labels = (model, rec.route, outcome)
            ttfb = self._ttfb.get(labels)
            if ttfb is None:
                ttfb = self._ttfb.setdefault(labels, self.ttfb.labels(*labels))
            ttfb.observe(rec.first_byte)
        if rec.prompt_tokens:
            self._token_child(model, "prompt", key).inc(rec.prompt_tokens)
        if rec.completion_tokens:
            self._token_child(model, "completion", key).inc(rec.completion_tokens)

    def _token_child(self, model: str, kind: str, key: str) -> Any:
        """The token counter of (model, kind, key), looked up once (``.labels`` takes a lock
        and builds its key on every call)."""
        found = self._tokens.get((model, kind, key))
        if found is None:
            found = self.tokens.labels(model, kind, key)
            if len(self._tokens) < 10_000:
                self._tokens[model, kind, key] = found
        return found

    def queue_waited(self, model: str, key: str, seconds: float) -> None:
        """A request that queued was granted after ``seconds`` (``key``: its client's name)."""
        self.queue_wait.labels(model, key).observe(seconds)

    def start_finished(self, model: str, ok: bool, seconds: float | None) -> None:
        self.starts.labels(model, "ready" if ok else "failed").inc()
        if ok and seconds is not None:
            self.start_duration.labels(model).observe(seconds)

    def prompt_cache(self, action: str, report: Mapping[str, Any]) -> None:
        """One save or restore report (``prompt_cache.saved``/``.restored`` events)."""
        model = str(report.get("model") or "")
        detail = report.get("detail")
        failures = 1 if report.get("error") else 0
        for slot in detail if isinstance(detail, list) else []:
            result = slot.get("result") if isinstance(slot, dict) else None
            if isinstance(result, str):
                self.cache_slots.labels(model, action, result).inc()
                failures += result in ("failed", "dropped")
        for counter, key in ((self.cache_bytes, "bytes"), (self.cache_tokens, "tokens")):
            value = report.get(key)
            if isinstance(value, int) and value > 0:
                counter.labels(model, action).inc(value)
        if failures:
            self.cache_failures.labels(model, action).inc(failures)

    def prompt_cache_proved(self, verdict: Mapping[str, Any]) -> None:
        """One proof (``prompt_cache.proved``: the verdict, its ``last`` proof)."""
        last = verdict.get("last")
        state = last.get("state") if isinstance(last, dict) else None
        if isinstance(state, str):
            self.cache_proofs.labels(str(verdict.get("model") or ""), state).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
