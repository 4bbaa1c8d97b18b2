"""What happened, as tools: the activity log's search (``/api/activity``), a log's tail
(``/logs``, redacted as every log is), the queue (``/api/queue``) and the clock (llama-swap's
``sys__now``)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from modelswap.http.mcp.registry import MAX_RESULT_BYTES, Args, Caller, Tool, ToolError
from modelswap.observe.records import OUTCOMES

DEFAULT_ROWS, MAX_ROWS = 20, 100
DEFAULT_LINES, MAX_LINES = 100, 1000
LOG_ROOM = MAX_RESULT_BYTES - 512  # the tail's text leaves room for its heading


async def search_activity(caller: Caller, args: Args) -> object:
    store = caller.runtime.activity
    if store is None:
        raise ToolError("The activity log is off in this config (observability: activity).")
    outcome = args.string("outcome")
    if outcome is not None and outcome not in OUTCOMES:
        choices = ", ".join(f"`{name}`" for name in OUTCOMES)
        raise ToolError(f"`outcome` must be one of {choices}.")
    status = args.integer("status", 0, 0, 999) or None
    since_text = args.string("since")
    since = None
    if since_text is not None:
        try:
            since = float(since_text)
        except ValueError:
            raise ToolError("`since` must be unix seconds.") from None
    limit = args.integer("limit", DEFAULT_ROWS, 1, MAX_ROWS)
    before = args.integer("before", 0, 0, 2**62) or None
    model, request_id = args.string("model"), args.string("request_id")
    session_id = args.string("session_id")

    def read() -> list[dict[str, object]]:  # SQLite off the event loop
        store.flush_now()
        return store.query(
            model=model,
            request_id=request_id,
            since=since,
            status=status,
            outcome=outcome,
            limit=limit,
            before_id=before,
            session_id=session_id,
        )

    rows = await asyncio.to_thread(read)
    out: dict[str, object] = {"requests": rows, "shown": len(rows)}
    if len(rows) == limit:
        out["next"] = f"before={min(int(str(r['id'])) for r in rows)} gives the page after"
    return out


async def tail_log(caller: Caller, args: Args) -> str:
    runtime = caller.runtime
    name = args.string("model")
    count = args.integer("lines", DEFAULT_LINES, 1, MAX_LINES)
    if name is None:
        lines, which = runtime.gateway_log.tail(count), "the gateway's log"
    else:
        model = runtime.resolve(name, caller.key)
        lines, which = runtime.model(model.id).logs.tail(count), f"{model.id}'s log"
    redact = runtime.redactor.text
    kept: list[str] = []
    size = 0
    for line in reversed(lines):  # the newest lines are the ones wanted: cut from the front
        text = redact(line)
        size += len(text.encode()) + 1
        if size > LOG_ROOM:
            break
        kept.append(text)
    kept.reverse()
    head = f"The last {len(kept)} lines of {which}"
    if len(kept) < len(lines):
        head += f" [truncated: {len(lines) - len(kept)} earlier lines cut to fit; ask for fewer]"
    return head + ":\n" + "\n".join(kept)


async def show_queue(caller: Caller, args: Args) -> object:
    return caller.runtime.queue_report()


async def now(caller: Caller, args: Args) -> str:
    moment = time.time()
    utc = datetime.fromtimestamp(moment, UTC)
    local = utc.astimezone()
    out = [
        f"UTC: {utc.isoformat(timespec='seconds')}",
        f"server local: {local.isoformat(timespec='seconds')} ({local.tzname()})",
    ]
    zone = args.string("timezone", limit=64)
    if zone is not None:
        try:
            there = utc.astimezone(ZoneInfo(zone))
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise ToolError(
                f"Unknown timezone {zone!r}: use an IANA name, e.g. 'Europe/Paris'."
            ) from None
        out.append(f"{zone}: {there.isoformat(timespec='seconds')} ({there.tzname()})")
    out.append(f"unix: {int(moment)}")
    return "\n".join(out)


TOOLS = (
    Tool(
        "activity__search_activity",
        "Search the activity log",
        "The requests modelswap served, newest first, each with its model, status, outcome, "
        "timings and tokens. Filters: model, request_id, status, "
        "outcome (ok|error|stopped|preflight), since (unix seconds), session_id; page with "
        "`before` (the smallest id of the last page).",
        search_activity,
        properties={
            "model": {"type": "string"},
            "request_id": {"type": "string"},
            "status": {"type": "integer"},
            "outcome": {"type": "string", "enum": sorted(OUTCOMES)},
            "since": {"type": "number", "description": "unix seconds"},
            "session_id": {"type": "string"},
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_ROWS},
            "before": {"type": "integer"},
        },
        idempotent=False,
        hint="Ask for fewer rows (limit) or filter.",
    ),
    Tool(
        "logs__tail_log",
        "Read a log's tail",
        "The last lines of a model's log (its backend's output), or of the gateway's own log "
        "without `model`; secrets masked.",
        tail_log,
        properties={
            "model": {"type": "string", "description": "A model id; none: the gateway's log."},
            "lines": {"type": "integer", "minimum": 1, "maximum": MAX_LINES},
        },
        idempotent=False,
    ),
    Tool(
        "queue__show_queue",
        "Show the queue",
        "Every request waiting, in the order it would be served: its key's name, class and "
        "weight, its model, what it waits for (start, swap, drain, concurrencyLimit, "
        "maxInFlight, turn), its place, how long it has waited and the estimated wait; and each "
        "key's use against its limits (remaining requests and tokens).",
        show_queue,
        idempotent=False,
    ),
    Tool(
        "sys__now",
        "Current date and time",
        "The date and time on the machine modelswap runs on: UTC, local, and in `timezone` "
        "(an IANA name) if given.",
        now,
        properties={"timezone": {"type": "string", "description": "e.g. 'Asia/Tokyo'"}},
        idempotent=False,
    ),
)
