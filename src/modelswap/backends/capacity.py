"""The allocator's receipt: what a backend printed about the memory it actually took.

Pure parsing over log lines; each adapter reads its own lines (``read_receipt``), this keeps
what is plausible. Every value is optional; the last occurrence of each wins (a
backend that re-plans, e.g. llama.cpp's ``--fit`` trial contexts, prints the final figure last).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Any

from modelswap.backends.logtext import logical_lines, message
from modelswap.backends.registry import ADAPTERS
from modelswap.reported import CapacityReceipt

log = logging.getLogger(__name__)


def parse_capacity(lines: Iterable[str]) -> CapacityReceipt | None:
    """The receipt printed in ``lines`` (a startup log; ``\\r`` redraws, ANSI colours and vLLM
    prefixes are fine), or None when nothing was recognised."""
    found: dict[str, Any] = {}
    for line in logical_lines(lines):
        text = message(line)
        for adapter in ADAPTERS:
            adapter.read_receipt(text, found)
    plausible = {name: value for name, value in found.items() if _plausible(name, value)}
    return CapacityReceipt(**plausible) if plausible else None


# Upper bounds no real allocator reaches (a log line is text anyone's program may print):
# token and cell counts like the context value, sizes up to a petabyte, concurrency 10^6.
_MAX_COUNT = 2**31
_MAX_VALUE = {"kv_cache_gib": 1e6, "weights_gib": 1e6, "kv_cache_mib": 1e9, "max_concurrency": 1e6}


def _plausible(name: str, value: int | float) -> bool:
    """Positive and within the field's bound; an implausible figure is dropped, not reported.
    vLLM's negative KV budget (the weights alone overran it) is no size a receipt can state:
    the failed start's diagnosis quotes it from the log line itself (vllm.no_kv_cache_memory)."""
    limit = _MAX_VALUE.get(name, _MAX_COUNT)
    if math.isfinite(value) and 0 < value <= limit:
        return True
    log.debug("receipt: ignoring implausible %s = %r from the backend's log", name, value)
    return False
