"""What the supervisor needs from backend knowledge, as protocols. ``backends`` implements them
(it knows each backend's log lines and endpoints) and the runtime injects them, so the
supervisor itself matches no text and speaks to no endpoint but the health check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from modelswap.config import ModelConfig
from modelswap.errors import Diagnosis
from modelswap.receipts import CapacityReceipt, ModelMetadata, Progress


class Diagnoser(Protocol):
    def exit(self, lines: Sequence[str], returncode: int | None, *, during: str) -> Diagnosis:
        """The backend exited ``during`` "startup" or "serving"; ``lines`` is its log tail."""

    def spawn_error(self, cmd0: str, error: OSError) -> Diagnosis:
        """The command could not be executed at all."""

    def port_taken(self, host: str, port: int) -> Diagnosis:
        """The model's port was taken by another process before the start."""

    def silence(
        self, lines: Sequence[str], seconds: float, last_progress: Progress | None
    ) -> Diagnosis:
        """The starting backend printed nothing for ``seconds`` (silenceTimeout)."""

    def ceiling(
        self, lines: Sequence[str], seconds: float, last_progress: Progress | None
    ) -> Diagnosis:
        """The start took longer than ``seconds`` in all (startTimeout)."""


class LogReader(Protocol):
    def progress(self, line: str) -> Progress | None:
        """The sign of progress in one output line, if it is one."""

    def capacity(self, lines: Sequence[str]) -> CapacityReceipt | None:
        """The allocator's receipt printed during startup, if any."""


class Prober(Protocol):
    async def probe(self, config: ModelConfig) -> ModelMetadata | None:
        """Ask the ready backend what it serves; None when unavailable (never raises)."""
