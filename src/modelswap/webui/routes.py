"""``/ui/``: the web UI's static files (shipped inside the package), and the view its Memory
page draws (:func:`memory_view`, served as ``GET /api/memory`` by ``http/routes/observe``).

The pages are plain HTML/CSS/JS with no build step and no external requests. Every API call
they make carries the key the user typed; the files themselves are open (they hold no data).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from aiohttp import web

from modelswap.runtime import Runtime
from modelswap.states import ProcessState

STATIC = Path(__file__).parent / "static"
GIB = 1024**3
MIB = 1024**2
# Budgets named like host memory; every other budget is taken to be a GPU's memory.
HOST_RESOURCES = frozenset({"ram", "cpu", "mem", "memory", "host", "swap"})
SHOWN_STATES = (
    ProcessState.READY,
    ProcessState.STARTING,
    ProcessState.STOPPING,
    ProcessState.SLEEPING,
)


async def ui_redirect(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/ui/")


async def ui_index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})


def gpu_utilization(cmd: tuple[str, ...] | list[str]) -> float | None:
    """vLLM's ``--gpu-memory-utilization`` from a command line (``X`` or ``=X``), if set."""
    args = list(cmd)
    if len(args) == 1:  # a single string that was not split (defensive)
        try:
            args = shlex.split(args[0])
        except ValueError:
            return None
    for i, arg in enumerate(args):
        value: str | None = None
        if arg == "--gpu-memory-utilization" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--gpu-memory-utilization="):
            value = arg.split("=", 1)[1]
        if value is not None:
            try:
                fraction = float(value)
            except ValueError:
                return None
            return fraction if 0 < fraction <= 1 else None
    return None


def _is_gpu(resource: str) -> bool:
    return resource.lower() not in HOST_RESOURCES


def _receipt_note(source: str, charged: int, receipt: int) -> str:
    """How a backend's receipt stands beside what the scheduler charges for the model."""
    if not charged:
        return (
            f"the scheduler counts 0 (nothing declared or measured); the backend's receipt "
            f"says {receipt / GIB:.2f} GiB"
        )
    side = "more than" if receipt > charged else "within"
    return (
        f"counted as {source} ({charged / GIB:.2f} GiB); the backend's receipt "
        f"({receipt / GIB:.2f} GiB: weights + KV) is {side} it"
    )


def memory_view(runtime: Runtime) -> dict[str, Any]:
    """Per budget: its total, each loaded (or loading) model's share as the scheduler counts
    it (``bytes``: declared, else measured — what the budgets charge), the backend's receipt
    beside it (``receipt_bytes``, weights + KV), and utilisation limits."""
    config = runtime.config
    resources: list[dict[str, Any]] = []
    for name, total in config.scheduling.resources.items():
        gpu = _is_gpu(name)
        models: list[dict[str, Any]] = []
        limits: list[dict[str, Any]] = []
        for status in runtime.models():
            model_id, state = status.model, status.state
            if state not in SHOWN_STATES or (state is ProcessState.SLEEPING and gpu):
                continue
            model = config.models[model_id]
            row: dict[str, Any] = {"model": model_id, "state": state.value}
            # The band is what the scheduler charges (runtime.uses: declared, else the
            # measured peak): the "free" beside it is the room a start really has. A
            # backend's receipt is the detail, never the band (issue 41 #1).
            declared = model.uses.get(name)
            charged = runtime.uses(model_id).get(name, 0)
            row["bytes"] = charged
            row["source"] = "declared" if declared is not None else "measured"
            cap = status.receipt if state is ProcessState.READY else None
            if gpu and cap is not None and cap.weights_gib is not None and cap.kv_cache_gib:
                weights = int(cap.weights_gib * GIB)
                kv = int(cap.kv_cache_gib * GIB)
                row.update(receipt_bytes=weights + kv, weights_bytes=weights, kv_bytes=kv)
                row["source_note"] = _receipt_note(row["source"], charged, weights + kv)
            elif cap is not None and cap.kv_cache_mib is not None and charged:
                # llama.cpp reports only its KV cache: the rest is the total less KV,
                # never a measured weights size (a 92 MiB file is not "0.54 GiB weights").
                kv = min(charged, int(cap.kv_cache_mib * MIB))
                row.update(weights_bytes=charged - kv, kv_bytes=kv)
                row["weights_label"] = f"rest ({row['source']} − KV)"
                row["source_note"] = (
                    f"total {row['source']}; KV from the backend's receipt; the rest is "
                    "the total less KV, not a measured weights size"
                )
            if not row["bytes"] and "receipt_bytes" not in row:
                continue  # nothing declared, measured or reported (yet): nothing to draw
            models.append(row)
            fraction = gpu_utilization(model.cmd) if gpu else None
            if fraction is not None:
                limits.append(
                    {"model": model_id, "fraction": fraction, "bytes": int(fraction * total)}
                )
        entry: dict[str, Any] = {"name": name, "total_bytes": total, "models": models}
        if limits:
            entry["limits"] = limits
            entry["limit_bytes"] = min(limit["bytes"] for limit in limits)
        resources.append(entry)
    # Every configured model in the config's order: the page colours each by its place here,
    # so a model keeps one colour in every basin and at every refresh (issue 32 #7).
    return {"resources": resources, "model_order": list(config.models)}


# Declared, with their scope (open: every API call the pages make carries a key), by
# http/server/app.py: the web UI never imports http.
