"""Pure parsers for what a backend says about its model: ``/v1/models``, llama.cpp ``/props``
(its context, and its capabilities: what the model takes, whether it calls tools), Ollama
``/api/ps``. Every number goes through :func:`positive_int`; anything else is "unknown"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modelswap import jsonsafe

MAX_SANE = 2**31

# owned_by → backend kind (docs/backends.md §2). Ollama's owned_by is a namespace, not a name.
_OWNERS = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp"}


def positive_int(value: object) -> int | None:
    """``value`` if it is a plain positive integer no larger than 2^31, else None.

    Rejects booleans (``True`` is an int in Python), floats (even ``2048.0``), strings, zero,
    negatives and absurd values."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value <= MAX_SANE else None


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body's JSON object; None for anything else. Raises JSONTooDeepError (a ValueError:
    the probe reports the backend's metadata as unavailable, and says why)."""
    try:
        data = jsonsafe.loads(body)
    except jsonsafe.JSONTooDeepError:
        raise
    except ValueError:  # UnicodeDecodeError included
        return None
    return data if isinstance(data, dict) else None


def model_rows(body: bytes) -> list[dict[str, Any]]:
    """The ``data`` rows of an OpenAI-style model list (only the well-formed ones)."""
    data = json_object(body)
    rows = data.get("data") if data else None
    if not isinstance(rows, list):
        return []
    return [row for row in rows if isinstance(row, dict)]


def select_row(rows: Sequence[Mapping[str, Any]], upstream_name: str) -> Mapping[str, Any] | None:
    """The row whose ``id`` is the name we send upstream; else the only row; else none."""
    for row in rows:
        if row.get("id") == upstream_name:
            return row
    return rows[0] if len(rows) == 1 else None


def kind_of(row: Mapping[str, Any] | None) -> str | None:
    owner = row.get("owned_by") if row else None
    return _OWNERS.get(owner) if isinstance(owner, str) else None


def _meta(row: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = row.get("meta")
    return meta if isinstance(meta, Mapping) else {}


def row_context(row: Mapping[str, Any]) -> int | None:
    """A model row's context: ``max_model_len``, ``context_length`` or ``meta.n_ctx``."""
    for value in (row.get("max_model_len"), row.get("context_length"), _meta(row).get("n_ctx")):
        number = positive_int(value)
        if number is not None:
            return number
    return None


def row_n_ctx_train(row: Mapping[str, Any]) -> int | None:
    return positive_int(_meta(row).get("n_ctx_train"))


def llamacpp_props(body: bytes) -> tuple[int | None, int | None]:
    """``(per-slot n_ctx, total_slots)`` from llama.cpp ``/props``."""
    data = json_object(body)
    if data is None:
        return None, None
    settings = data.get("default_generation_settings")
    n_ctx = positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return n_ctx, positive_int(data.get("total_slots"))


# llama.cpp's /props ``modalities`` key -> the input modality llama-swap lists (``video`` has
# none: llama-swap's modalities are text, audio and image).
_PROPS_MODALITIES = (("vision", "image"), ("audio", "audio"))


def llamacpp_capabilities(body: bytes) -> tuple[tuple[str, ...], bool | None] | None:
    """``(input modalities, tools)`` from llama.cpp ``/props``; None if it is no JSON object.

    Text always (llama-server takes it), then ``image`` and ``audio`` where ``modalities``
    says ``vision`` / ``audio`` is true. Tools: ``chat_template_caps`` must say both
    ``supports_tools`` and ``supports_tool_calls`` (a template that renders a tool list and
    reads calls back); a build without ``chat_template_caps`` is asked whether its
    ``chat_template`` mentions ``tools`` (llama-swap's rule); with neither, None (unknown)."""
    data = json_object(body)
    if data is None:
        return None
    modalities = data.get("modalities")
    said = modalities if isinstance(modalities, dict) else {}
    inputs = ("text", *(name for key, name in _PROPS_MODALITIES if said.get(key) is True))
    caps, template = data.get("chat_template_caps"), data.get("chat_template")
    tools: bool | None = None
    if isinstance(caps, dict) and caps:
        tools = caps.get("supports_tools") is True and caps.get("supports_tool_calls") is True
    elif isinstance(template, str):
        tools = "tools" in template
    return inputs, tools


def ollama_context(body: bytes, upstream_name: str) -> int | None:
    """``context_length`` of the loaded model in Ollama's ``/api/ps`` (same selection rule)."""
    data = json_object(body)
    models = data.get("models") if data else None
    if not isinstance(models, list):
        return None
    rows = [m for m in models if isinstance(m, dict)]
    for row in rows:
        if upstream_name in (row.get("name"), row.get("model")):
            return positive_int(row.get("context_length"))
    return positive_int(rows[0].get("context_length")) if len(rows) == 1 else None
