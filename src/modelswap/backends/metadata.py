"""Pure parsers shared by the adapters for what a backend says about its model: JSON bodies and
the OpenAI-style ``/v1/models`` list (each adapter reads its own endpoints: llama.cpp's
``/props``, Ollama's ``/api/ps``). Every number goes through :func:`positive_int`; anything else
is "unknown"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from modelswap import jsonsafe

MAX_SANE = 2**31


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
