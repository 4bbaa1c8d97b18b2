"""A llama.cpp model's prompt cache kept across a swap (issue 30; docs/architecture.md, "The
prompt cache across a swap").

When a model whose ``promptCache`` is on stops from ready (a swap evicts it, its ttl ends, an
unload), :meth:`PromptCache.save` asks its backend to save each slot that holds a cached prompt
(``POST /slots/{id}?action=save``) before it is stopped; when it starts again, after it is
healthy and before it is ready (so before the first waiting request is sent),
:meth:`PromptCache.restore` asks the new backend to read them back. The backend writes and reads
the files itself, in its slot save path: the ``--slot-save-path`` its command names, else
``<stateDir>/prompt-cache``, handed to it as ``LLAMA_ARG_SLOT_SAVE_PATH`` (llama-server reads its
flags from ``LLAMA_ARG_*`` too; :meth:`PromptCache.environment`).

Correctness before speed: see :mod:`modelswap.supervisor.slotstore` (a file is restored only into
the model and command that wrote it, with the size and digest it was saved with; a restore the
backend refuses drops the file and empties the slot). Bounded: a save never takes more than
``saveTimeout`` seconds in all — a slot whose size, at the rate measured last time, cannot be
written in the time left is skipped, and a save still running at the ceiling is abandoned — and
a restore no more than ``restoreTimeout``. Nothing here fails a start or a stop: every problem
is a line in the report (:class:`CacheReport`), which the last-swap record, the log and the metrics
show.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from modelswap.config import ModelConfig
from modelswap.config.resolved import PromptCacheSettings
from modelswap.reported import (
    NO_SLOTS_API,
    CacheHazard,
    ModelMetadata,
    SlotFileAction,
    SlotState,
)
from modelswap.statefile import make_private_dir, tighten_path
from modelswap.supervisor import slotstore
from modelswap.supervisor.backend_needs import SlotApi
from modelswap.supervisor.cacheproof import Verdict, Verdicts
from modelswap.supervisor.slotstore import Rates, SavedSlot, SlotStore

log = logging.getLogger(__name__)

SAVE_PATH_ENV = "LLAMA_ARG_SLOT_SAVE_PATH"
ERASE_SECONDS = 2.0  # emptying a slot after a refused restore: a quick request
MIN_SECONDS = 0.05  # less time than this left: no request is begun

Result = Literal["saved", "kept", "restored", "skipped", "failed", "dropped"]


@dataclass(frozen=True, slots=True)
class SlotOutcome:
    """What became of one slot: ``saved``/``restored`` (done), ``kept`` (a slot unused since its
    restore: the file on disk is its cache still), ``skipped`` (the ceiling or the budget;
    the file, if any, stays), ``failed`` (the backend refused; nothing was kept), ``dropped``
    (a saved file that must not be restored: deleted)."""

    slot: int
    result: Result
    tokens: int = 0
    bytes: int = 0
    ms: float | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"slot": self.slot, "result": self.result}
        if self.tokens:
            out["tokens"] = self.tokens
        if self.bytes:
            out["bytes"] = self.bytes
        if self.ms is not None:
            out["ms"] = round(self.ms, 1)
        if self.reason:
            out["reason"] = self.reason
        return out


@dataclass(slots=True)
class CacheReport:
    """One save or restore of one model's slots. ``began``: monotonic; ``seconds``: how long
    it took in all; ``error``: why nothing could be done (the slots could not be listed)."""

    action: Literal["save", "restore"]
    model: str
    began: float
    seconds: float = 0.0
    slots: list[SlotOutcome] = field(default_factory=list)
    error: str | None = None

    def done(self) -> list[SlotOutcome]:
        return [s for s in self.slots if s.result in ("saved", "restored")]

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.done())

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.done())

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "model": self.model,
            "tokens": self.tokens,
            "slots": len(self.done()),
            "bytes": self.bytes,
            "ms": round(self.seconds * 1000, 1),
        }
        if self.slots:
            out["detail"] = [s.as_dict() for s in self.slots]
        if self.error:
            out["error"] = self.error
        return out

    def summary(self) -> str:
        """``saved 1512 tokens in 1 slot (35.1 MB, 182 ms); slot 1 skipped: …``"""
        verb = "saved" if self.action == "save" else "restored"
        done = self.done()
        count = len(done)
        text = (
            f"{verb} {self.tokens} tokens in {count} slot{'' if count == 1 else 's'} "
            f"({self.bytes / 1e6:.1f} MB, {self.seconds * 1000:.0f} ms)"
        )
        notes = [
            f"slot {s.slot} {s.result}" + (f": {s.reason}" if s.reason else "")
            for s in self.slots
            if s.result not in ("saved", "restored")
        ]
        if self.error:
            notes.append(self.error)
        return "; ".join([text, *notes])


Hazards = Callable[[ModelConfig, ModelMetadata | None, Iterable[str]], tuple[CacheHazard, ...]]


class PromptCache:
    """Saves and restores the slots of llama.cpp backends, and proves each restore by the
    first answer after it (:mod:`~modelswap.supervisor.cacheproof`). Built by the runtime,
    which gives it the store, the slots API, the command key
    (:func:`observe.capabilities.command_key`), the reading of ``--slot-save-path`` from a
    command line, the backends' adapters' word on which models have slots to save
    (``why_no_slots``) and on what stands against their cache (``hazards``), and the present
    settings."""

    def __init__(
        self,
        store: SlotStore,
        api: SlotApi,
        *,
        identity: Callable[[ModelConfig], str],
        save_path_of: Callable[[Sequence[str]], str | None],
        why_no_slots: Callable[[ModelConfig, ModelMetadata | None], str | None],
        hazards: Hazards,
        settings: Callable[[], PromptCacheSettings],
    ) -> None:
        self.store = store
        self._api = api
        self._identity = identity
        self._save_path_of = save_path_of
        self._why_no_slots = why_no_slots
        self._hazards = hazards
        self._settings = settings
        self._digests: dict[str, asyncio.Task[None]] = {}  # by path: being taken
        self.verdicts = Verdicts()
        self._start_hazards: dict[str, tuple[CacheHazard, ...]] = {}  # by model: its log's
        self._no_slots: dict[tuple[str, str], str] = {}  # (model, command key): its /slots' 404

    # ---- where -----------------------------------------------------------------------------

    def enabled(self, config: ModelConfig) -> bool:
        return config.prompt_cache and self.store.root is not None

    def keeps(self, config: ModelConfig, metadata: ModelMetadata | None) -> bool:
        """Whether the backend has a slots API to save (llama.cpp's) and saving goes on for it:
        not when its config, its command or its probe says it is another server (vLLM and
        SGLang keep their caches through their own KV connectors: docs/backends.md §21), nor
        when its ``GET /slots`` answered 404 once, nor once its restores proved never to work.
        Silent: the verdict says why."""
        return self.why_not(config, metadata) is None and self.verdicts.saving(
            config.id, self._identity(config)
        )

    def why_not(self, config: ModelConfig, metadata: ModelMetadata | None) -> str | None:
        """Why its backend has no slots to save: what its adapter says, or the ``GET /slots``
        its command answered 404 to once (asked again only after its command changes)."""
        return self._why_no_slots(config, metadata) or self._no_slots.get(
            (config.id, self._identity(config))
        )

    # ---- the proof -------------------------------------------------------------------------

    def started(self, config: ModelConfig, lines: Iterable[str]) -> None:
        """A start of ``config`` became healthy: what its log says against its cache (the
        sliding window, a recurrent memory), kept for its proofs."""
        if self.enabled(config):
            self._start_hazards[config.id] = self._hazards(config, None, lines)

    def hazards(
        self, config: ModelConfig, metadata: ModelMetadata | None
    ) -> tuple[CacheHazard, ...]:
        """What its command, its metadata and its start's log say against its cache."""
        found = {h.code: h for h in self._start_hazards.get(config.id, ())}
        for hazard in self._hazards(config, metadata, ()):
            found.setdefault(hazard.code, hazard)
        return tuple(found.values())

    def awaits_proof(self, model: str) -> bool:
        return self.verdicts.waiting(model)

    def answered(
        self,
        config: ModelConfig,
        metadata: ModelMetadata | None,
        cached: int | None,
        prompt: int | None,
        salted: bool,
    ) -> Verdict | None:
        """The first answer after a restore (its cached and prompt tokens, whether it was
        salted) proves it; the verdict when it did."""
        if not self.verdicts.waiting(config.id):
            return None
        key = self._identity(config)
        before = self.verdicts.get(config.id, key).last
        stopped = self.verdicts.answered(
            config.id,
            key,
            cached,
            prompt,
            salted=salted,
            hazards=self.hazards(config, metadata),
        )
        verdict = self.verdicts.get(config.id, key)
        if verdict.last is None or verdict.last is before:
            return None  # the answer did not say: nothing proved
        if stopped:
            self._stop_saving(config, verdict)
        return verdict

    def verdict(
        self, config: ModelConfig, metadata: ModelMetadata | None
    ) -> dict[str, object] | None:
        """What its restores proved (None: its prompt cache is off), for ``/running``."""
        if not self.enabled(config):
            return None
        why = self.why_not(config, metadata)
        if why is not None:
            return {"state": "unsupported", "saving": False, "reason": why}
        return self.verdicts.get(config.id, self._identity(config)).as_dict()

    def _stop_saving(self, config: ModelConfig, verdict: Verdict) -> None:
        """Said once: its restores never work, so its saves only cost swaps; its files go."""
        log.warning(
            "model %s: prompt cache: %d restores in a row did not work%s; no more saves until "
            "its command changes or the gateway restarts",
            config.id,
            verdict.failed_in_a_row,
            f" ({verdict.reason})" if verdict.reason else "",
        )
        for entry in self.store.entries(config.id):
            self.store.drop(entry, "its restores never worked")
        self.store.save()

    def folder(self, config: ModelConfig) -> Path | None:
        """The backend's slot save path: its command's ``--slot-save-path``, else the
        ``LLAMA_ARG_SLOT_SAVE_PATH`` of the model's ``env``, else ``<stateDir>/prompt-cache``."""
        named = self._save_path_of(config.cmd) or config.env.get(SAVE_PATH_ENV)
        if named:
            return Path(named).expanduser().absolute()
        return self.store.root

    def environment(self, config: ModelConfig) -> dict[str, str]:
        """What the backend's environment gains: ``LLAMA_ARG_SLOT_SAVE_PATH`` (the folder,
        made now) when the cache is on and the model names no save path of its own."""
        root = self.store.root
        if not self.enabled(config) or root is None or self.folder(config) != root:
            return {}
        try:
            make_private_dir(root)  # 0700: saved conversations are the user's alone (issue 38)
        except OSError as exc:
            log.warning("model %s: no prompt cache folder %s: %s", config.id, root, exc)
            return {}
        return {SAVE_PATH_ENV: str(root)}

    # ---- save ------------------------------------------------------------------------------

    async def save(
        self, config: ModelConfig, metadata: ModelMetadata | None = None
    ) -> CacheReport | None:
        """Save the slots of ``config``'s ready, drained backend (None: the cache is off, or
        saving stopped for it)."""
        folder = self.folder(config)
        if not self.enabled(config) or folder is None:
            return None
        key = self._identity(config)
        if not self.verdicts.saving(config.id, key):
            return None
        settings = self._settings()
        report = CacheReport("save", config.id, time.monotonic())
        deadline = report.began + settings.save_seconds
        try:
            listing = await self._api.slots(config.proxy, config.upstream_api_key, _left(deadline))
            if isinstance(listing, str) and listing.startswith(NO_SLOTS_API):
                self._no_slots[(config.id, key)] = listing  # not llama.cpp: never asked again
                return None
            if isinstance(listing, str):
                report.error = listing
                return report
            for slot in _most_recent_first(listing):
                outcome = await self._save_slot(config, key, folder, slot, deadline, settings)
                if outcome is not None:
                    report.slots.append(outcome)
            self._keep_budget(report, settings.disk_budget)
        finally:
            report.seconds = time.monotonic() - report.began
            self.store.save()
        if report.slots and all(s.result == "failed" for s in report.slots):
            hazards = self.hazards(config, metadata)
            if self.verdicts.save_failed(config.id, key, hazards):
                self._stop_saving(config, self.verdicts.get(config.id, key))
        return report

    async def _save_slot(
        self,
        config: ModelConfig,
        key: str,
        folder: Path,
        slot: SlotState,
        deadline: float,
        settings: PromptCacheSettings,
    ) -> SlotOutcome | None:
        final = folder / slotstore.file_name(config.id, key, slot.id)
        existing = self.store.get(final)
        if slot.processing:
            return SlotOutcome(slot.id, "skipped", reason="still processing")
        if slot.tokens == 0:
            return None  # empty: nothing to keep (a file of an earlier cache stays)
        if slot.tokens is None and existing is not None:
            # No task since this start: the slot holds what was restored from that file.
            return SlotOutcome(slot.id, "kept", existing.tokens, existing.bytes)
        why_not = self._too_large(config.id, slot.tokens, deadline, settings)
        if why_not is not None:
            return SlotOutcome(slot.id, "skipped", slot.tokens or 0, reason=why_not)
        part = final.with_name(slotstore.part_name(final.name, secrets.token_hex(4)))
        began = time.monotonic()
        answer = await self._api.file_action(
            config.proxy, config.upstream_api_key, slot.id, "save", part.name, _left(deadline)
        )
        try:
            return await self._check_saved(config, key, final, part, answer, deadline, began)
        finally:
            slotstore.remove(part)  # renamed when it was kept; else a partial file

    async def _check_saved(
        self,
        config: ModelConfig,
        key: str,
        final: Path,
        part: Path,
        answer: SlotFileAction,
        deadline: float,
        began: float,
    ) -> SlotOutcome | None:
        slot = answer.slot
        if answer.error is not None:
            timed_out = answer.error.startswith("no answer within")
            result: Result = "skipped" if timed_out else "failed"
            reason = "not written within saveTimeout" if timed_out else answer.error
            return SlotOutcome(slot, result, reason=reason)
        if answer.tokens == 0:
            return None
        size = slotstore.file_size(part)
        if size != answer.bytes:
            return SlotOutcome(
                slot,
                "failed",
                reason=f"the file has {size} bytes, the backend wrote {answer.bytes}",
            )
        os.replace(part, final)  # one folder: a rename
        # The backend wrote it under its own umask (the keeper gives it 077; one started by
        # hand may not): a saved conversation is readable by this user only (issue 38).
        with contextlib.suppress(OSError):
            tighten_path(final)
        now = time.time()
        seconds = max(time.monotonic() - began, 1e-6)
        entry = SavedSlot(
            final.name,
            str(final.parent),
            config.id,
            key,
            slot,
            answer.tokens,
            answer.bytes,
            slotstore.PENDING,
            now,
            now,
        )
        self.store.record(entry)
        self._take_digest(entry)
        old = self.store.rates(config.id)
        self.store.measured(
            config.id,
            Rates(
                answer.bytes / answer.tokens,
                answer.bytes / seconds,
                old.read_bytes_per_second if old else None,
            ),
        )
        return SlotOutcome(slot, "saved", answer.tokens, answer.bytes, seconds * 1000)

    def _take_digest(self, entry: SavedSlot) -> None:
        """Read the saved file's SHA-256 in a thread, off the swap's path: the backend is
        stopped meanwhile. Until it is recorded the file is not restored (a restore waits for
        it, bounded), and an index saved without it drops the file when next read."""
        path = str(entry.path)

        async def take() -> None:
            try:
                found = await asyncio.to_thread(slotstore.digest, entry.path)
            except OSError as exc:
                if self.store.get(entry.path) is entry:
                    self.store.drop(entry, f"cannot read it: {exc}")
                return
            finally:
                if self._digests.get(path) is task:
                    del self._digests[path]
            if self.store.get(entry.path) is entry:  # not replaced or dropped meanwhile
                self.store.record(replace(entry, digest=found))
                self.store.save()

        task = asyncio.get_running_loop().create_task(take(), name=f"digest:{entry.name}")
        self._digests[path] = task

    async def _digest_of(self, entry: SavedSlot, deadline: float) -> SavedSlot | None:
        """``entry`` with its digest, waiting for one still being taken (until ``deadline``);
        None when there is none to trust."""
        task = self._digests.get(str(entry.path))
        if task is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(task), _left(deadline))
        found = self.store.get(entry.path)
        return found if found is not None and found.digest != slotstore.PENDING else None

    async def close(self, seconds: float = 10.0) -> None:
        """Let the digests still being taken finish (bounded), then save the index."""
        pending = list(self._digests.values())
        if pending:
            await asyncio.wait(pending, timeout=seconds)
        self.store.save()

    def _too_large(
        self, model: str, tokens: int | None, deadline: float, settings: PromptCacheSettings
    ) -> str | None:
        """Why a slot of ``tokens`` is not even begun: too large for the time left (at the rate
        the last save measured, with its digest read as fast again) or for the disk budget."""
        left = _left(deadline)
        if left < MIN_SECONDS:
            return "saveTimeout was spent on the slots before it"
        rates = self.store.rates(model)
        if tokens is None or rates is None:
            return None
        size = tokens * rates.bytes_per_token
        if size > settings.disk_budget:
            return f"~{size / 1e6:.0f} MB is more than the whole disk budget"
        if rates.write_bytes_per_second:
            needed = size / rates.write_bytes_per_second
            if needed > left:
                return (
                    f"~{size / 1e6:.0f} MB needs ~{needed:.1f} s, {left:.1f} s of saveTimeout left"
                )
        return None

    def _keep_budget(self, report: CacheReport, budget: int) -> None:
        dropped = {e.slot for e in self.store.keep_budget(budget) if e.model == report.model}
        if not dropped:
            return
        report.slots = [
            SlotOutcome(s.slot, "skipped", s.tokens, reason="larger than the disk budget")
            if s.result == "saved" and s.slot in dropped
            else s
            for s in report.slots
        ]

    # ---- restore ---------------------------------------------------------------------------

    async def restore(self, config: ModelConfig) -> CacheReport | None:
        """Restore the slots saved by this model and command into its new, healthy backend
        (None: the cache is off, or nothing was saved)."""
        if not self.enabled(config):
            return None
        key = self._identity(config)
        self.verdicts.restored(config.id, key, 0)  # a proof still waiting is the last start's
        entries = self.store.entries(config.id)
        if not entries:
            return None
        report = CacheReport("restore", config.id, time.monotonic())
        deadline = report.began + self._settings().restore_seconds
        try:
            for entry in entries:
                size = slotstore.file_size(entry.path) if entry.key == key else None
                why = slotstore.problem_with(entry, config.id, key, size)
                if why is not None:
                    self.store.drop(entry, why)
                    report.slots.append(
                        SlotOutcome(entry.slot, "dropped", entry.tokens, reason=why)
                    )
            wanted = sorted(self.store.entries(config.id), key=lambda e: -e.used_at)
            if not wanted:
                return report
            listing = await self._api.slots(config.proxy, config.upstream_api_key, _left(deadline))
            if isinstance(listing, str):
                report.error = listing
                return report
            ids = {s.id for s in listing}
            for entry in wanted:
                report.slots.append(await self._restore_one(config, entry, ids, deadline))
        finally:
            report.seconds = time.monotonic() - report.began
            self.store.save()
        self.verdicts.restored(config.id, key, report.tokens)
        return report

    async def _restore_one(
        self, config: ModelConfig, entry: SavedSlot, ids: set[int], deadline: float
    ) -> SlotOutcome:
        slot = entry.slot
        if slot not in ids:
            why = f"the backend has no slot {slot}"
            self.store.drop(entry, why)
            return SlotOutcome(slot, "dropped", entry.tokens, reason=why)
        rates = self.store.rates(config.id)
        left = _left(deadline)
        if left < MIN_SECONDS:
            return SlotOutcome(slot, "skipped", entry.tokens, reason="restoreTimeout was spent")
        if rates is not None and rates.read_bytes_per_second:
            needed = entry.bytes / rates.read_bytes_per_second  # checked, then read
            if needed > left:
                return SlotOutcome(
                    slot,
                    "skipped",
                    entry.tokens,
                    reason=f"needs ~{needed:.1f} s, {left:.1f} s of restoreTimeout left",
                )
        began = time.monotonic()
        checked = await self._digest_of(entry, deadline)
        if checked is None:
            why = "its digest was not taken"
            if self.store.get(entry.path) is not None:
                if str(entry.path) in self._digests:  # still being taken: it may serve later
                    return SlotOutcome(slot, "skipped", entry.tokens, reason=why + " in time")
                self.store.drop(entry, why)
            return SlotOutcome(slot, "dropped", entry.tokens, reason=why)
        entry = checked
        try:
            async with asyncio.timeout(_left(deadline)):
                found = await asyncio.to_thread(slotstore.digest, entry.path)
        except TimeoutError:
            return SlotOutcome(
                slot, "skipped", entry.tokens, reason="not checked within restoreTimeout"
            )
        except OSError as exc:
            self.store.drop(entry, f"cannot read it: {exc}")
            return SlotOutcome(slot, "dropped", entry.tokens, reason=f"cannot read it: {exc}")
        if found != entry.digest:
            why = "its bytes differ from those saved (corrupt or replaced)"
            self.store.drop(entry, why)
            return SlotOutcome(slot, "dropped", entry.tokens, reason=why)
        answer = await self._api.file_action(
            config.proxy, config.upstream_api_key, slot, "restore", entry.name, _left(deadline)
        )
        if answer.error is not None and answer.error.startswith("no answer within"):
            # The backend may still be reading it: a verified file restores whole or not at all.
            return SlotOutcome(
                slot, "skipped", entry.tokens, reason="not read within restoreTimeout"
            )
        if answer.error is not None or (answer.tokens, answer.bytes) != (entry.tokens, entry.bytes):
            why = answer.error or (
                f"the backend restored {answer.tokens} tokens from {answer.bytes} bytes, "
                f"{entry.tokens} from {entry.bytes} were saved"
            )
            await self._api.erase(config.proxy, config.upstream_api_key, slot, ERASE_SECONDS)
            self.store.drop(entry, f"the restore failed: {why}")
            return SlotOutcome(slot, "dropped", entry.tokens, reason=f"the restore failed: {why}")
        seconds = max(time.monotonic() - began, 1e-6)
        self.store.used(entry, time.time())
        old = self.store.rates(config.id)
        self.store.measured(
            config.id,
            Rates(
                entry.bytes / max(entry.tokens, 1),
                old.write_bytes_per_second if old else None,
                entry.bytes / seconds,
            ),
        )
        return SlotOutcome(slot, "restored", entry.tokens, entry.bytes, seconds * 1000)


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _most_recent_first(slots: Sequence[SlotState]) -> list[SlotState]:
    """The slots used last first (a larger task id is more recent), then those never said."""
    return sorted(slots, key=lambda s: (s.task is None, -(s.task or 0), s.id))
