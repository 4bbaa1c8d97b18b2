"""What ``GET /v1/models`` and ``GET /running`` say about each model (DESIGN §5)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from modelswap.runtime import Runtime
from modelswap.states import ProcessState


def model_rows(runtime: Runtime) -> list[dict[str, Any]]:
    """One row per listed model, then one per alias (``alias_for`` names the model)."""
    rows: list[dict[str, Any]] = []
    created = int(runtime.started_at)
    router = runtime.router
    for model in runtime.config.models.values():
        if model.unlisted:
            continue
        row: dict[str, Any] = {
            "id": model.id,
            "object": "model",
            "created": created,
            "owned_by": "modelswap",
            "state": router.processes[model.id].state.value,
        }
        if model.name:
            row["name"] = model.name
        if model.description:
            row["description"] = model.description
        if model.aliases:
            row["aliases"] = list(model.aliases)
        rows.append(row)
        for alias in model.aliases:
            alias_row = {key: value for key, value in row.items() if key != "aliases"}
            alias_row.update(id=alias, alias_for=model.id)
            rows.append(alias_row)
    return rows


def running_rows(runtime: Runtime) -> list[dict[str, Any]]:
    """Every model that is not stopped: state, since when, load; no pid, no command line."""
    router = runtime.router
    now_loop = _loop_time()
    rows: list[dict[str, Any]] = []
    for model_id, process in router.processes.items():
        if process.state is ProcessState.STOPPED:
            continue
        row: dict[str, Any] = {
            "model": model_id,
            "state": process.state.value,
            "since": _iso(process.since),
            "ttl": process.config.ttl,
            "in_flight": router.in_flight(model_id),
            "queued": router.queued(model_id),
        }
        deadline = router.idle_deadline(model_id)
        if deadline is not None and now_loop is not None:
            row["unload_in"] = round(max(0.0, deadline - now_loop), 1)
        if process.started_at is not None and process.ready_at is not None:
            row["start_seconds"] = round(process.ready_at - process.started_at, 3)
        if process.last_failure is not None:
            row["last_failure"] = process.last_failure.as_dict()
        rows.append(row)
    return rows


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _loop_time() -> float | None:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return None
