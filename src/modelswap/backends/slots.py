"""llama.cpp's slots API, for keeping a prompt cache across a swap (issue 30; docs/backends.md
§8, "Slots").

``GET /slots`` lists each slot (``id``, ``is_processing``; once a task has used it, its
``id_task`` and the tokens its cache holds: ``n_prompt_tokens`` in the builds of 2025-26,
``n_past`` or ``tokens_cached`` in older ones). ``POST /slots/{id}?action=save`` with
``{"filename": F}`` writes that slot's cache to ``F`` inside the server's ``--slot-save-path``
and answers ``{n_saved, n_written, timings: {save_ms}}``; ``action=restore`` reads it back
(``{n_restored, n_read, timings: {restore_ms}}``); ``action=erase`` empties the slot. A server
started without a save path answers 501.

The parsers are pure and return None (or an error text) rather than raise; :class:`SlotClient`
makes the requests, each bounded by the timeout its caller gives and a body cap.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from modelswap.backends.configured import flag_values
from modelswap.bounded_read import BodyOverLimitError, read_capped
from modelswap.reported import NO_SLOTS_API, SlotFileAction, SlotState

MAX_BODY = 4 * 1024 * 1024  # /slots repeats every slot's sampling parameters
TOKEN_FIELDS = ("n_prompt_tokens", "n_past", "tokens_cached")
NOT_SERVED = (404, 405, 501)  # no /slots: another server, or llama-server --no-slots


def save_path(argv: Sequence[str]) -> str | None:
    """The ``--slot-save-path`` a command line gives its llama-server (the last one wins)."""
    return flag_values(argv, {"--slot-save-path": "path"}).get("path") or None


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def parse_slots(body: bytes) -> list[SlotState] | None:
    """``GET /slots`` as :class:`SlotState` rows; None when it is not a list of slots."""
    try:
        data = json.loads(body)
    except ValueError:
        return None
    if not isinstance(data, list):
        return None
    slots: list[SlotState] = []
    for row in data:
        if not isinstance(row, dict):
            continue
        slot_id = _count(row.get("id"))
        if slot_id is None:
            continue
        tokens = next((n for key in TOKEN_FIELDS if (n := _count(row.get(key))) is not None), None)
        processing = row.get("is_processing")
        if not isinstance(processing, bool):  # very old builds: state 0 idle, 1 processing
            processing = row.get("state") not in (None, 0)
        slots.append(SlotState(slot_id, processing, tokens, _count(row.get("id_task"))))
    return slots


def parse_action(slot: int, status: int, body: bytes, action: str) -> SlotFileAction:
    """A save or restore answer. ``action``: ``save`` or ``restore``."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    if status != 200 or not isinstance(data, dict):
        return SlotFileAction(slot, error=_error_text(status, data))
    tokens_key, bytes_key = (
        ("n_saved", "n_written") if action == "save" else ("n_restored", "n_read")
    )
    tokens, size = _count(data.get(tokens_key)), _count(data.get(bytes_key))
    if tokens is None or size is None:
        return SlotFileAction(slot, error=f"the answer has no {tokens_key}/{bytes_key}")
    timings = data.get("timings")
    ms = timings.get(f"{action}_ms") if isinstance(timings, dict) else None
    ms = float(ms) if isinstance(ms, int | float) and not isinstance(ms, bool) else None
    return SlotFileAction(slot, tokens, size, ms)


def _error_text(status: int, data: object) -> str:
    message = None
    if isinstance(data, Mapping):
        error = data.get("error")
        message = error.get("message") if isinstance(error, Mapping) else error
    text = f"answered {status}"
    return f"{text}: {str(message)[:200]}" if message else text


class SlotClient:
    """Asks one backend (its ``proxy`` URL) about its slots, through an injected session."""

    def __init__(self, session: aiohttp.ClientSession, *, max_body: int = MAX_BODY) -> None:
        self._session = session
        self._max_body = max_body

    async def slots(self, base: str, api_key: str | None, seconds: float) -> list[SlotState] | str:
        """Every slot, or why they could not be listed (no /slots: not llama.cpp, or started
        with --no-slots; no answer). Never raises but CancelledError."""
        try:
            async with asyncio.timeout(seconds):
                status, body = await self._call("GET", base + "/slots", api_key, None)
        except TimeoutError:
            return f"GET /slots: no answer within {seconds:.3g} s"
        except (aiohttp.ClientError, OSError, BodyOverLimitError) as exc:
            return f"GET /slots: {str(exc) or type(exc).__name__}"
        if status in NOT_SERVED:
            return f"{NO_SLOTS_API} (GET /slots answered {status})"
        found = parse_slots(body) if status == 200 else None
        if found is None:
            return f"GET /slots answered {status} without a list of slots"
        return found

    async def file_action(
        self,
        base: str,
        api_key: str | None,
        slot: int,
        action: str,
        filename: str,
        seconds: float,
    ) -> SlotFileAction:
        """``save`` or ``restore`` ``slot`` to/from ``filename``; never raises but
        CancelledError (a timeout or a refused connection is the answer's ``error``)."""
        url = f"{base}/slots/{slot}?action={action}"
        try:
            async with asyncio.timeout(seconds):
                status, body = await self._call("POST", url, api_key, {"filename": filename})
        except TimeoutError:
            return SlotFileAction(slot, error=f"no answer within {seconds:.3g} s")
        except (aiohttp.ClientError, OSError, BodyOverLimitError) as exc:
            return SlotFileAction(slot, error=str(exc) or type(exc).__name__)
        return parse_action(slot, status, body, action)

    async def erase(self, base: str, api_key: str | None, slot: int, seconds: float) -> bool:
        """Empty ``slot`` (after a restore that failed part way); True if it answered 200."""
        try:
            async with asyncio.timeout(seconds):
                status, _ = await self._call(
                    "POST", f"{base}/slots/{slot}?action=erase", api_key, {}
                )
        except (TimeoutError, aiohttp.ClientError, OSError, BodyOverLimitError):
            return False
        return status == 200

    async def _call(
        self, method: str, url: str, api_key: str | None, body: dict[str, Any] | None
    ) -> tuple[int, bytes]:
        if urlsplit(url).scheme not in ("http", "https"):
            raise aiohttp.InvalidURL(url)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        async with self._session.request(
            method, url, json=body, headers=headers, allow_redirects=False
        ) as response:
            return response.status, await read_capped(response.content.iter_any(), self._max_body)
