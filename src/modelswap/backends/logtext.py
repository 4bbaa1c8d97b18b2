"""Shared helpers for reading backend log text: colours, prefixes, tqdm redraws, numbers.

Pure functions over ``str``. Two views of a line are used throughout ``backends``:

* the *logical line*: one ``\\r``/``\\n``-separated segment with ANSI colour codes removed and
  surrounding whitespace stripped. A vLLM line glued to the end of a tqdm bar (the bar had no
  newline) is cut at its ``(Name pid=N)`` prefix, so it becomes its own logical line. This is
  what a :class:`~modelswap.errors.Diagnosis` quotes as evidence.
* the *message*: the logical line without the process prefix ``(EngineCore_DP0 pid=79)`` and
  the logging header (``INFO 12-25 04:53:54 [gpu_worker.py:375]``, FlashInfer's
  ``2025-12-25 04:53:55,211 - INFO - autotuner.py:256 -``, llama.cpp's ``0.00.035.060 I``).
  This is what the parsers match.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from modelswap.backends.numbers import gib, to_float, to_int

__all__ = [
    "gib",
    "last_segment",
    "logical_lines",
    "message",
    "split_segments",
    "strip_ansi",
    "text_lines",
    "to_float",
    "to_int",
]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
_BREAK = re.compile(r"\r\n|\r|\n")
# "(EngineCore_DP0 pid=79) ", "(APIServer pid=1) ", "(Worker_TP0 pid=123) ", possibly nested.
_PROCESS = r"\([\w.:=-]+(?: [\w.:=-]+)* pid=\d+\)"
_PREFIXES = re.compile(rf"^(?:{_PROCESS}\s*)+")
# A process prefix that is not at the start of a segment: a log line glued to a tqdm bar.
_GLUED = re.compile(rf"(?<=\S)(?={_PROCESS} )")
_HEADERS = (
    # vLLM: "INFO 12-25 04:53:54 [gpu_worker.py:375] " (optionally with milliseconds); V0
    # builds wrote "INFO 07-24 15:09:41 llm_engine.py:176] ".
    re.compile(
        r"^(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?"
        r"(?:\s+\[[^\]]*\]|\s+[\w.]+:\d+\])?\s*"
    ),
    # FlashInfer / Python logging: "2025-12-25 04:53:55,211 - INFO - autotuner.py:256 - ".
    re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)? - [A-Z]+ - (?:[\w.]+:\d+ - )?"),
    # llama.cpp --log-prefix/--log-timestamps: "0.00.035.060 I " or "0.00.572 ".
    re.compile(r"^\d+\.\d\d\.\d{3}(?:\.\d{3})?(?: [IWEDT])? "),
)


def strip_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences (colours, cursor moves)."""
    if "\x1b" not in text:
        return text
    return _ANSI.sub("", text)


def split_segments(text: str) -> list[str]:
    """Split on ``\\r\\n``, ``\\r`` and ``\\n``: every tqdm redraw becomes its own segment."""
    return _BREAK.split(text)


def logical_lines(lines: Iterable[str]) -> Iterator[str]:
    """The logical lines of ``lines`` (each may still hold ``\\r`` redraws): ANSI removed,
    whitespace stripped, glued log lines cut apart, empty segments dropped."""
    for line in lines:
        for segment in split_segments(strip_ansi(line)):
            for part in _GLUED.split(segment) if " pid=" in segment else (segment,):
                part = part.strip()
                if part:
                    yield part


def text_lines(text: str) -> list[str]:
    """The logical lines of a whole saved log."""
    return list(logical_lines(split_segments(text)))


def message(line: str) -> str:
    """The text a parser should match: ``line`` without colours, the process prefix and the
    logging header."""
    text = strip_ansi(line).strip()
    if text.startswith("("):
        text = _PREFIXES.sub("", text)
    for header in _HEADERS:
        stripped = header.sub("", text, count=1)
        if stripped != text:
            return stripped.strip()
    return text


def last_segment(line: str) -> str:
    """The last non-empty ``\\r``-separated redraw of ``line`` (what a terminal would show)."""
    if "\r" not in line and "\n" not in line:
        return line
    for segment in reversed(split_segments(line)):
        if segment.strip():
            return segment
    return ""
