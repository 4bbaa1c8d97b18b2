"""Saved llama.cpp slots on disk: which file holds whose prompt cache (issue 30).

A slot's cache is written by the backend itself (``POST /slots/{id}?action=save``) into its slot
save path, by default ``<stateDir>/prompt-cache``. This module keeps the index of those files,
``index.json`` in that folder (written whole, then renamed over the old one): for each file the
model, the :func:`command key <modelswap.observe.capabilities.command_key>` of the command that
wrote it, the slot, the tokens, the size and a SHA-256 of the bytes, and when it was saved and
last used.

Correctness before speed: a file is restored only into the model and command whose names it
carries (:func:`file_name`), and only if it still has the size and digest recorded
(:func:`problem_with`, :func:`digest`). Anything else is dropped (deleted). A disk budget is kept
by dropping the least recently used files first (:func:`over_budget`); a file whose model left
the config, had its command changed or turned its prompt cache off is dropped
(:meth:`SlotStore.forget_changed`). Files of ours that the index does not name (a save the
gateway did not live to record) are deleted when the index is read.

The pure parts (names, the budget, what is wrong with a file) are functions; the store does the
file operations, synchronously, none of them slow but :func:`digest` (run in a thread).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from modelswap.statefile import StateFile

log = logging.getLogger(__name__)

INDEX = "index.json"
FILE_VERSION = 1
PREFIX = "modelswap-"
SUFFIX = ".bin"
PART = ".part-"  # a save under way: renamed to its final name once checked
PENDING = ""  # the digest of a file just saved, while it is being read


def file_name(model: str, key: str, slot: int) -> str:
    """The file that holds ``slot`` of ``model`` run by the command whose key is ``key``: the
    names of two models or two commands never meet. Only ``[a-z0-9-.]``, as llama-server
    accepts (no path, no leading dot)."""
    owner = hashlib.sha256(f"{model}\0{key}".encode()).hexdigest()[:24]
    return f"{PREFIX}{owner}-slot{slot}{SUFFIX}"


def part_name(final: str, nonce: str) -> str:
    """Where a save is written before it is checked and renamed to ``final``."""
    return f"{final.removesuffix(SUFFIX)}{PART}{nonce}{SUFFIX}"


def ours(name: str) -> bool:
    return name.startswith(PREFIX) and name.endswith(SUFFIX)


@dataclass(frozen=True, slots=True)
class SavedSlot:
    """One saved slot. ``folder``: the backend's slot save path (absolute); ``used_at``: when
    it was saved or last restored (epoch seconds), the order the budget drops in."""

    name: str
    folder: str
    model: str
    key: str
    slot: int
    tokens: int
    bytes: int
    digest: str
    saved_at: float
    used_at: float

    @property
    def path(self) -> Path:
        return Path(self.folder) / self.name

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def problem_with(entry: SavedSlot, model: str, key: str, size: int | None) -> str | None:
    """Why ``entry`` must not be restored into ``model`` run by the command ``key`` (its file
    being ``size`` bytes, None: missing), or None when it may (its digest is checked apart)."""
    if entry.model != model:
        return f"it belongs to model {entry.model}"
    if entry.key != key or entry.name != file_name(model, key, entry.slot):
        return "it was saved by another command"
    if size is None:
        return "the file is missing"
    if size != entry.bytes:
        return f"the file is {size} bytes, {entry.bytes} were saved (truncated or replaced)"
    return None


def over_budget(entries: Iterable[SavedSlot], budget: int) -> list[SavedSlot]:
    """What to drop so the rest fit ``budget`` bytes: the least recently used first."""
    by_age = sorted(entries, key=lambda e: (e.used_at, e.saved_at, e.name))
    total = sum(e.bytes for e in by_age)
    dropped: list[SavedSlot] = []
    for entry in by_age:
        if total <= budget:
            break
        dropped.append(entry)
        total -= entry.bytes
    return dropped


def digest(path: Path) -> str:
    """SHA-256 of the file (blocking: call it in a thread)."""
    with path.open("rb") as fh:
        return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()


def file_size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def remove(path: Path) -> None:
    """Delete ``path`` if it is there (a failure is logged, never raised)."""
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        log.warning("cannot remove %s: %s", path, exc)


@dataclass(frozen=True, slots=True)
class Rates:
    """What a model's last save and restore measured, for the next one's estimate: the size
    of a token's cache, and the bytes a save wrote and checked, a restore checked and read, in
    a second."""

    bytes_per_token: float
    write_bytes_per_second: float | None = None
    read_bytes_per_second: float | None = None


class SlotStore:
    """The index of saved slots in ``root`` (None: nothing is kept, the prompt cache is off)."""

    def __init__(self, root: Path | None) -> None:
        self.root = root
        # A corrupt index is moved aside, a failed save retried: never off (statefile.py).
        self.file = (
            StateFile(root / INDEX, prefix=".index-", what="prompt-cache-index") if root else None
        )
        self._entries: dict[str, SavedSlot] = {}  # by path
        self._rates: dict[str, Rates] = {}
        self._load()

    # ---- reading -------------------------------------------------------------------------

    def entries(self, model: str | None = None) -> list[SavedSlot]:
        return [e for e in self._entries.values() if model is None or e.model == model]

    def get(self, path: Path) -> SavedSlot | None:
        return self._entries.get(str(path))

    def total_bytes(self) -> int:
        return sum(e.bytes for e in self._entries.values())

    def rates(self, model: str) -> Rates | None:
        return self._rates.get(model)

    # ---- changes -------------------------------------------------------------------------

    def record(self, entry: SavedSlot) -> None:
        self._entries[str(entry.path)] = entry

    def used(self, entry: SavedSlot, at: float) -> None:
        if str(entry.path) in self._entries:
            self._entries[str(entry.path)] = replace(entry, used_at=at)

    def drop(self, entry: SavedSlot, why: str) -> None:
        """Forget ``entry`` and delete its file."""
        self._entries.pop(str(entry.path), None)
        remove(entry.path)
        log.info(
            "model %s: dropped the saved slot %d (%s): %s", entry.model, entry.slot, entry.name, why
        )

    def measured(self, model: str, rates: Rates) -> None:
        self._rates[model] = rates

    def keep_budget(self, budget: int) -> list[SavedSlot]:
        """Drop the least recently used files until the rest fit ``budget``; what was dropped."""
        dropped = over_budget(self._entries.values(), budget)
        for entry in dropped:
            self.drop(entry, f"the disk budget ({budget} bytes) is full")
        return dropped

    def forget_changed(self, keys: Mapping[str, str]) -> None:
        """Drop what no model may restore any more: ``keys`` maps each model whose prompt
        cache is on to its present command key; every other file (a model gone, its cache
        turned off, its command changed) is deleted."""
        for entry in list(self._entries.values()):
            key = keys.get(entry.model)
            if key == entry.key:
                continue
            why = (
                "its command changed"
                if key is not None
                else "the model's prompt cache is off or the model is gone"
            )
            self.drop(entry, why)
        for model in [m for m in self._rates if m not in keys]:
            del self._rates[model]
        self.save()

    # ---- the index -----------------------------------------------------------------------

    def save(self) -> None:
        """Write the index (whole, then renamed over the old one, 0600); a failure is said
        once, counted and tried again later (:class:`StateFile`)."""
        if self.file is None:
            return
        data = {
            "version": FILE_VERSION,
            "files": [
                e.as_dict() for e in sorted(self._entries.values(), key=lambda e: str(e.path))
            ],
            "rates": {m: asdict(r) for m, r in sorted(self._rates.items())},
        }
        self.file.write(data, self.save)

    def _load(self) -> None:
        if self.file is None:
            return
        path = self.file.path
        files, rates = self.file.read(_index) or ([], {})
        for raw in files:
            entry = _entry(raw)
            if entry is None:
                log.warning("ignoring an unreadable entry in %s", path)
                continue
            if file_size(entry.path) is None:
                continue  # deleted by hand: nothing to restore
            self.record(entry)
        for model, raw in rates.items():
            found = _rates(raw)
            if found is not None:
                self._rates[str(model)] = found
        self._remove_unindexed()

    def _remove_unindexed(self) -> None:
        """Our files the index does not name in its folders: a save the gateway did not live to
        check, an entry that was unreadable. Never anyone else's files."""
        assert self.root is not None
        folders = {self.root, *(Path(e.folder) for e in self._entries.values())}
        for folder in folders:
            try:
                names = [p for p in folder.iterdir() if ours(p.name)]
            except OSError:
                continue
            for found in names:
                if str(found) not in self._entries:
                    log.info("removing %s: no saved slot of the index", found)
                    remove(found)


def _index(data: object) -> tuple[list[object], dict[str, object]]:
    """The index's files and rates; ValueError or TypeError when it is not one (corrupt)."""
    if not isinstance(data, dict) or data.get("version") != FILE_VERSION:
        raise ValueError(f"not a version {FILE_VERSION} index")
    return list(data.get("files") or []), dict(data.get("rates") or {})


def _entry(raw: object) -> SavedSlot | None:
    if not isinstance(raw, dict):
        return None
    try:
        entry = SavedSlot(
            name=str(raw["name"]),
            folder=str(raw["folder"]),
            model=str(raw["model"]),
            key=str(raw["key"]),
            slot=int(raw["slot"]),
            tokens=int(raw["tokens"]),
            bytes=int(raw["bytes"]),
            digest=str(raw["digest"]),
            saved_at=float(raw["saved_at"]),
            used_at=float(raw["used_at"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    if not ours(entry.name) or "/" in entry.name or not os.path.isabs(entry.folder):
        return None
    if not entry.digest.startswith("sha256:"):
        return None  # saved while its digest was being taken: it cannot be trusted
    return entry


def _rates(raw: object) -> Rates | None:
    if not isinstance(raw, dict):
        return None
    try:
        per_token = float(raw["bytes_per_token"])
        write = raw.get("write_bytes_per_second")
        read = raw.get("read_bytes_per_second")
        return Rates(
            per_token,
            None if write is None else float(write),
            None if read is None else float(read),
        )
    except (KeyError, TypeError, ValueError):
        return None
