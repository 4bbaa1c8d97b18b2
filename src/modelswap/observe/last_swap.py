"""The last swap per model (``last_swap``), for ``/running`` and the web UI's cards (issue 21).

``LocalRouter._publish_last_swap`` publishes each swap's ``swap.done`` (drain, stop, spawn to
listening, listening to healthy); this keeps the newest one per target and completes it with the
first byte of the first request to that model that finished after it (``request.finished``),
so "why was that slow?" has its answer in one place; a swap that restored a prompt cache gains
what that first answer proved of it (``prompt_cache.proved``: ``prompt_cache.proof``).
"""

from __future__ import annotations

from typing import Any

from modelswap.events import Event


class LastSwaps:
    """Fed by the event bus (``on_event``, a quick listener that never raises)."""

    def __init__(self) -> None:
        self._last: dict[str, dict[str, Any]] = {}

    def on_event(self, event: Event) -> None:
        if event.kind == "swap.done":
            target = event.data.get("target")
            if isinstance(target, str):
                self._last[target] = {**event.data, "at": round(event.at, 3)}
        elif event.kind == "request.finished":
            self._first_byte(event.data)
        elif event.kind == "prompt_cache.proved":
            self._proved(event.data)

    def _proved(self, data: dict[str, Any]) -> None:
        record = self._last.get(data.get("model") or "")
        cache = record.get("prompt_cache") if record is not None else None
        if isinstance(cache, dict) and "restored" in cache and "proof" not in cache:
            proof = data.get("last")
            cache["proof"] = {
                **(proof if isinstance(proof, dict) else {}),
                **{k: data[k] for k in ("reason", "fix") if k in data},
            }

    def _first_byte(self, data: dict[str, Any]) -> None:
        record = self._last.get(data.get("model") or "")
        first_byte = data.get("first_byte")
        if record is None or "first_byte_seconds" in record or record.get("error"):
            return
        if isinstance(first_byte, int | float):
            # from that request's arrival: a request that waited for this swap includes it
            record["first_byte_seconds"] = round(float(first_byte), 4)
            record["first_request_id"] = data.get("request_id")
            if isinstance(data.get("load"), int | float):
                record["first_request_load_seconds"] = round(float(data["load"]), 4)
            if isinstance(data.get("cached_tokens"), int):  # a restored prompt cache shows here
                record["first_request_cached_tokens"] = data["cached_tokens"]

    def annotate(self, model: str, key: str, value: object) -> None:
        """Add ``key`` to the newest swap to ``model`` (the dry run it is compared with)."""
        record = self._last.get(model)
        if record is not None:
            record[key] = value

    def last(self, model: str) -> dict[str, Any] | None:
        """The newest swap to ``model`` (a copy), or None."""
        record = self._last.get(model)
        return dict(record) if record is not None else None
