"""Ollama: its context, read from ``/api/ps`` (it has no ``/v1/models`` row that says it).

Taken from Ollama's API as documented for 0.5-0.12 (``/api/ps``: ``models[].name``,
``model`` and ``context_length``). Its ``owned_by`` is a namespace, not a name, so
``backend: auto`` never picks it: it is used when the config says ``backend: ollama``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from modelswap.backends.adapter import Ask, BaseAdapter, ModelList
from modelswap.backends.metadata import json_object, positive_int

if TYPE_CHECKING:
    from modelswap.reported import ModelMetadata


def ps_context(body: bytes, upstream_name: str) -> int | None:
    """``context_length`` of the loaded model in Ollama's ``/api/ps`` (the row named as we send
    it upstream, else the only row)."""
    data = json_object(body)
    models = data.get("models") if data else None
    if not isinstance(models, list):
        return None
    rows = [m for m in models if isinstance(m, dict)]
    for row in rows:
        if upstream_name in (row.get("name"), row.get("model")):
            return positive_int(row.get("context_length"))
    return positive_int(rows[0].get("context_length")) if len(rows) == 1 else None


class OllamaAdapter(BaseAdapter):
    name = "ollama"
    saves_slots = False

    def recognises(self, argv: Sequence[str]) -> bool:
        return any(os.path.basename(arg) in ("ollama", "ollama.exe") for arg in argv)

    async def read_metadata(
        self, ask: Ask, upstream_name: str, models: ModelList
    ) -> ModelMetadata | None:
        from modelswap.reported import ModelMetadata

        context = ps_context(await ask("/api/ps"), upstream_name)
        return ModelMetadata(self.name, context, source="/api/ps") if context else None
