"""What goes wrong with a program: at load (with its line:column) or while it runs."""

from __future__ import annotations


class PolicyError(ValueError):
    """A program that cannot be honoured, at ``line``:``col`` of its source (both from 1;
    columns count characters, a tab as one). ``str()`` is ``line L:C: message``."""

    def __init__(self, line: int, col: int, message: str) -> None:
        super().__init__(f"line {line}:{col}: {message}")
        self.line = line
        self.col = col
        self.message = message


class PolicyRuntimeError(RuntimeError):
    """A rewrite the body's shape does not allow (``set tools.name`` when ``tools`` is a
    list), or an ``apply`` that cannot run: the request fails rather than going out half
    rewritten."""
