"""What evicting a model throws away (issue 40): its start, and the prompts its slots hold.

A model's eviction costs the time to start it again (its median start × ``evictCost``) plus
the prefill it would redo: the tokens its llama.cpp slots hold (``GET /slots``, read when it
goes idle) at its measured prompt rate (uncached prompt tokens over time to first token,
``model_stats.py``) — nothing when its prompt cache (``promptCache``) saves them across the
stop, or when either figure is not known yet. Pure: the runtime gives the figures.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EvictionPrice:
    """Seconds of work an eviction throws away, and how they were reckoned."""

    start_seconds: float
    held_tokens: int | None = None  # None: not known (not llama.cpp, or never read)
    prompt_rate: float | None = None  # tokens per second; None: not measured yet
    cache_keeps: bool = False  # promptCache saves the slots: no prefill is lost

    @property
    def prefill_seconds(self) -> float:
        if self.cache_keeps or not self.held_tokens or not self.prompt_rate:
            return 0.0
        return self.held_tokens / self.prompt_rate

    @property
    def total(self) -> float:
        return self.start_seconds + self.prefill_seconds

    def summary(self) -> str:
        """In words, for the swap's log line: ``start 8.0 s + prefill 4.1 s (4096 tokens at
        1000 tok/s)``."""
        text = f"start {self.start_seconds:.1f} s"
        if not self.held_tokens:
            return text
        if self.cache_keeps:
            return f"{text}; prompt cache keeps its {self.held_tokens} tokens"
        if not self.prompt_rate:
            return f"{text}; {self.held_tokens} tokens held, prompt rate not measured yet"
        return (
            f"{text} + prefill {self.prefill_seconds:.1f} s ({self.held_tokens} tokens at "
            f"{self.prompt_rate:.0f} tok/s)"
        )

    def as_dict(self) -> dict[str, object]:
        """For the last-swap record."""
        found: dict[str, object] = {
            "start_seconds": round(self.start_seconds, 3),
            "prefill_seconds": round(self.prefill_seconds, 3),
            "total_seconds": round(self.total, 3),
        }
        if self.held_tokens is not None:
            found["held_tokens"] = self.held_tokens
        if self.prompt_rate is not None:
            found["prompt_tokens_per_second"] = round(self.prompt_rate, 1)
        if self.cache_keeps:
            found["prompt_cache_keeps"] = True
        return found
