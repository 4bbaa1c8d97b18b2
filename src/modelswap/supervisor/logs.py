"""Per-model ring buffer of the child's output lines, never the gateway log
(docs/architecture.md, "Conventions")."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

MAX_LINE_CHARS = 8192

LineListener = Callable[[str], None]


class LogBuffer:
    """The last ``capacity`` lines a backend printed, stdout and stderr interleaved.

    ``feed`` accepts raw bytes in any chunking; lines end at ``\\n`` or ``\\r`` (tqdm bars
    redraw with ``\\r``, and each redraw is a line worth seeing). Listeners are called
    synchronously with each complete line.
    """

    def __init__(self, capacity: int = 500) -> None:
        self._lines: deque[str] = deque(maxlen=capacity)
        self._partial = b""
        self._listeners: list[LineListener] = []
        self.total_lines = 0
        self.last_line_at: float | None = None
        # Monotonic time of the last byte received, line or not: llama.cpp prints its loading
        # progress as dots on one line, and that is a sign of life too.
        self.last_output_monotonic: float | None = None

    def add_listener(self, listener: LineListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: LineListener) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def feed(self, data: bytes) -> None:
        if data:
            self.last_output_monotonic = time.monotonic()
        data = self._partial + data
        parts = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        self._partial = parts.pop()
        if len(self._partial) > MAX_LINE_CHARS:
            parts.append(self._partial)
            self._partial = b""
        for raw in parts:
            self._add(raw.decode("utf-8", errors="replace"))

    def flush(self) -> None:
        """Emit a trailing line that had no newline (call when the stream ends)."""
        if self._partial:
            raw, self._partial = self._partial, b""
            self._add(raw.decode("utf-8", errors="replace"))

    def append(self, line: str) -> None:
        """Add a line written by modelswap itself (e.g. ``[modelswap] starting``)."""
        self._add(line)

    def _add(self, line: str) -> None:
        line = line.rstrip()
        if not line:
            return
        if len(line) > MAX_LINE_CHARS:
            line = line[:MAX_LINE_CHARS] + " …"
        self._lines.append(line)
        self.total_lines += 1
        self.last_line_at = time.time()
        for listener in self._listeners:
            listener(line)

    def tail(self, n: int | None = None) -> list[str]:
        lines = list(self._lines)
        return lines if n is None or n >= len(lines) else lines[len(lines) - n :]

    def clear(self) -> None:
        self._lines.clear()
        self._partial = b""
