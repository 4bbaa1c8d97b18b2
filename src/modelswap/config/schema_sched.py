"""Raw (YAML-shaped) scheduling settings: groups, memory budgets, queues, keep-warm."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

_STRICT = ConfigDict(extra="forbid", populate_by_name=False, strict=True)

# A size: bytes as an integer, or text with a unit ("32GiB", "512 MiB", "1.5GB").
Size = int | str


class RawGroup(BaseModel):
    """llama-swap compatible group."""

    model_config = ConfigDict(**_STRICT, title="Group")

    members: list[str] = Field(min_length=1, description="Model ids in this group.")
    swap: bool = Field(True, description="Members swap among themselves (one at a time).")
    exclusive: bool = Field(
        True, description="Loading a member unloads the models of other (non-persistent) groups."
    )
    persistent: bool = Field(False, description="Never unloaded by other groups.")


class RawPreload(BaseModel):
    model_config = ConfigDict(**_STRICT)

    preload: list[str] = Field(
        default_factory=list, description="Models loaded when modelswap starts."
    )


class RawHooks(BaseModel):
    model_config = ConfigDict(**_STRICT)

    on_startup: RawPreload = Field(
        default_factory=RawPreload, alias="onStartup", description="Run once at startup."
    )
