"""What the supervisor needs from backend knowledge, as protocols. ``backends`` implements them
(it knows each backend's log lines and endpoints) and the runtime injects them, so the
supervisor itself matches no text and speaks to no endpoint but the health check."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from modelswap.config import ModelConfig
from modelswap.errors import Diagnosis
from modelswap.reported import (
    CapacityReceipt,
    ModelMetadata,
    Progress,
    SlotFileAction,
    SlotState,
)


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


class SlotApi(Protocol):
    """llama.cpp's slots API (``backends/slots.py``), for the prompt cache kept across a swap.
    ``base``: the model's proxy URL; ``seconds``: the most each request may take. None of them
    raises but CancelledError."""

    async def slots(self, base: str, api_key: str | None, seconds: float) -> list[SlotState] | str:
        """Every slot, or why they could not be listed."""

    async def file_action(
        self, base: str, api_key: str | None, slot: int, action: str, filename: str, seconds: float
    ) -> SlotFileAction:
        """``save`` or ``restore`` one slot to/from ``filename`` in the backend's save path."""

    async def erase(self, base: str, api_key: str | None, slot: int, seconds: float) -> bool:
        """Empty one slot."""
