"""Turn a failed start's log tail into a :class:`Diagnosis`: the root cause and its fix.

Pure functions over text. The rules are matched bottom-up over the tail, first rule in table
order wins, so a wrapper line printed after the root cause (vLLM's "Engine core initialization
failed") is never the answer.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from modelswap.errors import Diagnosis


@dataclass(frozen=True, slots=True)
class Rule:
    """``patterns`` in priority order: the root-cause line first, wrapper lines last."""

    code: str
    patterns: tuple[re.Pattern[str], ...]
    summary: str
    fix: str


def _re(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.I) for p in patterns)


RULES: tuple[Rule, ...] = (
    Rule(
        "port_in_use",
        _re(r"address already in use|couldn't bind HTTP server socket"),
        "the backend could not bind its port: another process is listening there.",
        "stop the other process, or change startPort / the model's --port.",
    ),
    Rule(
        "model_load_error",
        _re(
            r"error loading model\b",
            r"failed to load model|exiting due to model loading error",
        ),
        "the backend could not load the model file.",
        "check the model path in cmd and that the file is a complete, supported model.",
    ),
    Rule(
        "cuda_oom",
        _re(r"CUDA out of memory|cudaMalloc failed|unable to allocate \S+ buffer"),
        "the GPU ran out of memory while loading the model.",
        "use a smaller quantization or context, or free GPU memory used by other processes.",
    ),
)

# The last exception-looking line is a good fallback evidence for an unknown cause.
# "ValueError:" has no word boundary before "Error", hence the first alternative.
_ERROR_LINE = re.compile(r"(error|exception)\b|\b(fatal|failed|traceback)\b", re.I)
_WRAPPER = re.compile(r"Engine core initialization failed|See root cause above", re.I)


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def match_rules(lines: Sequence[str]) -> tuple[Rule, str] | None:
    """The first rule (in table order) that matches any line, with the latest line matching
    its most specific pattern (the root cause, not the wrapper printed after it)."""
    for rule in RULES:
        for pattern in rule.patterns:
            for line in reversed(lines):
                if pattern.search(line):
                    return rule, line.strip()
    return None


def last_error_line(lines: Sequence[str]) -> str | None:
    for line in reversed(lines):
        if _ERROR_LINE.search(line) and not _WRAPPER.search(line):
            return line.strip()
    return None


def diagnose_exit(lines: Sequence[str], returncode: int | None, *, during: str) -> Diagnosis:
    """Why a backend stopped ``during`` ("startup" or "serving")."""
    how = _describe_exit(returncode)
    numbers = {"returncode": float(returncode)} if returncode is not None else {}
    found = match_rules(lines)
    if found is not None:
        rule, evidence = found
        return Diagnosis(
            rule.code,
            f"The backend {how} during {during}: {rule.summary}",
            evidence,
            rule.fix,
            numbers,
        )
    last = last_error_line(lines) or next(
        (line.strip() for line in reversed(lines) if not _WRAPPER.search(line)), None
    )
    detail = f" Last output: {last}" if last else " It printed nothing."
    return Diagnosis(
        "exited",
        f"The backend {how} during {during}.{detail}",
        last,
        "read the model's log (GET /logs/<model>) for the full output.",
        numbers,
    )


def diagnose_spawn_error(cmd0: str, error: OSError) -> Diagnosis:
    if isinstance(error, FileNotFoundError):
        return Diagnosis(
            "executable_not_found",
            f"The command `{cmd0}` was not found.",
            str(error),
            "install it, or give its absolute path in the model's cmd.",
        )
    return Diagnosis(
        "spawn_failed",
        f"The command `{cmd0}` could not be started: {error.strerror or error}.",
        str(error),
        "check the executable's path and permissions.",
    )


def diagnose_timeout(lines: Sequence[str], seconds: float) -> Diagnosis:
    last = lines[-1].strip() if lines else None
    doing = f" Its last output was: {last}" if last else " It printed nothing."
    return Diagnosis(
        "start_timeout",
        f"The backend did not become healthy within {seconds:g} s.{doing}",
        last,
        "raise healthCheckTimeout if the model is slow to load, or check the model's log.",
        {"timeout_seconds": seconds},
    )


def diagnose_port_taken(host: str, port: int) -> Diagnosis:
    return Diagnosis(
        "port_in_use",
        f"Port {port} on {host} is already in use by another process, so the backend cannot "
        "listen there.",
        None,
        "stop the process using it, or set startPort to a free range.",
        {"port": float(port)},
    )


class GenericDiagnoser:
    """The diagnoser for any backend; per-backend adapters refine it."""

    def exit(self, lines: Sequence[str], returncode: int | None, *, during: str) -> Diagnosis:
        return diagnose_exit(lines, returncode, during=during)

    def spawn_error(self, cmd0: str, error: OSError) -> Diagnosis:
        return diagnose_spawn_error(cmd0, error)

    def timeout(self, lines: Sequence[str], seconds: float) -> Diagnosis:
        return diagnose_timeout(lines, seconds)

    def port_taken(self, host: str, port: int) -> Diagnosis:
        return diagnose_port_taken(host, port)
