"""llama-swap's activity API over modelswap's activity log: ``GET /api/captures/{id}``,
``GET /api/metrics/activity`` and ``GET /api/metrics/stats``, in its shapes and with its error
messages (internal/server/apigroup.go, internal/store/store.go).

A capture exists only for rows recorded with ``activity.capture`` on (bodies bounded by
``captureBytes``, secrets redacted); its ``req_body``/``resp_body`` are base64, as Go encodes
``[]byte``. Rows carry llama-swap's fields, with modelswap's beside them; the fields modelswap
does not measure (draft tokens, prompt speed) are 0, which llama-swap's UI reads as
"not reported".
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
from datetime import UTC, datetime

from aiohttp import web

from modelswap.http.app_keys import RUNTIME
from modelswap.http.error_responses import error_response
from modelswap.http.route_table import READ, declare
from modelswap.observe.activity import PageQuery
from modelswap.observe.histogram import histogram

DEFAULT_LIMIT = 25
# llama-swap's sort keys (its UI's column ids) -> the activity log's columns
SORT_KEYS = {
    "id": "id",
    "time": "at",
    "model": "model",
    "req_path": "route",
    "resp_status_code": "status",
    "resp_content_type": "streamed",
    "prompt": "prompt_tokens",
    "generated": "completion_tokens",
    "gen_speed": "tokens_per_second",
    "duration": "duration",
    "cached": "cached_tokens",
    # not measured by modelswap (always 0): the order is by id
    "drafted": "id",
    "prompt_speed": "id",
}


class QueryError(ValueError):
    """A query parameter llama-swap refuses (its message is the error's)."""


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")


def _unix(text: str, name: str) -> float:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise QueryError(f"invalid '{name}' timestamp, use RFC3339 format") from None


def _int(value: object) -> int:
    return int(value) if isinstance(value, int | float) else 0


def activity_entry(row: dict[str, object]) -> dict[str, object]:
    """One activity row as llama-swap's ``ActivityLogEntry``, modelswap's fields beside."""
    at = row["at"]
    duration = row["duration"]
    speed = row.get("tokens_per_second")
    entry: dict[str, object] = {
        "id": row["id"],
        "timestamp": _rfc3339(float(at)) if isinstance(at, int | float) else "",
        "model": row.get("model") or "",
        "req_path": row["route"],
        "resp_content_type": "text/event-stream" if row.get("streamed") else "application/json",
        "resp_status_code": row["status"],
        "tokens": {
            "cache_tokens": _int(row.get("cached_tokens")),
            "draft_tokens": 0,
            "draft_acc_tokens": 0,
            "input_tokens": _int(row.get("prompt_tokens")),
            "output_tokens": _int(row.get("completion_tokens")),
            "prompt_per_second": 0,
            "tokens_per_second": speed if isinstance(speed, int | float) else 0,
        },
        "duration_ms": round(float(duration) * 1000) if isinstance(duration, int | float) else 0,
        "has_capture": "request_body" in row or "response_body" in row,
    }
    if row.get("error_code"):
        entry["error_msg"] = row["error_code"]
    names = ("request_id", "key_name", "requested", "ttft", "load", "bytes_in", "bytes_out")
    for name in (*names, "error_code", "outcome"):
        entry[name] = row.get(name)
    if row.get("metadata"):  # the Swap Policy Language's context.<key> values
        entry["metadata"] = row["metadata"]
    return entry


def _positive(request: web.Request, name: str, message: str) -> int | None:
    raw = request.query.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise QueryError(message) from None
    if value < 1:
        raise QueryError(message)
    return value


def page_query(request: web.Request) -> tuple[PageQuery, int, int]:
    """The query, its page number and limit, read as llama-swap reads them."""
    q = request.query
    models = tuple(m.strip() for m in q.getall("model", []) if m.strip())
    start = _unix(q["start"].strip(), "start") if q.get("start", "").strip() else None
    end = _unix(q["end"].strip(), "end") if q.get("end", "").strip() else None
    if start is not None and end is not None and start > end:
        raise QueryError("start must be before end")
    min_id = _positive(request, "min_id", "min_id must be >= 1")
    max_id = _positive(request, "max_id", "max_id must be >= 1")
    if min_id is not None and max_id is not None and min_id > max_id:
        raise QueryError("min_id must be <= max_id")
    limit = DEFAULT_LIMIT
    if raw := q.get("limit", "").strip():
        try:
            limit = int(raw)
        except ValueError:
            raise QueryError("invalid limit") from None
        if not 0 < limit < 1000:
            raise QueryError("limit must be between 1 and 999")
    page = _positive(request, "page", "page must be >= 1") or 1
    sort = q.get("sort", "").strip() or "id"
    if sort not in SORT_KEYS:
        raise QueryError("invalid sort column")
    order = q.get("order", "").strip().lower() or "desc"
    if order not in ("asc", "desc"):
        raise QueryError("order must be asc or desc")
    query = PageQuery(
        models=models,
        start=start,
        end=end,
        min_id=min_id,
        max_id=max_id,
        sort=SORT_KEYS[sort],
        ascending=order == "asc",
        limit=limit,
        offset=(page - 1) * limit,
    )
    return query, page, limit


async def metrics_activity(request: web.Request) -> web.Response:
    """``{"data", "page", "limit", "total", "total_pages"}``; newest first by default."""
    runtime = request.app[RUNTIME]
    try:
        query, page, limit = page_query(request)
    except QueryError as exc:
        return error_response(str(exc), 400, code="bad_request")
    store = runtime.activity
    rows: list[dict[str, object]] = []
    total = 0
    if store is not None:

        def read() -> tuple[list[dict[str, object]], int]:  # SQLite off the event loop
            store.flush_now()
            return store.page(query)

        rows, total = await asyncio.to_thread(read)
    body = {
        "data": [activity_entry(row) for row in rows],
        "page": page,
        "limit": limit,
        "total": total,
        "total_pages": math.ceil(total / limit) if total else 0,
    }
    return web.json_response(runtime.redactor.data(body))


async def metrics_stats(request: web.Request) -> web.Response:
    """Totals and the generation-speed histogram (``?model=`` for one model)."""
    runtime = request.app[RUNTIME]
    model = request.query.get("model", "").strip() or None
    store = runtime.activity
    count, prompt, completion, cached = 0, 0, 0, 0
    speeds: list[float] = []
    if store is not None:

        def read() -> tuple[int, int, int, int, list[float]]:
            store.flush_now()
            return store.totals(model)

        count, prompt, completion, cached, speeds = await asyncio.to_thread(read)
    return web.json_response(
        {
            "total_requests": count,
            "total_input_tokens": prompt,
            "total_output_tokens": completion,
            "total_cache_tokens": cached,
            "prompt_histogram": None,  # prompt speed is not measured
            "gen_histogram": histogram(speeds),
        }
    )


def _b64(text: object) -> str:
    return base64.b64encode(text.encode()).decode() if isinstance(text, str) else ""


def _headers(text: object) -> dict[str, str]:
    if not isinstance(text, str):
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


async def capture(request: web.Request) -> web.Response:
    """llama-swap's ``ReqRespCapture`` of one activity row: 400 ``invalid capture ID``, 404
    ``capture not found`` (no such row, or it was recorded with capture off)."""
    runtime = request.app[RUNTIME]
    raw = request.match_info["id"]
    if not raw.isascii() or not raw.lstrip("-").isdigit() or len(raw) > 18:
        return error_response("invalid capture ID", 400, code="bad_request")
    wanted = int(raw)
    store = runtime.activity
    row = None
    if store is not None and wanted > 0:

        def read() -> list[dict[str, object]]:
            store.flush_now()
            return store.page(PageQuery(min_id=wanted, max_id=wanted, limit=1))[0]

        found = await asyncio.to_thread(read)
        row = found[0] if found else None
    if row is None or not ({"request_body", "response_body"} & set(row)):
        return error_response("capture not found", 404, code="not_found")
    redact = runtime.redactor.text
    return web.json_response(
        {
            "id": row["id"],
            "req_path": row["route"],
            "req_headers": _headers(row.get("request_headers")),
            "req_body": _b64(redact(str(row.get("request_body") or ""))),
            "resp_headers": _headers(row.get("response_headers")),
            "resp_body": _b64(redact(str(row.get("response_body") or ""))),
            "request_id": row.get("request_id"),
        }
    )


def add_routes(app: web.Application) -> None:
    declare(app, "GET", "/api/captures/{id}", capture, READ)
    declare(app, "GET", "/api/metrics/activity", metrics_activity, READ)
    declare(app, "GET", "/api/metrics/stats", metrics_stats, READ)
