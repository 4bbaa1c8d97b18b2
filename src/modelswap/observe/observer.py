"""Where finished requests and lifecycle events go: metrics, the activity log, the event bus."""

from __future__ import annotations

import logging

from modelswap.events import Event, EventBus
from modelswap.observe.activity import ActivityLog
from modelswap.observe.metrics import Metrics
from modelswap.observe.records import RequestRecord
from modelswap.states import ProcessState

log = logging.getLogger(__name__)

# A finished request's fields the ``request.finished`` event leaves out (a capture's bodies and
# headers: the activity log keeps them).
_CAPTURED = ("request_body", "response_body", "request_headers", "response_headers")


def why(record: RequestRecord) -> str:
    """The rule behind a refusal, for the request's log line (issue 41): ``: denied by
    hooks.on_request line 1: deny 400 "…" when …`` or ``: globalConcurrencyLimit 2 (2 in
    flight)``; empty when no rule refused it."""
    rule = record.rule
    if not rule:
        return ""
    kind = rule.get("kind")
    if kind == "policy":
        text = str(rule.get("rule") or "").replace("\n", " ")
        return f": denied by {rule.get('program')} line {rule.get('line')}: {text}"
    if kind == "limit":
        return f": {rule.get('name')} {rule.get('value')} ({rule.get('in_flight')} in flight)"
    if kind == "cors":
        allowed = "allowed" if rule.get("allowed") else "not allowed"
        return f": preflight from origin {rule.get('origin') or '(none)'}, {allowed}"
    return ""


class Observer:
    def __init__(
        self,
        metrics: Metrics,
        activity: ActivityLog | None,
        events: EventBus,
        *,
        count_requests: bool = True,
    ) -> None:
        self.metrics = metrics
        self.activity = activity
        self.count_requests = count_requests
        # With neither request metrics nor the activity log, requests are not observed at
        # all (the middleware steps aside): what the overhead benchmark compares against.
        self.enabled = count_requests or activity is not None
        self._events = events
        events.add_listener(self._on_event)

    def request_finished(self, record: RequestRecord) -> None:
        """Synchronous and cheap: counters, a queued row, an event. Never raises."""
        try:
            if self.count_requests:
                self.metrics.request_finished(record)
            if self.activity is not None:
                self.activity.record(record)
            summary = record.as_dict()
            for captured in _CAPTURED:  # (only present with a capture; popped: ~2 µs cheaper)
                summary.pop(captured, None)
            self._events.publish("request.finished", **summary)
            # The request's own line, by its id: errors always, every request at debug level;
            # an error's code follows its status (a 200 stream that ended in an error event).
            failed = record.outcome == "error"
            level = logging.INFO if failed else logging.DEBUG
            if log.isEnabledFor(level):
                log.log(
                    level,
                    "request %s %s %s -> %d%s in %.3f s%s",
                    record.request_id or "-",
                    record.route,
                    record.model or record.requested or "-",
                    record.status,
                    f" {record.error_code}" if record.error_code else "",
                    record.duration,
                    why(record),
                )
        except Exception:  # observing must never break serving
            log.exception("recording a finished request failed")

    def _on_event(self, event: Event) -> None:
        if event.kind in ("prompt_cache.saved", "prompt_cache.restored"):
            action = "save" if event.kind == "prompt_cache.saved" else "restore"
            self.metrics.prompt_cache(action, event.data)
            return
        if event.kind == "prompt_cache.proved":
            self.metrics.prompt_cache_proved(event.data)
            return
        if event.kind != "process.state":
            return
        model = str(event.data["model"])
        old, new = event.data.get("old"), event.data.get("new")
        if new is ProcessState.READY and old is ProcessState.STARTING:
            seconds = event.data.get("start_seconds")
            self.metrics.start_finished(
                model, True, float(seconds) if isinstance(seconds, int | float) else None
            )
        elif new is ProcessState.FAILED and old is ProcessState.STARTING:
            self.metrics.start_finished(model, False, None)
