"""Plan versus receipt: what the planner predicted for a configured model, next to what the
backend's allocator printed when it started (``CapacityReceipt``), so the planner's accuracy
is visible — ``plan_error_pct`` in ``/running``.

:class:`PlanCache` computes each model's plan once per start (on the ``starting`` event, in a
worker thread: it reads the model's config or GGUF header) and keeps it until the next start;
reading it costs nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from modelswap.events import Event
from modelswap.planner.from_config import plan_command
from modelswap.planner.gpu import detect_gpu
from modelswap.planner.hf import ModelReadError
from modelswap.planner.kv import llama_kv_bytes_for_cells
from modelswap.planner.memory import GIB, MIB, Plan
from modelswap.reported import CapacityReceipt
from modelswap.states import ProcessState

log = logging.getLogger(__name__)


def _pct(planned: float, reported: float) -> float | None:
    if not reported:
        return None
    return round((planned - reported) / abs(reported) * 100, 2)


def compare(plan: Plan, receipt: CapacityReceipt) -> dict[str, dict[str, float]]:
    """``{figure: {planned, reported, error_pct}}`` for every figure both sides have; the
    first is the headline (``plan_error_pct``).

    * llama.cpp ``kv_cache_mib``: the plan's KV bytes per cell × the cells llama.cpp took.
    * vLLM ``kv_cache_gib`` (when the plan knew the GPU), ``kv_cache_tokens`` (the plan's block
      arithmetic applied to the KV memory vLLM reported) and ``weights_gib``.
    """
    out: dict[str, dict[str, float]] = {}

    def add(name: str, planned: float, reported: float | int | None) -> None:
        if reported is None:
            return
        error = _pct(planned, float(reported))
        if error is not None:
            out[name] = {"planned": round(planned, 2), "reported": reported, "error_pct": error}

    if plan.geometry is None:
        cells = receipt.kv_cells or receipt.n_ctx
        if cells:
            tp = max(1, plan.inputs.tensor_parallel)
            size = llama_kv_bytes_for_cells(
                plan.shape, cells, plan.kv_dtype, seqs=plan.max_num_seqs, tp=tp
            )
            add("kv_cache_mib", size / MIB, receipt.kv_cache_mib)
        return out
    if plan.kv_budget_bytes is not None:
        add("kv_cache_gib", plan.kv_budget_bytes / GIB, receipt.kv_cache_gib)
    if receipt.kv_cache_gib and receipt.kv_cache_gib > 0:
        geo = plan.geometry
        blocks = geo.num_blocks(receipt.kv_cache_gib * GIB)
        length = receipt.concurrency_tokens_per_request or plan.context
        per_request = geo.blocks_per_request(length)
        if per_request:
            tokens = int(blocks / per_request * length)
            add("kv_cache_tokens", float(tokens), receipt.kv_cache_tokens)
    add("weights_gib", plan.weights_bytes / GIB, receipt.weights_gib)
    return out


def running_fields(plan: Plan | None, receipt: CapacityReceipt | None) -> dict[str, Any]:
    """What ``/running`` adds for a ready model: ``plan`` (the compared figures) and
    ``plan_error_pct`` — or nothing at all when either side is missing."""
    if plan is None or receipt is None:
        return {}
    figures = compare(plan, receipt)
    if not figures:
        return {}
    headline = next(iter(figures.values()))
    return {
        "plan": {"verdict": plan.verdict, "figures": figures},
        "plan_error_pct": headline["error_pct"],
    }


class PlanCache:
    """One plan per configured model, recomputed when the model starts.

    ``command_of(model_id)`` returns the model's argv as it is configured now (None for a
    model that is gone). GPU memory is detected once, lazily, in the worker thread.
    """

    def __init__(self, command_of: Callable[[str], Sequence[str] | None]) -> None:
        self._command_of = command_of
        self._plans: dict[str, Plan] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._gpu: tuple[int, str] | None = None
        self._gpu_checked = False

    def get(self, model_id: str) -> Plan | None:
        return self._plans.get(model_id)

    def on_event(self, event: Event) -> None:
        """Event listener: a model that begins a start gets a fresh plan."""
        if event.kind != "process.state" or event.data.get("new") is not ProcessState.STARTING:
            return
        model_id = str(event.data.get("model"))
        self._plans.pop(model_id, None)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        previous = self._tasks.pop(model_id, None)
        if previous is not None:
            previous.cancel()
        task = loop.create_task(self._refresh(model_id), name=f"plan:{model_id}")
        self._tasks[model_id] = task
        task.add_done_callback(lambda done: self._forget(model_id, done))

    def _forget(self, model_id: str, task: asyncio.Task[None]) -> None:
        if self._tasks.get(model_id) is task:
            del self._tasks[model_id]

    async def _refresh(self, model_id: str) -> None:
        argv = self._command_of(model_id)
        if not argv:
            return
        try:
            plan = await asyncio.to_thread(self._plan, list(argv))
        except (ModelReadError, ValueError, OSError) as exc:
            log.debug("model %s: no plan (%s)", model_id, exc)
            return
        except Exception:  # a planner bug must never touch serving
            log.exception("model %s: planning failed", model_id)
            return
        if plan is not None:
            self._plans[model_id] = plan

    def plan(self, argv: list[str]) -> Plan | None:
        """A plan of ``argv`` now, on the GPU detected once (blocking: a worker thread's)."""
        return self._plan(argv)

    def _plan(self, argv: list[str]) -> Plan | None:
        if not self._gpu_checked:
            self._gpu, self._gpu_checked = detect_gpu(), True
        overrides = {"gpu_bytes": self._gpu[0], "gpu_source": self._gpu[1]} if self._gpu else {}
        return plan_command(argv, overrides)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
