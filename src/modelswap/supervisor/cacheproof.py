"""Whether a model's prompt cache kept across a swap works: each restore proved by the first
answer after it (issue 38, part 3; docs/troubleshooting.md, "The prompt cache does nothing").

A restore puts ``restored`` tokens back into a slot; the first answer after it says how many of
its prompt the backend took from its cache (llama.cpp's ``timings.cache_n``, OpenAI's
``usage.prompt_tokens_details.cached_tokens``). :func:`judge` compares the two: ``works``
(nearly all of what could be reused was), ``partly`` (some), ``fails`` (none). A model's
:class:`Verdict` is its last proof, with the reason where one is known (a
:class:`~modelswap.reported.CacheHazard` its backend's adapter read from its command line, its
log and ``/props``; a salted request). After :data:`STOP_AFTER` failed proofs in a row, with
none that worked since, saving stops for the model until its command changes or the gateway
restarts: a cache that is never reused only costs each swap its save.

Pure: no clock, no I/O; :class:`~modelswap.supervisor.promptcache.PromptCache` feeds it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from modelswap.reported import CacheHazard

State = Literal["unknown", "works", "partly", "fails", "unsupported"]

STOP_AFTER = 3  # failed proofs in a row: saving stops
WORKS_SHARE = 0.9  # of what could be reused: a few tokens are always evaluated again

SALTED = CacheHazard(
    "salted",
    "the first request after the restore carried a cache_salt: llama.cpp restores a slot "
    "without its salt, so a salted request never reuses it",
    "send the conversation that must survive a swap without cache_salt, or turn promptCache "
    "off for this model",
)
SAVE_FAILED = "the backend could not save its slots"
NOT_PROVED = "no restore has been proved yet: the first answer after one says"


def judge(restored: int, cached: int, prompt: int | None) -> State | None:
    """One proof: ``restored`` tokens were put back; the first answer after it took ``cached``
    of its ``prompt`` tokens (None: not said) from the cache. None: nothing could be reused
    (nothing was restored, or a prompt of one token), so nothing is proved."""
    reusable = restored if prompt is None else min(restored, prompt - 1)
    if reusable <= 0:
        return None
    if cached >= WORKS_SHARE * reusable:
        return "works"
    return "partly" if cached > 0 else "fails"


@dataclass(frozen=True, slots=True)
class Proof:
    """The last proof: what was restored, what the first answer took from the cache."""

    state: State
    restored: int
    cached: int
    prompt: int | None
    salted: bool = False

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "state": self.state,
            "restored_tokens": self.restored,
            "cached_tokens": self.cached,
        }
        if self.prompt is not None:
            out["prompt_tokens"] = self.prompt
        if self.salted:
            out["salted"] = True
        return out


@dataclass(slots=True)
class Verdict:
    """One model's prompt cache, as its restores proved it. ``key``: the command it is about
    (a changed command starts over); ``failed_in_a_row``: proofs that did not work since the
    last that did; ``saving``: False once saving stopped."""

    key: str
    state: State = "unknown"
    hazards: tuple[CacheHazard, ...] = ()
    reason: str | None = None
    fix: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    failed_in_a_row: int = 0
    saving: bool = True
    last: Proof | None = None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"state": self.state, "saving": self.saving}
        if self.reason:
            out["reason"] = self.reason
        elif self.state == "unknown":
            out["reason"] = NOT_PROVED
        if not self.saving:
            out["stopped"] = (
                f"saving stopped after {self.failed_in_a_row} restores in a row that did not "
                "work (until its command changes or the gateway restarts)"
            )
        if self.fix:
            out["fix"] = self.fix
        if self.counts:
            out["proofs"] = dict(self.counts)
        if self.last is not None:
            out["last"] = self.last.as_dict()
        if self.hazards:
            out["hazards"] = [h.as_dict() for h in self.hazards]
        return out


def _explained(verdict: Verdict, salted: bool) -> tuple[str | None, str | None]:
    """The reason and fix of a proof that did not work: the salt, else the first hazard."""
    known = (SALTED,) if salted else verdict.hazards
    if known:
        return known[0].reason, known[0].fix
    return None, None


class Verdicts:
    """Every model's :class:`Verdict`, and the restores still waiting for their proof."""

    def __init__(self, stop_after: int = STOP_AFTER) -> None:
        self._stop_after = stop_after
        self._by_model: dict[str, Verdict] = {}
        self._waiting: dict[str, int] = {}  # model -> tokens restored, not yet proved

    def get(self, model: str, key: str) -> Verdict:
        """``model``'s verdict for the command ``key`` (a fresh one when the command changed)."""
        verdict = self._by_model.get(model)
        if verdict is None or verdict.key != key:
            verdict = self._by_model[model] = Verdict(key)
            self._waiting.pop(model, None)
        return verdict

    def saving(self, model: str, key: str) -> bool:
        return self.get(model, key).saving

    def restored(self, model: str, key: str, tokens: int) -> None:
        """A restore put ``tokens`` back (0: nothing to prove; a proof still waiting is
        dropped: this start's slots are not the last one's)."""
        self.get(model, key)
        if tokens > 0:
            self._waiting[model] = tokens
        else:
            self._waiting.pop(model, None)

    def waiting(self, model: str) -> bool:
        return model in self._waiting

    def answered(
        self,
        model: str,
        key: str,
        cached: int | None,
        prompt: int | None,
        *,
        salted: bool = False,
        hazards: tuple[CacheHazard, ...] = (),
    ) -> bool:
        """The first answer after a restore: prove it. ``cached`` None: the backend did not
        say, and no later answer can (the slot moved on): the restore stays unproved. True
        when this proof stopped saving for the model."""
        restored = self._waiting.pop(model, None)
        if restored is None or cached is None:
            return False
        state = judge(restored, cached, prompt)
        if state is None:
            return False
        verdict = self.get(model, key)
        verdict.hazards = hazards
        verdict.last = Proof(state, restored, cached, prompt, salted)
        return self._record(verdict, state, salted)

    def save_failed(self, model: str, key: str, hazards: tuple[CacheHazard, ...]) -> bool:
        """A save whose every slot the backend refused, with a hazard that explains it (a
        save that fails for no known reason — a full disk — proves nothing of the cache).
        True when this stopped saving."""
        if not hazards:
            return False
        verdict = self.get(model, key)
        verdict.hazards = hazards
        return self._record(verdict, "fails", False, SAVE_FAILED)

    def _record(self, verdict: Verdict, state: State, salted: bool, what: str = "") -> bool:
        verdict.state = state
        verdict.counts[state] = verdict.counts.get(state, 0) + 1
        if state == "works":
            verdict.reason = verdict.fix = None
            verdict.failed_in_a_row = 0
            return False
        reason, fix = _explained(verdict, salted)
        verdict.reason = f"{what}: {reason}" if what and reason else reason or what or None
        verdict.fix = fix
        if state == "partly":
            return False
        verdict.failed_in_a_row += 1
        if verdict.saving and verdict.failed_in_a_row >= self._stop_after:
            verdict.saving = False
            return True
        return False
