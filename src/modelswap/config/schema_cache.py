"""Raw (YAML-shaped) settings of the prompt cache kept across a swap (issue 30)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from modelswap.config.schema_sched import Size


class RawPromptCache(BaseModel):
    """Top-level ``promptCache``: the default of every model's ``promptCache``, the disk budget
    of the saved slots and how long a swap may spend saving and restoring them."""

    model_config = ConfigDict(
        extra="forbid", populate_by_name=False, strict=True, title="PromptCache"
    )

    enabled: bool = Field(
        False,
        description="Each model's promptCache unless it says: before a llama.cpp model stops, "
        "save its slots' prompt caches into the state directory, and restore them when it "
        "starts again (off by default: it writes the KV cache to disk, up to diskBudget).",
    )
    disk_budget: Size = Field(
        "20GiB",
        alias="diskBudget",
        description="The most the saved slots of every model may take together (a size like "
        "20GiB); the least recently used are dropped first.",
    )
    save_timeout: float = Field(
        10.0,
        gt=0,
        alias="saveTimeout",
        description="The most seconds saving may add to a stop (a swap): a slot that cannot be "
        "saved in the time left is skipped, and the last-swap record says so.",
    )
    restore_timeout: float = Field(
        10.0,
        gt=0,
        alias="restoreTimeout",
        description="The most seconds restoring may add to a start; a slot that cannot be "
        "restored in the time left is skipped (its request is served all the same).",
    )
