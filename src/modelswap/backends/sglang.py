"""SGLang: how its command is recognised and its ``/v1/models`` row read; the planner sizes it
with vLLM's paged memory model.

Taken from SGLang's OpenAI-compatible server as documented for 0.4-0.5 (``owned_by: sglang``,
``max_model_len`` in the model row, ``--context-length``); no SGLang log is in the corpus yet,
so it names no receipt lines, progress or failure causes of its own (the shared ones of
``generic`` apply: uvicorn's startup lines, a port in use).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from modelswap.backends import vllm
from modelswap.backends.adapter import Ask, BaseAdapter, ModelList

if TYPE_CHECKING:
    from modelswap.reported import ModelMetadata


class SglangAdapter(BaseAdapter):
    name = "sglang"
    owned_by = "sglang"
    command_words = ("sglang",)
    memory = vllm.MEMORY  # paged KV blocks, as vLLM's: the planner's approximation
    saves_slots = False  # its own radix cache; no slots API
    limit_flags = (("--context-length", "max_model_len"),)

    def recognises(self, argv: Sequence[str]) -> bool:
        return any(
            os.path.basename(arg) == "sglang" or arg.startswith("sglang.launch_server")
            for arg in argv
        )

    async def read_metadata(
        self, ask: Ask, upstream_name: str, models: ModelList
    ) -> ModelMetadata | None:
        """Its row's ``max_model_len`` (only that, as vLLM's)."""
        return await models.max_model_len(self.name)
