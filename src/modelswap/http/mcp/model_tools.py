"""The models as tools: what each is and does now, why one stopped, the last swaps, what a load
would do (the dry run) — read scope; load, unload and the config's reload — admin scope, through
the same runtime calls as ``POST /api/models/load/{id}``, ``/unload`` and SIGHUP.

Every model is named as the key in use may name it (``Runtime.resolve(name, key)``): one the key
may not use is unknown here too.
"""

from __future__ import annotations

import time
from typing import Any

from modelswap.http.catalog import model_row, model_rows, running_rows
from modelswap.http.mcp.registry import ADMIN, Args, Caller, Tool, ToolError
from modelswap.runtime import ModelStatus
from modelswap.states import ProcessState

MEMORY_FIELDS = frozenset({"kv_cache_gib", "weights_gib", "kv_cache_mib"})
DEFAULT_SWAPS, MAX_SWAPS = 10, 50
DETAILS = (
    *("since", "in_flight", "queued", "start_seconds", "phase", "progress", "reported"),
    *("configured", "context_mismatch", "last_failure"),
)
MODEL_ARG = {"model": {"type": "string", "description": "A model id or alias."}}


def _status(caller: Caller, name: str) -> ModelStatus:
    return caller.runtime.model(caller.runtime.resolve(name, caller.key).id)


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _details(caller: Caller, model_id: str) -> dict[str, Any]:
    """What ``/running`` adds for a model that is not stopped: the backend's capacity receipt
    (its memory figures left to the dry run and ``/api/memory``), what it reported, the last
    failure."""
    for row in running_rows(caller.runtime):
        if row.get("model") != model_id:
            continue
        out: dict[str, Any] = {k: row[k] for k in DETAILS if k in row}
        capacity = row.get("capacity")
        if isinstance(capacity, dict):
            out["capacity"] = {k: v for k, v in capacity.items() if k not in MEMORY_FIELDS}
        return out
    return {}


async def list_models(caller: Caller, args: Args) -> object:
    name = args.string("model")
    if name is None:
        rows = model_rows(caller.runtime, caller.key)
        return {"models": rows, "note": "models__list_models with `model` gives one in full."}
    model = caller.runtime.resolve(name, caller.key)
    row = model_row(caller.runtime, model.id, caller.key) or {"id": model.id}
    return {**row, **_details(caller, model.id)}


async def why_stopped(caller: Caller, args: Args) -> object:
    status = _status(caller, args.required("model", "models__list_models names them."))
    out: dict[str, Any] = {
        "model": status.model,
        "state": status.state.value,
        "since": _iso(status.since),
    }
    stop = status.last_stop
    if status.state not in (ProcessState.STOPPED, ProcessState.SLEEPING):
        out["answer"] = f"{status.model} has not stopped: it is {status.state.value}."
    elif stop is not None:
        out["answer"] = stop.summary()
        out["last_stop"] = stop.as_dict()
    elif status.last_failure is not None:
        out["answer"] = f"its start failed: {status.last_failure.message()}"
    else:
        out["answer"] = f"{status.model} has not run since modelswap started."
    if status.last_failure is not None:
        out["last_failure"] = status.last_failure.as_dict()
    last_swap = status.last_swap()
    if last_swap is not None:
        out["last_swap"] = last_swap
    return out


async def last_swaps(caller: Caller, args: Args) -> object:
    runtime = caller.runtime
    limit = args.integer("limit", DEFAULT_SWAPS, 1, MAX_SWAPS)
    name = args.string("model")
    if name is not None:
        statuses = [_status(caller, name)]
    else:
        visible = set(runtime.visible_names(caller.key))
        statuses = [m for m in runtime.models() if m.model in visible]
    swaps = [s for m in statuses if (s := m.last_swap()) is not None]
    swaps.sort(key=lambda s: -float(s.get("at") or 0))
    return {"swaps": swaps[:limit], "shown": min(limit, len(swaps)), "of": len(swaps)}


async def dry_run(caller: Caller, args: Args) -> object:
    """``Runtime.dry_run`` (issue 39's load dry run): plans, starts and stops nothing."""
    runtime = caller.runtime
    model = runtime.resolve(args.required("model", "models__list_models names them."), caller.key)
    predict = getattr(runtime, "dry_run", None)
    if predict is None:
        raise ToolError("This modelswap has no load dry run.")
    prediction = await predict(model.id)
    return prediction.to_json()


async def load_model(caller: Caller, args: Args) -> object:
    """As ``POST /api/models/load/{id}``: groups and budgets apply, as for a request."""
    model = caller.runtime.resolve(
        args.required("model", "models__list_models names them."), caller.key
    )
    await caller.runtime.load(model.id)
    return {"loaded": model.id, "state": caller.runtime.model(model.id).state.value}


async def unload_model(caller: Caller, args: Args) -> object:
    """As ``POST /api/models/unload[/{id}]``: one model, or every one without ``model``."""
    name = args.string("model")
    if name is None:
        return {"unloaded": await caller.runtime.unload(None)}
    model = caller.runtime.resolve(name, caller.key)
    return {"unloaded": await caller.runtime.unload([model.id])}


async def reload_config(caller: Caller, args: Args) -> object:
    """As SIGHUP: the config file read, checked and applied; a rejected one changes nothing."""
    if caller.reload is None:
        raise ToolError("This gateway has no config file to reload (it serves the built-in demo).")
    runtime = caller.runtime
    events = runtime.subscribe()  # the rejection's problems come as a config.rejected event
    try:
        report = caller.reload()
        problems: list[str] = []
        while not events.empty():
            event = events.get_nowait()
            if event.kind == "config.rejected":
                problems = [str(p) for p in event.data.get("problems", [])]
    finally:
        runtime.unsubscribe(events)
    if report is None:
        raise ToolError(
            "The config file was rejected; the running config stays. Problems: "
            + ("; ".join(problems) or "see logs__tail_log")
        )
    return {"reloaded": True, **report.as_dict()}


READ_TOOLS = (
    Tool(
        "models__list_models",
        "List the models",
        "Every model the key may use: state (ready, starting, stopped, sleeping, failed), what "
        "it can do (capabilities), its last swap's receipt (where the time went) and, when "
        "stopped, why. With `model`: that one in full, with the backend's capacity receipt.",
        list_models,
        properties=MODEL_ARG,
        idempotent=False,
        hint="Ask for one model with `model`.",
    ),
    Tool(
        "models__why_stopped",
        "Why a model stopped",
        "Why a model is not running: evicted (for which model, and how that start went), idle "
        "(ttl), unloaded, or its start failed (the diagnosis and the fix).",
        why_stopped,
        properties=MODEL_ARG,
        required=("model",),
        idempotent=False,
    ),
    Tool(
        "swaps__last_swaps",
        "The last swaps",
        "The newest swap to each model, newest first: what was drained and stopped, how long "
        "the start took, the first byte after it.",
        last_swaps,
        properties={
            **MODEL_ARG,
            "limit": {"type": "integer", "minimum": 1, "maximum": MAX_SWAPS},
        },
        idempotent=False,
        hint="Ask for fewer (limit) or one model.",
    ),
)
DRY_RUN = Tool(
    "models__dry_run",
    "Predict a load",
    "What loading a model would do now, without starting or stopping anything: whether it fits, "
    "what it would evict and why, which of those are busy, the memory and time it is predicted "
    "to take and where those figures come from.",
    dry_run,
    properties=MODEL_ARG,
    required=("model",),
    idempotent=False,
)
ADMIN_TOOLS = (
    Tool(
        "models__load_model",
        "Load a model",
        "Start a model now (groups and budgets apply: it may evict others), and wait until it "
        "is ready. models__dry_run says first what it would evict.",
        load_model,
        properties=MODEL_ARG,
        required=("model",),
        scope=ADMIN,
        read_only=False,
    ),
    Tool(
        "models__unload_model",
        "Unload a model",
        "Stop a model (requests in flight finish first); every model without `model`.",
        unload_model,
        properties=MODEL_ARG,
        scope=ADMIN,
        read_only=False,
    ),
    Tool(
        "config__reload_config",
        "Reload the config file",
        "Read the config file again and apply what changed, as SIGHUP does; a file that does "
        "not load is rejected with its problems and the running config stays.",
        reload_config,
        scope=ADMIN,
        read_only=False,
        idempotent=False,
    ),
)
