"""What ``GET /v1/models`` and ``GET /running`` say about each model.

The rules: docs/architecture.md, "The catalog".
"""

from __future__ import annotations

import asyncio
import shlex
import time
from typing import Any

from modelswap.config.resolved import ApiKey
from modelswap.observe.capabilities import listing_fields
from modelswap.planner.accuracy import running_fields
from modelswap.runtime import ModelStatus, Runtime
from modelswap.states import ProcessState


def model_rows(runtime: Runtime, key: ApiKey | None = None) -> list[dict[str, Any]]:
    """One row per listed model ``key`` may use, then (with ``includeAliasesInList``, as in
    llama-swap) one per alias (``alias_for``)."""
    rows: list[dict[str, Any]] = []
    created = int(runtime.started_at)
    for model in runtime.config.models.values():
        if model.unlisted or (key is not None and not key.allows(model)):
            continue
        status = runtime.model(model.id)
        row = _row(model.id, created, state=status.state.value, status=router_status(status.state))
        _named(row, model.name, model.description)
        if model.aliases:
            row["aliases"] = list(model.aliases)
        row.update(reported_context(status))
        # What it can do, as llama-swap lists it: written, else remembered (``observed``).
        row.update(listing_fields(model.capabilities, runtime.remembered(model)))
        if model.metadata:  # as llama-swap shows it, beside what the backend reported
            metadata = runtime.redactor.data(dict(model.metadata))  # masked like every listing
            row["meta"] = {**row.get("meta", {}), "llamaswap": metadata}
        if configured := status.configured().as_dict():
            row["configured"] = configured
        row.update(stop_fields(runtime, status))
        rows.append(row)
        if runtime.config.include_aliases_in_list:
            rows += alias_rows(row, model.aliases)
    return rows + selector_rows(runtime, created, key)


def _row(model_id: str, created: int, owned_by: str = "modelswap", **fields: Any) -> dict[str, Any]:
    """A row's start, as OpenAI's model object has it; ``fields`` after."""
    return {"id": model_id, "object": "model", "created": created, "owned_by": owned_by, **fields}


def _named(row: dict[str, Any], name: str | None, description: str | None) -> None:
    """``name`` and ``description`` where configured (omitted, never empty)."""
    if name:
        row["name"] = name
    if description:
        row["description"] = description


# llama.cpp's router (llama-server --models-dir) lists each model with ``status.value``; Open
# WebUI's llama.cpp connection reads it to show which models are loaded.
_ROUTER_STATUS = {
    ProcessState.READY: "loaded",
    ProcessState.STARTING: "loading",
    ProcessState.SLEEPING: "sleeping",
}


def router_status(state: ProcessState) -> dict[str, Any]:
    """``state`` as llama.cpp's router says it: loaded, loading, sleeping, else unloaded (a
    failed start also with ``failed: true``, as the router marks one)."""
    status: dict[str, Any] = {"value": _ROUTER_STATUS.get(state, "unloaded")}
    if state is ProcessState.FAILED:
        status["failed"] = True
    return status


def selector_rows(runtime: Runtime, created: int, key: ApiKey | None) -> list[dict[str, Any]]:
    """One row per listed selector (llama-swap's virtual model ids) whose targets ``key`` may
    name: what it is and which targets it chooses from."""
    rows: list[dict[str, Any]] = []
    for selector in runtime.config.selectors.values():
        if selector.unlisted or (
            key is not None and not key.allows_names((selector.id, *selector.targets))
        ):
            continue
        chooses = {"strategy": selector.strategy, "targets": list(selector.targets)}
        row = _row(selector.id, created, selector=chooses)
        _named(row, selector.name, selector.description)
        rows.append(row)
    return rows


def alias_rows(row: dict[str, Any], aliases: tuple[str, ...]) -> list[dict[str, Any]]:
    """One row per alias: the model's own row — its state and the context its backend
    reported included, since an alias is served by the same process — named after the alias,
    with ``alias_for`` instead of the ``aliases`` list."""
    out: list[dict[str, Any]] = []
    for alias in aliases:
        alias_row = {key: value for key, value in row.items() if key != "aliases"}
        alias_row.update(id=alias, alias_for=row["id"])
        out.append(alias_row)
    return out


def stop_fields(runtime: Runtime, model: ModelStatus) -> dict[str, Any]:
    """What a model's row says about its last swap and, while it is stopped or asleep, why
    (issue 32 #2): the receipt of the last swap to it outlives an unload, and an evicted
    model names the start it made room for and how that went. With ``promptCache`` on, what
    its restores proved (issue 38: ``prompt_cache``)."""
    out: dict[str, Any] = {}
    last_swap = model.last_swap()
    if last_swap is not None:
        out["last_swap"] = runtime.redactor.data(last_swap)
    verdict = model.prompt_cache()
    if verdict is not None:
        out["prompt_cache"] = verdict
    stopped = model.state in (ProcessState.STOPPED, ProcessState.SLEEPING)
    if stopped and model.last_stop is not None:
        out["last_stop"] = model.last_stop.as_dict()
    return out


def reported_context(model: ModelStatus) -> dict[str, Any]:
    """The context the running backend itself reported — only for a ready model whose probe
    succeeded. Otherwise nothing at all: omitted, never null, never a guess from the config."""
    found = model.reported
    if not model.ready or found is None or found.context_length is None:
        return {}
    meta: dict[str, int] = {"n_ctx": found.context_length}
    if found.n_ctx_train is not None:
        meta["n_ctx_train"] = found.n_ctx_train
    return {
        "max_model_len": found.context_length,
        "context_length": found.context_length,
        "meta": meta,
    }


def context_mismatch(model: ModelStatus) -> str | None:
    """A note when the backend serves less context than its command line asked for."""
    reported = model.reported.context_length if model.reported else None
    configured = model.configured().context
    if reported is None or configured is None or reported >= configured:
        return None
    return (
        f"the backend reports {reported} tokens of context per request, but its command line "
        f"asked for {configured}"
    )


def running_rows(runtime: Runtime) -> list[dict[str, Any]]:
    """Every model that is not stopped: state, since when, load; the command line (redacted)
    and proxy, as llama-swap shows them; no pid."""
    now_loop = _loop_time()
    rows: list[dict[str, Any]] = []
    for model in runtime.models():
        if model.state is ProcessState.STOPPED:
            continue
        config = model.config
        row: dict[str, Any] = {
            "model": model.model,
            "state": model.state.value,
            # llama-swap's fields (redacted below, as the whole row is)
            "cmd": shlex.join(runtime.redactor.argv(config.cmd)),
            "proxy": runtime.redactor.url(config.proxy),
            "name": config.name or "",
            "description": config.description or "",
            "since": _iso(model.since),
            "ttl": config.ttl,
            "in_flight": model.in_flight(),
            "queued": model.queued(),
        }
        deadline = model.idle_deadline()
        if deadline is not None and now_loop is not None:
            row["unload_in"] = round(max(0.0, deadline - now_loop), 1)
        if model.started_at is not None and model.ready_at is not None:
            row["start_seconds"] = round(model.ready_at - model.started_at, 3)
        if model.state is ProcessState.STARTING:
            row.update(_start_progress(model))
        # where the last swap's time went (issue 21); why it sleeps (evicted for …)
        row.update(stop_fields(runtime, model))
        row.update(reported_context(model))
        if model.ready and model.reported is not None:
            row["reported"] = model.reported.as_dict()
        if configured := model.configured().as_dict():
            row["configured"] = configured
        mismatch = context_mismatch(model) if model.ready else None
        if mismatch:
            row["context_mismatch"] = mismatch
        if model.ready and model.receipt is not None and (capacity := model.receipt.as_dict()):
            row["capacity"] = capacity
        if model.last_failure is not None:
            row["last_failure"] = _failure(model)
        redacted = runtime.redactor.data(row)  # progress lines and phases quote the backend
        assert isinstance(redacted, dict)
        rows.append(redacted)
    return rows


def _failure(model: ModelStatus) -> dict[str, Any]:
    """The diagnosis, when it happened and, while the model is failed, how long the same
    answer is given before the next request retries the start (``failureBackoff``)."""
    assert model.last_failure is not None
    out: dict[str, Any] = model.last_failure.as_dict()
    if model.state is ProcessState.FAILED:
        out["at"] = round(model.since, 3)
        left = model.config.failure_backoff - (time.time() - model.since)
        out["retry_in"] = round(max(0.0, left), 1)
    return out


def _start_progress(model: ModelStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"phase": model.start_phase()}
    if model.progress is not None and model.progress.fraction is not None:
        out["progress"] = round(model.progress.fraction, 4)
    if model.last_progress_at is not None:
        out["last_progress_at"] = _iso(model.last_progress_at)
    if model.last_progress_line is not None:
        out["last_progress_line"] = model.last_progress_line
    if model.started_at is not None:
        out["elapsed"] = round(time.time() - model.started_at, 1)
    return out


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _loop_time() -> float | None:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return None


def peer_rows(runtime: Runtime, key: ApiKey | None = None) -> list[dict[str, Any]]:
    """One row per peer model ``key`` may use, named ``peerID/model``. No runtime fields: a
    peer's state and context are its own to report (docs/architecture.md, "The catalog")."""
    created = int(runtime.started_at)
    return [
        _row(route.label, created, route.peer.id, peer=route.peer.id)
        for route in runtime.visible_routes(key)
    ]


def model_row(runtime: Runtime, model_id: str, key: ApiKey | None = None) -> dict[str, Any] | None:
    """The row ``GET /v1/models`` lists under ``model_id`` (a model, an alias or a peer model
    ``key`` may use), or None: one model is exactly what the list says about it. An alias has
    its row (``alias_for``) whether or not the list shows alias rows."""
    rows = model_rows(runtime, key)
    for row in rows + peer_rows(runtime, key):
        if row["id"] == model_id:
            return row
    for row in rows:
        if model_id in row.get("aliases", ()):
            return alias_rows(row, (model_id,))[0]
    return None


def add_plan_fields(runtime: Runtime, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``plan`` and ``plan_error_pct`` on the ``/running`` rows of ready models that have both
    a plan and a capacity receipt (omitted otherwise, never null)."""
    for row in rows:
        model = runtime.find_model(str(row.get("model")))
        if model is None or not model.ready:
            continue
        row.update(running_fields(model.plan(), model.receipt))
    return rows
