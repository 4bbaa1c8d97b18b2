"""Hints that are not failures, asked of each backend's adapter: the fix for an error answer
(vLLM's tool-choice 400), the tool-choice preflight, what ``modelswap check`` says of a command
line, and the notices of a start's log (llama.cpp's ``--fit``).

Pure functions; re-exported by :mod:`modelswap.backends.diagnose`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from modelswap.backends.registry import ADAPTERS, for_command
from modelswap.backends.vllm import TOOL_CHOICE_HINT

__all__ = [
    "TOOL_CHOICE_HINT",
    "asks_for_auto_tool_choice",
    "auto_tool_choice_unsupported",
    "fit_notices",
    "missing_tool_flags",
    "tool_choice_hint",
]


def tool_choice_hint(status: int, body: bytes) -> str | None:
    """A one-line hint when an error answer is one a backend is known to give for tool
    calling it was not started for (vLLM's 400 without a parser), else None."""
    return next((h for a in ADAPTERS if (h := a.error_hint(status, body)) is not None), None)


def missing_tool_flags(argv: Sequence[str]) -> str | None:
    """For ``modelswap check``: a sentence when the command line ``argv`` starts a backend
    that cannot serve tool calls as started (vLLM without ``--enable-auto-tool-choice`` or
    ``--tool-call-parser``), else None."""
    return for_command("auto", argv).command_warning(argv)


def asks_for_auto_tool_choice(body: object) -> bool:
    """Whether a request body lets the model choose its tools: ``tools`` given and
    ``tool_choice`` absent or ``"auto"`` (Anthropic's ``{"type": "auto"}`` too) — what vLLM
    refuses without a tool-call parser. ``"none"``, ``"required"`` and a named tool need none."""
    if not isinstance(body, dict) or not body.get("tools"):
        return False
    choice = body.get("tool_choice")
    return choice is None or choice == "auto" or choice == {"type": "auto"}


def auto_tool_choice_unsupported(argv: Sequence[str], backend: str) -> str | None:
    """The hint when the model's backend (its config's ``backend:``, or for ``auto`` the one
    ``argv`` starts) cannot serve a request that lets the model choose its tools as
    started, else None: the request is known to fail before the backend is even started."""
    return for_command(backend, argv).tool_choice_preflight(argv)


def fit_notices(lines: Iterable[str]) -> list[str]:
    """Human sentences for the changes a backend made to what was asked (llama.cpp's
    ``--fit``): not failures, the server still starts, but with parameters the user did not
    ask for."""
    lines = list(lines)
    return [notice for adapter in ADAPTERS for notice in adapter.start_notices(lines)]
