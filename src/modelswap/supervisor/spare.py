"""Starting backends under keepers, from a spare keeper when one is ready (``spareKeeper``).

A direct keeper start costs a Python interpreter's start (~20 ms) and, with a cgroup, the first
migration into it after a quiet moment (~15 ms: the kernel's cgroup_threadgroup_rwsem). The
spare pays both ahead: a keeper started with ``--spare`` forks the backend's process at once,
which joins a cgroup of its own (``modelswap-<gateway pid>-<n>-spare``: cgroup v2 does not
allow renaming one) and waits for the command; :meth:`Launcher.spawn` hands it over.

One spare at a time, made once the gateway listens (:meth:`Launcher.begin`) and again
REFILL_AFTER seconds after a start ends, but only when no start is running (it would compete
with that start, or the requests that waited for it, for the CPU).
A spare is a keeper like any other: its socket's end-of-file, the parent-death signal and its
parent changing end it with the gateway. One that died (killed by someone) is found by its exit
and replaced; a start never waits on one that is not alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine, Mapping, Sequence
from pathlib import Path

from modelswap.supervisor import cgroups, keeper_client
from modelswap.supervisor.containment import Containment

log = logging.getLogger(__name__)

SPARE_NAME = "spare"  # the model part of a spare's cgroup name
RETRIES = 3  # spares in a row that may fail (killed as they start) before waiting for a start
RETRY_AFTER = 1.0  # seconds, times the failures so far
REFILL_AFTER = 0.5  # seconds after a start ends: its first requests go first


class Launcher:
    """Starts each backend under a keeper: the spare's when one is ready, else a fresh one."""

    def __init__(self, containment: Containment, *, spare: bool = False) -> None:
        self.containment = containment
        self.enabled = spare
        self._begun = False  # the gateway listens: spares may be made
        self._closed = False
        self._running = 0  # starts not yet READY or failed
        self._spare: keeper_client.Spare | None = None
        self._making: asyncio.Task[keeper_client.Spare | None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # discards under way
        self._watcher: asyncio.Task[None] | None = None  # the ready spare's exit
        self._failures = 0  # spares in a row that could not be made

    @property
    def spare(self) -> keeper_client.Spare | None:
        """The spare ready for the next start, if any."""
        return self._spare

    def begin(self) -> None:
        """The gateway listens: make the first spare (in the background)."""
        self._begun = True
        self._refill()

    def reconfigure(self, spare: bool) -> None:
        """A reload: the spare there is goes; a new one is made if ``spare``."""
        self.enabled = spare
        old = self._take()
        if old is not None:
            self._background(self._discard(old))
        else:
            self._refill()

    def start_began(self) -> None:
        self._running += 1

    def start_ended(self, _task: object = None) -> None:
        """A start reached READY or failed (or was stopped): the next spare, once the requests
        that waited for that start have had the CPU (a keeper's start takes ~20 ms of it)."""
        self._running = max(0, self._running - 1)
        self._failures = 0
        asyncio.get_running_loop().call_later(REFILL_AFTER, self._refill)

    async def spawn(
        self, model: str, argv: Sequence[str], *, env: Mapping[str, str]
    ) -> keeper_client.Kept:
        """Start ``argv`` under a keeper, in a cgroup of its own where ``containment`` allows.

        Raises as :func:`keeper_client.spawn` does; whatever cgroup it made is gone by then."""
        if self._making is not None and not self._making.done():
            with contextlib.suppress(Exception):  # ready in milliseconds: worth the wait
                await asyncio.shield(self._making)
        spare = self._take()
        if spare is not None and spare.alive():
            try:
                proc = await spare.use(argv, env=env)
            except keeper_client.KeeperError as exc:
                log.warning(
                    "model %s: the spare keeper failed (%s); starting a fresh one", model, exc
                )
                await self._remove(spare.cgroup)
            except BaseException:
                await self._remove(spare.cgroup)
                raise
            else:
                log.info("model %s starts under the spare keeper (cgroup %s)", model, spare.cgroup)
                return proc
        elif spare is not None:
            self._background(self._discard(spare))
        cgroup = self.containment.new_cgroup(model)
        try:
            return await keeper_client.spawn(argv, env=env, cgroup=cgroup)
        except BaseException:
            await self._remove(cgroup)
            raise

    async def close(self) -> None:
        """Shutdown: no more spares; the one there is ends."""
        self._closed = True
        making = self._making
        if making is not None:
            making.cancel()
            with contextlib.suppress(BaseException):
                await making
        spare = self._take()
        if spare is not None:
            await self._discard(spare, refill=False)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- the spare's life -----------------------------------------------------------------------

    def _refill(self) -> None:
        if (
            self.enabled
            and self._begun
            and not self._closed
            and self._running == 0
            and self._spare is None
            and (self._making is None or self._making.done())
        ):
            self._making = asyncio.get_running_loop().create_task(self._make(), name="spare-keeper")

    async def _make(self) -> keeper_client.Spare | None:
        cgroup = self.containment.new_cgroup(SPARE_NAME)
        try:
            spare = await keeper_client.spawn_spare(cgroup)
        except keeper_client.KeeperError as exc:
            await self._remove(cgroup)
            self._failures += 1
            if self._failures <= RETRIES:  # else: again after the next start, if any
                log.warning("could not start a spare keeper (%s); trying again", exc)
                asyncio.get_running_loop().call_later(RETRY_AFTER * self._failures, self._refill)
            else:
                log.warning("could not start a spare keeper: %s", exc)
            return None
        except BaseException:
            await self._remove(cgroup)
            raise
        if self._closed or not self.enabled:
            await self._discard(spare, refill=False)
            return None
        self._failures = 0
        self._spare = spare
        log.debug("spare keeper %d ready (cgroup %s)", spare.keeper_pid, spare.cgroup)
        self._watcher = asyncio.get_running_loop().create_task(self._watch(spare))
        return spare

    def _take(self) -> keeper_client.Spare | None:
        """The ready spare, no longer watched here (its new owner waits for its exit)."""
        spare, self._spare = self._spare, None
        if self._watcher is not None:
            self._watcher.cancel()
            self._watcher = None
        return spare

    async def _watch(self, spare: keeper_client.Spare) -> None:
        """A spare that exits before it is used (killed by someone): clear up, replace it."""
        await spare.gone()
        if self._spare is not spare:
            return
        self._spare = None
        self._watcher = None
        await self._discard(spare)  # its waiting child ends too once our pipe copy closes
        code = spare.keeper.returncode
        log.warning("the spare keeper %d exited (%s) unused; replaced", spare.keeper_pid, code)

    async def _discard(self, spare: keeper_client.Spare, *, refill: bool = True) -> None:
        await spare.discard()
        await self._remove(spare.cgroup)
        if refill:
            self._refill()

    async def _remove(self, cgroup: Path | None) -> None:
        if cgroup is not None:
            await asyncio.to_thread(cgroups.end, cgroup)

    def _background(self, work: Coroutine[object, object, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
