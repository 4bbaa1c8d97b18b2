"""Turn a failed start's log tail into a :class:`Diagnosis`: the root cause and its fix.

Pure functions over text. The rules are every adapter's ``failure_rules``, tried in the
registry's root-cause order (docs/backends.md §9);
within a rule its patterns go from the most specific line to the wrapper, and each pattern is
matched bottom-up over the tail. So a wrapper printed after the root cause (vLLM's "Engine core
initialization failed", llama.cpp's "failed to load model") is never the answer.

Evidence is the matching line as printed, ANSI colour codes removed and whitespace stripped
(vLLM's ``(EngineCore_DP0 pid=79) ERROR ... [core.py:NNN]`` prefix is kept: it names the
process). Matching itself ignores the prefix and logging header (:func:`logtext.message`).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence
from dataclasses import dataclass

from modelswap.backends.adapter import Cause, Context, Rule
from modelswap.backends.hints import fit_notices, missing_tool_flags, tool_choice_hint
from modelswap.backends.logtext import logical_lines, message, text_lines
from modelswap.backends.progress import last_progress as find_last_progress
from modelswap.backends.registry import failure_rules, wrapper_lines
from modelswap.errors import Diagnosis
from modelswap.reported import Progress

__all__ = [
    "RULES",
    "GenericDiagnoser",
    "Rule",
    "diagnose_ceiling",
    "diagnose_exit",
    "diagnose_port_taken",
    "diagnose_silence",
    "diagnose_spawn_error",
    "diagnose_text",
    "diagnose_timeout",
    "fit_notices",
    "last_error_line",
    "match_rules",
    "missing_tool_flags",
    "tool_choice_hint",
]


RULES: tuple[Rule, ...] = failure_rules()


def _phase_before(messages: Sequence[str]) -> str | None:
    progress = find_last_progress(messages)
    return None if progress is None else progress.phase


# An exception line ("ValueError: ...", "torch.OutOfMemoryError: ..."), best evidence of an
# unknown cause; then anything that says error/failed; never a wrapper or traceback frame.
_EXCEPTION = re.compile(
    r"^(?:\[rank\d+\]:\s*)?(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::|$)"
)
_ERROR_LINE = re.compile(r"(error|exception)\b|\b(fatal|failed|abort(ed)?)\b", re.I)
_WRAPPER = re.compile("|".join(wrapper_lines()), re.I)  # each adapter's
_FRAME = re.compile(r'^(?:File "|raise\b|Traceback \(most recent call last\)|\^|~)')


@dataclass(frozen=True, slots=True)
class _Found:
    rule: Rule
    evidence: str
    cause: Cause


def _find(lines: Sequence[str]) -> _Found | None:
    logical = list(logical_lines(lines))
    messages = [message(line) for line in logical]
    for rule in RULES:
        for pattern in rule.patterns:
            for index in range(len(messages) - 1, -1, -1):
                match = pattern.search(messages[index])
                if match is None:
                    continue
                cause = Cause(rule.summary[:1].upper() + rule.summary[1:], rule.fix, {})
                if rule.explain is not None:
                    cause = rule.explain(match, Context(messages, index, _phase_before), cause)
                return _Found(rule, logical[index], cause)
    return None


def match_rules(lines: Sequence[str]) -> tuple[Rule, str] | None:
    """The first rule (in root-cause order) that matches any line, with the latest line
    matching its most specific pattern (the root cause, not the wrapper printed after it)."""
    found = _find(lines)
    return None if found is None else (found.rule, found.evidence)


def last_error_line(lines: Sequence[str]) -> str | None:
    """The latest exception line, else the latest line saying error/failed (never a wrapper,
    never a traceback frame)."""
    logical = list(logical_lines(lines))
    candidates = [(line, message(line)) for line in reversed(logical)]
    for test in (_EXCEPTION.search, _ERROR_LINE.search):
        for line, text in candidates:
            if test(text) and not _WRAPPER.search(text) and not _FRAME.search(text):
                return line
    return None


def _last_meaningful(lines: Sequence[str]) -> str | None:
    for line in reversed(list(logical_lines(lines))):
        text = message(line)
        if text and not _WRAPPER.search(text) and not _FRAME.search(text):
            return line
    return None


def _describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "is still running"
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def diagnose_text(text: str) -> Diagnosis | None:
    """The root cause shown in a saved log (``modelswap diagnose FILE``); None when the log
    shows no known cause."""
    found = _find(text_lines(text))
    if found is None:
        return None
    cause = found.cause
    return Diagnosis(found.rule.code, cause.summary, found.evidence, cause.fix, cause.numbers)


def diagnose_exit(lines: Sequence[str], returncode: int | None, *, during: str) -> Diagnosis:
    """Why a backend stopped ``during`` ("startup" or "serving"); ``lines`` is its log tail."""
    how = _describe_exit(returncode)
    numbers = {"returncode": float(returncode)} if returncode is not None else {}
    found = _find(lines)
    if found is not None:
        cause = found.cause
        return Diagnosis(
            found.rule.code,
            f"The backend {how} during {during}. {cause.summary}",
            found.evidence,
            cause.fix,
            {**cause.numbers, **numbers},
        )
    last = last_error_line(lines) or _last_meaningful(lines)
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
    """The single-clock timeout (code ``start_timeout``), kept for callers without progress."""
    last = _last_meaningful(lines)
    doing = f" Its last output was: {last}" if last else " It printed nothing."
    return Diagnosis(
        "start_timeout",
        f"The backend did not become healthy within {seconds:g} s.{doing}",
        last,
        "raise healthCheckTimeout if the model is slow to load, or check the model's log.",
        {"timeout_seconds": seconds},
    )


def _timed_out(
    code: str, lead: str, fix: str, lines: Sequence[str], seconds: float, last: Progress | None
) -> Diagnosis:
    progress = last if last is not None else find_last_progress(lines)
    numbers = {"timeout_seconds": float(seconds)}
    if progress is not None and progress.done is not None and progress.total:
        numbers |= {"progress_done": float(progress.done), "progress_total": float(progress.total)}
    doing = progress.label() if progress is not None else None
    summary = lead.format(s=f"{seconds:g}", doing=doing or "")
    if doing is None:
        summary = summary.split(";")[0] + "; it showed no recognisable progress."
    evidence = _last_meaningful(lines)
    found = _find(lines)
    if found is not None:  # e.g. the engine died but the API server hangs on
        summary += f" Its log shows a likely cause: {found.cause.summary}"
        evidence, fix = found.evidence, found.cause.fix
        numbers = {**found.cause.numbers, **numbers}
    elif evidence is not None:
        summary += f" Last output: {evidence}"
    return Diagnosis(code, summary, evidence, fix, numbers)


def diagnose_silence(
    lines: Sequence[str], seconds: float, last_progress: Progress | None
) -> Diagnosis:
    """No sign of life for ``seconds`` (the silence clock): name what it was doing last."""
    return _timed_out(
        "silent_timeout",
        "The backend showed no sign of life for {s} s; it was last {doing}.",
        "raise silenceTimeout if this phase is legitimately slow (cold compiles and autotuning "
        "can be quiet for minutes), or check the model's log.",
        lines,
        seconds,
        last_progress,
    )


def diagnose_ceiling(
    lines: Sequence[str], seconds: float, last_progress: Progress | None
) -> Diagnosis:
    """The start took longer than ``seconds`` in all (the hard ceiling)."""
    return _timed_out(
        "ceiling_timeout",
        "The backend did not become ready within {s} s; it was still {doing}.",
        "raise startTimeout if this model legitimately takes longer to start (first starts "
        "compile and autotune for many minutes), or check the model's log.",
        lines,
        seconds,
        last_progress,
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

    def silence(
        self, lines: Sequence[str], seconds: float, last_progress: Progress | None
    ) -> Diagnosis:
        return diagnose_silence(lines, seconds, last_progress)

    def ceiling(
        self, lines: Sequence[str], seconds: float, last_progress: Progress | None
    ) -> Diagnosis:
        return diagnose_ceiling(lines, seconds, last_progress)

    def port_taken(self, host: str, port: int) -> Diagnosis:
        return diagnose_port_taken(host, port)
