"""Any OpenAI-compatible server, and what every backend shares: uvicorn's startup lines (vLLM,
SGLang and any FastAPI server print them), a warm-up line, tqdm bars that name their phase,
lines that point to a traceback above, a port another process holds, and
the ``/v1/models`` row read for its context (``max_model_len``, ``context_length`` or
``meta.n_ctx``).

Patterns taken from uvicorn 0.2x as vLLM 0.5-0.19 and llama.cpp builds 6912-7412 print them
(``tests/data/startup-logs/*-port-in-use.log``).
"""

from __future__ import annotations

import re

from modelswap.backends.adapter import (
    AUTOTUNING,
    COMPILING,
    LOADING_WEIGHTS,
    STARTING_SERVER,
    WARMING_UP,
    BaseAdapter,
    Cause,
    Context,
    Rule,
    patterns,
)

_PHASES: tuple[tuple[str, str], ...] = (
    (STARTING_SERVER, r"Application startup complete|Started server process"),
    (WARMING_UP, r"Warming up\b"),
)

_PORT = re.compile(r"\bport:?\s*(\d{1,5})\b|\('[^']*',\s*(\d{1,5})\)")


def port_in_use(m: re.Match[str], ctx: Context, default: Cause) -> Cause:
    p = _PORT.search(m.string)
    if p is None:
        return default
    port = p[1] or p[2]
    return Cause(
        f"The backend could not bind port {port}: another process is listening there.",
        default.fix,
        {"port": float(port)},
    )


def _rules() -> tuple[Rule, ...]:
    return (
        Rule(
            "port_in_use",
            patterns(r"address already in use|couldn't bind HTTP server socket|\[Errno 98\]"),
            "the backend could not bind its port: another process is listening there.",
            "stop the other process, or change startPort / the model's --port.",
            port_in_use,
        ),
    )


class GenericAdapter(BaseAdapter):
    """``backend: generic``, and ``auto`` when nothing else recognises the server. Its slots
    are unknown: a generic server may be llama-server (its metadata then says so)."""

    name = "generic"
    saves_slots = None
    progress_phases = _PHASES
    # tqdm bars whose description names a phase (others are their own phase, lowercased).
    progress_bars = (
        (LOADING_WEIGHTS, r"loading weights|loading model"),
        (AUTOTUNING, r"auto ?tun|\btuning\b"),
        (WARMING_UP, r"warm ?up|warming"),
        (COMPILING, r"compil"),
    )
    # Python's and torch's pointers to a traceback printed above.
    wrapper_lines = (
        r"please check the stack trace above for the root cause",
        r"See stack trace for root cause",
    )

    def failure_rules(self) -> tuple[Rule, ...]:
        return _rules()
