"""What the supervisor needs to explain a failure. Implemented in ``backends`` (which knows
each backend's log lines) and injected by the runtime, so the supervisor matches no text."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from modelswap.errors import Diagnosis


class Diagnoser(Protocol):
    def exit(self, lines: Sequence[str], returncode: int | None, *, during: str) -> Diagnosis:
        """The backend exited ``during`` "startup" or "serving"; ``lines`` is its log tail."""

    def spawn_error(self, cmd0: str, error: OSError) -> Diagnosis:
        """The command could not be executed at all."""

    def timeout(self, lines: Sequence[str], seconds: float) -> Diagnosis:
        """The backend did not become healthy within ``seconds``."""

    def port_taken(self, host: str, port: int) -> Diagnosis:
        """The model's port was taken by another process before the start."""
