"""``GET /api/plan?model=ID``: the fit planner for a configured model (read scope), and the
plan-versus-receipt fields ``/running`` shows for ready models. ``GET /api/models/{id}/dry-run``:
the load dry run (``routing/prediction.py``; docs/predicting-swaps.md), read scope too.

Only configured models are planned over HTTP — never a path a client names — so the route
reads no file the configuration does not already point at. Query parameters mirror
``modelswap plan``: ``gpu``, ``utilization``, ``max_model_len``, ``kv_dtype``,
``max_num_seqs``, ``tensor_parallel_size``, ``engine``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from modelswap.errors import BadRequestError
from modelswap.http.app_keys import RUNTIME, client_key
from modelswap.http.route_table import READ, declare
from modelswap.planner.from_config import plan_command
from modelswap.planner.gpu import detect_gpu, parse_gpu
from modelswap.planner.hf import ModelReadError
from modelswap.planner.names import ENGINES
from modelswap.planner.render import plan_dict

_PARAMS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "utilization": ("utilization", float),
    "max_model_len": ("max_model_len", int),
    "kv_dtype": ("kv_dtype", str),
    "max_num_seqs": ("max_num_seqs", int),
    "tensor_parallel_size": ("tensor_parallel", int),
    "engine": ("engine", str),
}


def _overrides(query: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (field, kind) in _PARAMS.items():
        if name not in query:
            continue
        try:
            out[field] = kind(query[name])
        except ValueError as exc:
            raise BadRequestError(f"`{name}` is not valid: {query[name]!r}.", param=name) from exc
    if "engine" in out and out["engine"] not in ENGINES:
        raise BadRequestError(f"`engine` must be one of {', '.join(ENGINES)}.", param="engine")
    if "gpu" in query:
        try:
            out["gpu_bytes"], out["gpu_source"] = parse_gpu(query["gpu"]), "gpu parameter"
        except ValueError as exc:
            raise BadRequestError(f"`gpu` is not a size: {exc}", param="gpu") from exc
    return out


async def plan(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    name = request.query.get("model")
    if not name:
        raise BadRequestError("Name a configured model: /api/plan?model=ID.", param="model")
    model = runtime.resolve(name, client_key(request))
    overrides = _overrides(request.query)
    if "gpu_bytes" not in overrides:
        gpu = await asyncio.to_thread(detect_gpu)
        if gpu is not None:
            overrides["gpu_bytes"], overrides["gpu_source"] = gpu
    try:
        found = await asyncio.to_thread(plan_command, model.cmd, overrides)
    except (ModelReadError, ValueError, OSError, KeyError, TypeError) as exc:
        raise BadRequestError(f"Cannot plan {model.id}: {exc}", param="model") from exc
    if found is None:
        raise BadRequestError(
            f"The command line of {model.id} names no local model folder or GGUF file.",
            param="model",
        )
    return web.json_response(
        _masked({"model_id": model.id, **plan_dict(found)}, runtime.redactor.text)
    )


async def dry_run(request: web.Request) -> web.Response:
    """What loading the model would do now: evictions and why, memory, time, fit. Starts and
    stops nothing."""
    runtime = request.app[RUNTIME]
    model = runtime.resolve(request.match_info["model"], client_key(request))
    prediction = await runtime.dry_run(model.id)
    return web.json_response(runtime.redactor.data(prediction.to_json()))


def _masked(value: Any, text: Callable[[str], str]) -> Any:
    """Known secrets masked in every string (paths, notes). Numbers are left alone: keys such
    as ``kv_bytes_per_token`` would look secret to the key-based masking of ``data``."""
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {k: _masked(v, text) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, text) for v in value]
    return value


def add_routes(app: web.Application) -> None:
    declare(app, "GET", "/api/plan", plan, READ)
    declare(app, "GET", "/api/models/{model:.+}/dry-run", dry_run, READ)
