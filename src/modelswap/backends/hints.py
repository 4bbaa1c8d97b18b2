"""Hints that are not failures: tool calling without a parser, and llama.cpp's ``--fit``.

Pure functions; re-exported by :mod:`modelswap.backends.diagnose`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence

from modelswap import jsonsafe

_PARSERS = "hermes suits Qwen2.5/Qwen3/Qwen3-Next, qwen3_coder suits Qwen3-Coder/Qwen3.5/Qwen3.6"
TOOL_CHOICE_HINT = (
    f"start vLLM with --enable-auto-tool-choice --tool-call-parser <parser>; {_PARSERS}"
)
_NO_PARSER = re.compile(
    r'"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'
    r"|tool_choice=.{0,200}? requires --tool-call-parser",
)
_MAX_BODY = 64 * 1024


def _error_message(body: bytes) -> str:
    """The ``message`` of a vLLM error body, new (``{"error": {...}}``) or old (flat) shape;
    the raw text when it is not JSON."""
    text = body[:_MAX_BODY].decode("utf-8", errors="replace")
    try:
        data = jsonsafe.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        if isinstance(data.get("message"), str):
            return str(data["message"])
    return text


def tool_choice_hint(status: int, body: bytes) -> str | None:
    """A one-line hint when a vLLM 400 says tool calling needs a parser, else None."""
    if status != 400 or b"tool" not in body[:_MAX_BODY]:
        return None
    return TOOL_CHOICE_HINT if _NO_PARSER.search(_error_message(body)) else None


def _is_vllm(argv: Sequence[str]) -> bool:
    for arg in argv:
        if os.path.basename(arg) in ("vllm", "vllm.exe") or "vllm.entrypoints" in arg:
            return True
        if "vllm/vllm-openai" in arg:  # a container image
            return True
    return False


def _has_flag(argv: Sequence[str], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in argv)


def _suggest_parser(argv: Sequence[str]) -> str | None:
    text = " ".join(argv).lower()
    if re.search(r"qwen3[._-]?[56](?!\d)|qwen3[-_]?coder", text):
        return "qwen3_coder"
    if re.search(r"qwen2\.5|qwen3", text):
        return "hermes"
    return None


def missing_tool_flags(argv: Sequence[str]) -> str | None:
    """For ``modelswap check``: a sentence when a vLLM command line cannot serve tool calls
    (``--enable-auto-tool-choice`` or ``--tool-call-parser`` missing), else None."""
    if not _is_vllm(argv):
        return None
    missing = [
        flag
        for flag in ("--enable-auto-tool-choice", "--tool-call-parser")
        if not _has_flag(argv, flag)
    ]
    if not missing:
        return None
    parser = _suggest_parser(argv)
    which = (
        f"--tool-call-parser {parser} looks right for this model"
        if parser
        else f"pick the parser for the model ({_PARSERS})"
    )
    return (
        f"vLLM is started without {' and '.join(missing)}, so requests with tools and "
        f'tool_choice "auto" will fail with HTTP 400; add --enable-auto-tool-choice '
        f"--tool-call-parser <parser> ({which})."
    )


def asks_for_auto_tool_choice(body: object) -> bool:
    """Whether a request body lets the model choose its tools: ``tools`` given and
    ``tool_choice`` absent or ``"auto"`` (Anthropic's ``{"type": "auto"}`` too) — what vLLM
    refuses without a tool-call parser. ``"none"``, ``"required"`` and a named tool need none."""
    if not isinstance(body, dict) or not body.get("tools"):
        return False
    choice = body.get("tool_choice")
    return choice is None or choice == "auto" or choice == {"type": "auto"}


def auto_tool_choice_unsupported(argv: Sequence[str], backend: str) -> str | None:
    """:data:`TOOL_CHOICE_HINT` when ``argv`` starts vLLM (or ``backend`` says it is vLLM)
    without ``--enable-auto-tool-choice`` and ``--tool-call-parser``, else None: the request
    is known to fail before the backend is even started."""
    if backend not in ("vllm", "auto") or (backend == "auto" and not _is_vllm(argv)):
        return None
    if all(_has_flag(argv, f) for f in ("--enable-auto-tool-choice", "--tool-call-parser")):
        return None
    return TOOL_CHOICE_HINT


_FIT_REDUCED = re.compile(
    r"\b\w*_params_fit\w*: context size reduced from (\d[\d,]*) to (\d[\d,]*)"
    r"(?:\s*(?:->|→)\s*need (\d+) MiB less)?"
)
_FIT_FAILED = re.compile(r"\b\w*_params_fit\w*: failed: (.+)")


def fit_notices(lines: Iterable[str]) -> list[str]:
    """Human sentences for llama.cpp's ``--fit`` changes (not failures: the server still
    starts, but with parameters the user did not ask for)."""
    # Here: `modelswap check` imports this module for missing_tool_flags, and reads no log.
    from modelswap.backends.logtext import logical_lines, message, to_int

    notices: list[str] = []
    for line in logical_lines(lines):
        text = message(line)
        if "_params_fit" not in text:
            continue
        if m := _FIT_REDUCED.search(text):
            saved = f", saving {m[3]} MiB" if m[3] else ""
            notices.append(
                f"llama.cpp's --fit reduced the context from {to_int(m[1])} to {to_int(m[2])} "
                f"tokens to fit in free device memory{saved}; set -c explicitly (or -fit off) "
                "to keep the context you asked for."
            )
        elif m := _FIT_FAILED.search(text):
            notices.append(
                f"llama.cpp's --fit could not fit the model in free device memory: "
                f"{m[1].strip().rstrip('.')}."
            )
    return notices
