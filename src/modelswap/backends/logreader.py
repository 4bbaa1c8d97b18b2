"""What the supervisor reads in a backend's output: progress lines and the capacity receipt."""

from __future__ import annotations

from collections.abc import Sequence

from modelswap.backends.capacity import parse_capacity
from modelswap.backends.progress import recognise_progress
from modelswap.reported import CapacityReceipt, Progress


class BackendLogReader:
    """Implements the supervisor's ``LogReader`` over every known backend's formats."""

    def progress(self, line: str) -> Progress | None:
        return recognise_progress(line)

    def capacity(self, lines: Sequence[str]) -> CapacityReceipt | None:
        return parse_capacity(lines)
