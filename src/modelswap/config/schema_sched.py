"""Raw (YAML-shaped) scheduling settings: groups, memory budgets, queues, keep-warm."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema
from pydantic_core import PydanticCustomError

_STRICT = ConfigDict(extra="forbid", populate_by_name=False, strict=True)

# A size: bytes as an integer, or text with a unit ("32GiB", "512 MiB", "1.5GB"); parse_size
# reads it (with its own messages), the pattern tells editors the same.
SIZE_PATTERN = r"^\s*\d+(\.\d+)?\s*([bB]|[kKmMgGtT]([bB]|[iI][bB])?)?\s*$"
Size = (
    Annotated[int, WithJsonSchema({"type": "integer", "minimum": 0})]
    | Annotated[str, WithJsonSchema({"type": "string", "pattern": SIZE_PATTERN})]
)


class RawGroup(BaseModel):
    """llama-swap compatible group."""

    model_config = ConfigDict(**_STRICT, title="Group")

    members: list[str] = Field(
        default_factory=list, description="Model ids in this group (none: it has no effect)."
    )
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
    profile: str | None = Field(
        None, description="The profile active at startup (its models are loaded and pinned)."
    )


class RawHooks(BaseModel):
    model_config = ConfigDict(**_STRICT)

    on_startup: RawPreload = Field(
        default_factory=RawPreload, alias="onStartup", description="Run once at startup."
    )
    on_request: str = Field(
        "",
        description="A Swap Policy Language program (llama-swap's) run on every JSON request, "
        "after the filters and before the model's or peer's filters.policy.",
    )


class RawMetrics(BaseModel):
    model_config = ConfigDict(**_STRICT)

    enabled: bool = Field(True, description="Count requests, tokens and starts for /metrics.")
    scrape_backends: bool = Field(
        False,
        alias="scrapeBackends",
        description="Include each ready backend's own /metrics (2 s, 1 MiB) with a model label.",
    )


# A duration: seconds as a number, or Go's text ("15s", "1m30s", "500ms"), as llama-swap writes.
DURATION_PATTERN = r"^\s*(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+\s*$"
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _seconds(value: object) -> object:
    """Seconds from a number or a Go duration string; anything else is left to fail as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return value
    if not isinstance(value, str):
        return float(value)
    text = value.strip()
    if not re.fullmatch(DURATION_PATTERN, text):
        raise PydanticCustomError(
            "duration",
            "{value} is not a duration: seconds, or text like 5s, 1m30s, 500ms",
            {"value": repr(value)},
        )
    return sum(float(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(text))


Duration = Annotated[
    float,
    BeforeValidator(_seconds),
    WithJsonSchema(
        {"anyOf": [{"type": "number"}, {"type": "string", "pattern": DURATION_PATTERN}]}
    ),
]


class RawPerformance(BaseModel):
    """llama-swap's system monitor: CPU, memory, network and GPUs sampled while serving."""

    model_config = ConfigDict(**_STRICT)

    disabled: bool = Field(False, description="Sample nothing (GET /api/performance says so).")
    every: Duration = Field(
        5.0,
        ge=1.0,
        description="Seconds between samples, or a duration like 15s (llama-swap's default 5s).",
    )


SESSION_HEADERS = ("X-Session-ID", "X-Litellm-Session-Id")  # llama-swap's defaults


class RawActivity(BaseModel):
    """The per-request activity log (SQLite)."""

    model_config = ConfigDict(**_STRICT)

    enabled: bool = Field(True, description="Keep one record per request.")
    path: str | None = Field(
        None, description="SQLite file (default <stateDir>/activity.sqlite3); ':memory:' allowed."
    )
    capture: bool = Field(
        False, description="Also store request and response bodies (bounded and redacted)."
    )
    capture_bytes: int = Field(
        16384, ge=0, alias="captureBytes", description="Bytes of each body kept with capture."
    )
    max_age_days: float = Field(
        30.0, gt=0, alias="maxAgeDays", description="Records older than this are deleted."
    )
    max_rows: int = Field(100_000, ge=1, alias="maxRows", description="Newest rows kept.")
    session_headers: list[str] = Field(
        default_factory=lambda: list(SESSION_HEADERS),
        alias="sessionHeaders",
        description="Request headers naming a request's session, first found wins (llama-swap's "
        "ui.activity.session_id): recorded as metadata.session_id, GET /api/activity?session_id=.",
    )


class RawSelector(BaseModel):
    """A virtual model id (llama-swap's selectors): each request goes to one of `targets`."""

    model_config = ConfigDict(**_STRICT, title="Selector")

    targets: list[str] = Field(
        min_length=1, description="Model ids, aliases or peerID/model names, in order."
    )
    strategy: Literal["warm", "pin", "spillover"] = Field(
        "warm",
        description="warm: the first target that is ready, else the first; pin: the first; "
        "spillover: the first with fewer than `reservations` requests in flight (peers: room).",
    )
    reservations: int = Field(
        1, ge=1, description="spillover: requests in flight per target before the next is used."
    )
    name: str | None = Field(None, description="Shown in GET /v1/models.")
    description: str | None = Field(None, description="Shown in GET /v1/models.")
    unlisted: bool = Field(False, description="Hide it from GET /v1/models.")


class RawProfile(BaseModel):
    """A named set of pins (llama-swap's profiles): while it is active, each pin name is served
    by its model, and those models are loaded and never evicted."""

    model_config = ConfigDict(**_STRICT, title="Profile")

    description: str | None = Field(None, description="Shown by GET /api/profiles.")
    pins: dict[str, str | None] = Field(
        default_factory=dict,
        description='Pin name -> model id or alias (null or "": the pin is not served in this '
        "one).",
    )


class RawMatrix(BaseModel):
    """llama-swap's swap matrix: which models may run together, chosen at least cost."""

    model_config = ConfigDict(**_STRICT, title="Matrix")

    vars: dict[str, str] = Field(
        default_factory=dict, description="Short names for model ids, used in the sets."
    )
    sets: dict[str, str] = Field(
        default_factory=dict,
        description="Named expressions of models that may run together: & (together), "
        "| (one or the other), parentheses, +name (another set).",
    )
    evict_costs: dict[str, float] = Field(
        default_factory=dict,
        description="Cost of evicting a var's model (default 1); the cheapest set is chosen.",
    )


class RawUpstream(BaseModel):
    """llama-swap's ``upstream`` settings for ``/upstream/<model>/<path>``."""

    model_config = ConfigDict(**_STRICT, title="Upstream")

    ignore_paths: list[str] = Field(
        default_factory=list,
        alias="ignorePaths",
        description="Regular expressions (e.g. '.*\\\\.(js|css|png)$', '^/slots'): paths that "
        "never start or swap a model: forwarded only while it is ready, else 503.",
    )
