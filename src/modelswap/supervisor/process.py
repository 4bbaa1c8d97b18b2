"""ManagedProcess: one backend server's whole lifecycle (docs/architecture.md, "Process lifecycle").

States: stopped → starting → ready → stopping → stopped, plus failed (carries a Diagnosis) and
shutdown. Every transition goes through :meth:`ManagedProcess._set_state`, which checks the
allowed-transitions table and publishes a ``process.state`` event. Lifecycle operations
serialise on one lock; the slow part of a start (spawn + health polling) runs in a stored task
so that :meth:`stop` can abort a start in progress.

The backend runs under a keeper (:mod:`modelswap.supervisor.keeper_program`, started by
:mod:`modelswap.supervisor.keeper_client`): a child subreaper, and where cgroup v2 allows it
the owner of the backend's own cgroup, that ends every process of the backend's tree before it
exits. ``pid`` is the backend's own; the tree snapshots, the orphan watchdog and the backend record
watch the keeper's tree, which also holds the helpers that reparented to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import signal
import socket
import time
from dataclasses import replace
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from modelswap.config import ModelConfig
from modelswap.errors import Diagnosis, ShuttingDownError, StartError
from modelswap.events import EventBus
from modelswap.reported import CapacityReceipt, ModelMetadata, Progress
from modelswap.states import ProcessState, can_transition
from modelswap.supervisor import cgroups, health, keeper_client, listening, sleepmode, tree
from modelswap.supervisor.backend_needs import Diagnoser, LogReader, Prober
from modelswap.supervisor.containment import Containment, subreaper_only
from modelswap.supervisor.leftovers import BackendRecord
from modelswap.supervisor.logs import LogBuffer
from modelswap.supervisor.promptcache import CacheReport, PromptCache
from modelswap.supervisor.reaper import Reaper
from modelswap.supervisor.spare import Launcher
from modelswap.supervisor.stops import StopRecord

log = logging.getLogger(__name__)

S = ProcessState
DIAGNOSIS_TAIL = 250
TREE_REFRESH_SECONDS = 1.0
LISTEN_HISTORY = 5
PROBE_DELAY = 0.05  # the metadata probe begins after the waiting requests were sent on
KEEPER_KILL_CEILING = 10.0  # only ends a hang: a keeper exits within its grace (1 s) and a kill
OWN_LINE_PREFIX = "[modelswap]"
LATE_RECEIPT_LINES = 200  # how many lines after READY may still carry the receipt (see _on_line)
# ModelConfig fields a running backend was started with: changing one means a restart.
PROCESS_FIELDS = ("cmd", "cmd_stop", "proxy", "env", "check_endpoint", "use_model_name")


class _StartFailed(Exception):
    def __init__(self, diagnosis: Diagnosis) -> None:
        self.diagnosis = diagnosis


class ManagedProcess:
    """Owns one backend OS process. Callers ask; this object decides.

    ``ensure_ready()`` by state: ready → returns at once; starting → waits for that start;
    stopped/failed → starts; stopping → waits for the stop, then starts; shutdown → raises
    :class:`ShuttingDownError`. A failed start raises :class:`StartError` carrying the diagnosis.

    ``state``, ``since``, ``pid`` and ``last_failure`` are snapshots: they may change as soon as
    the caller awaits anything.
    """

    def __init__(
        self,
        config: ModelConfig,
        *,
        events: EventBus,
        session: aiohttp.ClientSession,
        diagnoser: Diagnoser,
        log_reader: LogReader | None = None,
        prober: Prober | None = None,
        reaper: Reaper | None = None,
        record: BackendRecord | None = None,
        containment: Containment | None = None,
        launcher: Launcher | None = None,
        prompt_cache: PromptCache | None = None,
        stop_grace: float = 5.0,
        log_capacity: int = 500,
        readiness_history: tuple[list[float], list[float]] = ([], []),
    ) -> None:
        self.config = config
        self.model = config.id
        self._next_config: ModelConfig | None = None  # waits for the next start
        self.logs = LogBuffer(log_capacity)
        self._waker = health.Waker()
        self.logs.add_listener(self._on_line)
        self._events = events
        self._session = session
        self._diagnoser = diagnoser
        self._log_reader = log_reader
        self._prober = prober
        self._probe_task: asyncio.Task[None] | None = None
        self._start_failed_at: float | None = None
        self._reaper = reaper
        self._record = record  # pids in the state directory, for the next start (leftovers)
        # Starts the keeper (the gateway's spare when one is ready) and makes the cgroup.
        self._launcher = launcher or Launcher(containment or subreaper_only())
        self._stop_grace = stop_grace
        self._prompt_cache = prompt_cache
        # The prompt cache kept across a swap (issue 30): what the last stop saved and what
        # this start restored, for the last-swap record.
        self.cache_saved: CacheReport | None = None
        self.cache_restored: CacheReport | None = None
        self._lock = asyncio.Lock()
        self._state = S.STOPPED
        self._since = time.time()
        self._proc: keeper_client.Kept | None = None  # the backend, run by its keeper
        self._start_task: asyncio.Task[None] | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._monitor_task: asyncio.Task[None] | None = None
        self._tree: set[tree.ProcKey] = set()
        self._tag = ""  # the running start's (tree.new_tag)
        self.last_failure: Diagnosis | None = None
        self.last_stop: StopRecord | None = None  # why it last stopped, set by its owner
        self.started_at: float | None = None
        self.ready_at: float | None = None
        # Monotonic: when this start began, and when the backend's port first accepted a
        # connection (spawn → listening and listening → healthy are a start's timings).
        self._started_monotonic: float | None = None
        self.listening_at: float | None = None
        # Seconds from the start's beginning to listening, and from listening to a 2xx health
        # answer (llama.cpp loads after it binds), in the last starts: where the listen watcher
        # looks hardest next time (listening.due_window). Seeded from stats.json, so a restart
        # keeps them.
        self._listen_history = list(readiness_history[0][-LISTEN_HISTORY:])
        self._ready_history = list(readiness_history[1][-LISTEN_HISTORY:])
        self._listen_to_ready: float | None = None  # this start's, for the READY event
        # Ephemeral, per start: cleared before anything else when a new start begins.
        self.metadata: ModelMetadata | None = None
        self.capacity: CapacityReceipt | None = None
        # Lines printed before the port answered may be read after READY (the pipe is read by
        # another task, through the keeper): so many lines after READY still count as receipt.
        self._late_receipt_lines = 0
        self._start_lost = False  # the start has failed and its backend is being ended
        self.progress: Progress | None = None
        self.last_progress_at: float | None = None
        self.last_progress_line: str | None = None

    # ---- snapshots -----------------------------------------------------------------------

    @property
    def state(self) -> ProcessState:
        return self._state

    @property
    def since(self) -> float:
        return self._since

    @property
    def pid(self) -> int | None:
        """The backend's own pid (not its keeper's)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def keeper_pid(self) -> int | None:
        """The keeper's pid: the root of the backend's whole tree (supervisor/keeper_program.py)."""
        return self._proc.keeper_pid if self._proc is not None else None

    # ---- configuration ---------------------------------------------------------------------

    def reconfigure(self, config: ModelConfig) -> bool:
        """Take a new config for this model (live reload).

        What only matters per request or at the next start applies now. A changed command,
        address, environment, health endpoint or upstream name cannot apply to a backend that
        runs (or sleeps, or starts): the new config then waits for the next start and True is
        returned — the caller stops the model once it is idle. A failed model's backoff is
        cleared when its command changed: the fix may be in the new one.
        """
        changed = any(getattr(config, f) != getattr(self.config, f) for f in PROCESS_FIELDS)
        if changed and self._state in (S.STOPPED, S.FAILED):
            self._start_failed_at = None
        if not changed or self._state in (S.STOPPED, S.FAILED, S.SHUTDOWN):
            self.config, self._next_config = config, None
            return False
        live = {f: getattr(self.config, f) for f in (*PROCESS_FIELDS, "port")}
        self.config = replace(config, **live)
        self._next_config = config
        return True

    # ---- lifecycle -----------------------------------------------------------------------

    async def ensure_ready(self) -> None:
        while True:
            async with self._lock:
                if self._state is S.SLEEPING:
                    await self._wake_locked()
                if self._state is S.READY:
                    return
                if self._state is S.SHUTDOWN:
                    raise ShuttingDownError()
                self._raise_during_backoff()
                if self._state is not S.STARTING:
                    self._begin_start()
                task = self._start_task
            assert task is not None
            # Shielded: one waiter going away must not abort a start others wait for.
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if not task.cancelled() or (current is not None and current.cancelling()):
                    raise  # we were cancelled, not the start
            state = self.state  # re-read: it changed while we waited
            if state is S.READY:
                return
            if state is S.FAILED and self.last_failure is not None:
                raise StartError(self.model, self.last_failure)
            if state is S.SHUTDOWN:
                raise ShuttingDownError()
            if task.cancelled():
                raise StartError(
                    self.model,
                    Diagnosis(
                        "start_aborted",
                        "The start was aborted because the model was stopped.",
                        fix="retry the request.",
                    ),
                )

    def _raise_during_backoff(self) -> None:
        """A start that failed is not retried in a loop: for ``failureBackoff`` seconds the
        same diagnosis is the answer, then a fresh attempt is made."""
        failed_at, failure = self._start_failed_at, self.last_failure
        if self._state is not S.FAILED or failed_at is None or failure is None:
            return
        if time.monotonic() - failed_at < self.config.failure_backoff:
            raise StartError(self.model, failure)

    async def sleep(self) -> bool:
        """Evict gently: put a ready sleep-mode backend to sleep (vLLM level 1: its GPU memory
        is freed, its weights kept in host memory). Anything else — a model already asleep
        (evicting it again means freeing its host memory too), or a sleep that fails — is
        stopped. True if it now sleeps."""
        async with self._lock:
            if self._state is S.READY and self.config.sleep_mode:
                if await sleepmode.put_to_sleep(self._session, self.config.proxy):
                    self.logs.append("[modelswap] asleep (vLLM sleep mode, level 1)")
                    self._set_state(S.SLEEPING)
                    return True
                self.logs.append("[modelswap] the backend would not sleep; stopping it")
            await self._stop_locked(S.STOPPED)
            return False

    async def _wake_locked(self) -> None:
        """Wake a sleeping backend; if it cannot wake, end it so a fresh start follows."""
        started = time.monotonic()
        health = (
            self.config.proxy + self.config.check_endpoint if self.config.check_endpoint else None
        )
        if await sleepmode.wake(self._session, self.config.proxy, health):
            self.logs.append(f"[modelswap] awake after {time.monotonic() - started:.2f} s")
            self._set_state(S.READY, woke=True)
            return
        self.logs.append("[modelswap] the backend did not wake; restarting it")
        await self._stop_locked(S.STOPPED)

    def record_stop(self, record: StopRecord) -> None:
        """Why the backend was stopped (or put to sleep), as its owner says: kept as
        ``last_stop`` until the next start, and written to its log. Ignored once it runs
        again (a stale record)."""
        if self._state not in (S.STOPPED, S.SLEEPING):
            return
        self.last_stop = record
        word = "asleep" if self._state is S.SLEEPING else "stopped"
        self.logs.append(f"[modelswap] {word}: {record.summary()}")

    async def stop(self) -> None:
        """Stop the backend (``cmdStop`` or SIGTERM to its group, then SIGKILL). Idempotent."""
        async with self._lock:
            await self._stop_locked(S.STOPPED)

    async def shutdown(self) -> None:
        """Stop for good: any later ``ensure_ready`` raises :class:`ShuttingDownError`."""
        async with self._lock:
            await self._stop_locked(S.SHUTDOWN)

    async def _stop_locked(self, final: ProcessState) -> None:
        if self._state in (S.STARTING, S.READY, S.SLEEPING):
            # A ready backend's prompt cache is saved (a command that changed would never
            # restore it: its new config waits in _next_config).
            save = self._state is S.READY and self._next_config is None
            self._set_state(S.STOPPING)
            task = self._start_task
            if task is not None and not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if save:
                await self._save_prompt_cache()
            await self._terminate()
            self._set_state(final)
        elif self._state is S.FAILED:
            await self._terminate()  # normally nothing is left; make sure of it
            self._set_state(final)
        elif self._state is S.STOPPED and final is S.SHUTDOWN:
            self._set_state(final)

    # ---- the start -------------------------------------------------------------------------

    def _begin_start(self) -> None:
        if self._next_config is not None:
            self.config, self._next_config = self._next_config, None
        self.metadata = None  # first of all: no stale receipt may survive a restart
        self.capacity = None
        self._late_receipt_lines = 0
        self.progress = None
        self.last_progress_at = None
        self.last_progress_line = None
        self.last_failure = None
        self.last_stop = None
        self._start_failed_at = None
        self._start_lost = False
        self.logs.clear()
        self.started_at = time.time()
        self._started_monotonic = time.monotonic()
        self.ready_at = None
        self.listening_at = None
        self._listen_to_ready = None
        self.cache_restored = None
        self._set_state(S.STARTING)
        self._start_task = asyncio.get_running_loop().create_task(
            self._run_start(), name=f"start:{self.model}"
        )
        self._launcher.start_began()  # no spare is made while a start runs
        self._start_task.add_done_callback(self._launcher.start_ended)

    async def _run_start(self) -> None:
        try:
            await self._spawn()
            await self._wait_healthy()
            await self._restore_prompt_cache()  # before READY: before any request is sent
        except _StartFailed as failed:
            self._start_lost = True  # what it prints while it is ended is no longer progress
            await self._terminate()
            self._start_failed_at = time.monotonic()
            self._fail(failed.diagnosis)
            return
        except asyncio.CancelledError:
            raise  # stop() aborted us; it terminates the process
        except Exception as exc:  # a bug must not leave the child behind
            log.exception("model %s: start failed unexpectedly", self.model)
            await self._terminate()
            self._fail(Diagnosis("internal_error", f"modelswap failed to start it: {exc!r}"))
            return
        self.ready_at = time.time()
        assert self.started_at is not None
        assert self._started_monotonic is not None
        elapsed = self.ready_at - self.started_at
        listening = (
            None if self.listening_at is None else self.listening_at - self._started_monotonic
        )
        where = "" if listening is None else f" (its port listened after {listening:.3f} s)"
        self.logs.append(f"[modelswap] ready after {elapsed:.3f} s{where}")
        if self._log_reader is not None:
            self.capacity = self._log_reader.capacity(self.logs.tail())
            self._late_receipt_lines = LATE_RECEIPT_LINES
        timing = {} if listening is None else {"listening_seconds": round(listening, 4)}
        if listening is not None and self._listen_to_ready is not None:
            timing["listening_to_ready_seconds"] = round(self._listen_to_ready, 4)
        if listening is not None:  # when the next start's port is due (listening.due_window)
            self._listen_history = [*self._listen_history, listening][-LISTEN_HISTORY:]
        self._set_state(S.READY, start_seconds=round(elapsed, 4), **timing)
        loop = asyncio.get_running_loop()
        self._monitor_task = loop.create_task(self._watch_exit(), name=f"monitor:{self.model}")
        if self._prober is not None:
            # Concurrently with the first requests: the probe never delays serving.
            self._probe_task = loop.create_task(self._probe(), name=f"probe:{self.model}")

    async def _probe(self) -> None:
        assert self._prober is not None
        proc = self._proc
        # After the requests that waited for this start: theirs reach the backend first.
        await asyncio.sleep(PROBE_DELAY)
        found = await self._prober.probe(self.config)
        if found is not None and proc is self._proc and self._state is S.READY:
            self.metadata = found
            self._events.publish("process.metadata", model=self.model, metadata=found)

    def _on_line(self, line: str) -> None:
        if line.startswith(OWN_LINE_PREFIX):
            return  # modelswap's own notes are not the backend's output or progress
        self._waker.output()
        if self._log_reader is None:
            return
        if self._state is S.READY and self._late_receipt_lines > 0:
            self._late_receipt_lines -= 1
            if self._log_reader.capacity([line]) is not None:  # the whole tail: last one wins
                self.capacity = self._log_reader.capacity(self.logs.tail())
            return
        if self._state is not S.STARTING or self._start_lost:
            return
        found = self._log_reader.progress(line)
        if found is not None:
            self.progress = found
            self.last_progress_at = time.time()
            self.last_progress_line = line
            self._events.publish(
                "process.progress",
                model=self.model,
                phase=found.label(),
                progress=found.fraction,
                line=line,
            )

    async def _spawn(self) -> None:
        cfg = self.config
        self._check_port_free()
        # The tag every process of this start inherits: what a killed keeper's helpers are
        # found by, once no snapshot can (tree.end_tagged).
        self._tag = tree.new_tag()
        env = {**os.environ, **cfg.env, tree.TAG_ENV: self._tag}
        if self._prompt_cache is not None:
            env.update(self._prompt_cache.environment(cfg))  # its slot save path
        self.logs.append(f"[modelswap] starting {cfg.cmd[0]} ({len(cfg.cmd) - 1} arguments)")
        try:  # the launcher removes the cgroup it made if this raises
            proc = await self._launcher.spawn(self.model, cfg.cmd, env=env)
        except OSError as exc:  # the command cannot be executed: as a direct spawn reports it
            raise _StartFailed(self._diagnoser.spawn_error(cfg.cmd[0], exc)) from exc
        except keeper_client.KeeperError as exc:
            raise _StartFailed(
                Diagnosis(
                    "keeper_failed",
                    f"modelswap could not start the process that runs the backend: {exc}",
                    fix="check that modelswap's own Python interpreter can be run.",
                )
            ) from exc
        self._proc = proc
        cgroup = proc.cgroup
        if cgroup is not None and not proc.in_cgroup:
            self.logs.append(f"[modelswap] could not place the backend in cgroup {cgroup}")
        # The keeper is the root of the whole tree: orphaned helpers reparent to it; the
        # cgroup holds even those that no snapshot sees.
        if self._reaper is not None:
            self._reaper.register(
                proc.keeper_pid, cgroup if proc.in_cgroup else None, tag=self._tag
            )
        if self._record is not None:
            self._record.add(self.model, proc.keeper_pid, tag=self._tag)
        self._pump_task = asyncio.get_running_loop().create_task(
            self._pump_output(proc), name=f"output:{self.model}"
        )

    async def _remove_cgroup(self, cgroup: Path | None) -> None:
        if cgroup is not None:
            await asyncio.to_thread(cgroups.end, cgroup)

    def _check_port_free(self) -> None:
        port = self.config.port
        host = urlsplit(self.config.proxy).hostname
        if port is None or host is None:
            return
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:  # anything else is for the backend to report
                    raise _StartFailed(self._diagnoser.port_taken(host, port)) from exc

    async def _pump_output(self, proc: keeper_client.Kept) -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            self.logs.feed(chunk)
        self.logs.flush()

    async def _wait_healthy(self) -> None:
        """Poll readiness under two clocks: ``startTimeout`` (a hard ceiling) and
        ``silenceTimeout`` (restarted by every byte of output, so a backend that compiles or
        autotunes for twenty minutes while printing progress is never killed by it)."""
        proc = self._proc
        assert proc is not None
        cfg = self.config
        started = time.monotonic()
        exited: asyncio.Future[int] = asyncio.ensure_future(proc.wait())
        listened: asyncio.Future[listening.Seen] | None = None
        try:
            target = health.probe_target(urlsplit(cfg.proxy).hostname, cfg.port)
            url = cfg.proxy + cfg.check_endpoint if cfg.check_endpoint is not None else None
            if url is None and target is None:
                return  # nothing to wait for: `checkEndpoint: none` and no port to watch
            backoff = health.intervals()
            interval = next(backoff)
            snapshot_at = 0.0
            # A loopback port is watched by a thread (listening.WATCHER) that wakes this loop
            # only when the backend is ready (it listens, and its plain-HTTP health URL answers
            # 2xx); the loop itself wakes for output, the clocks and the tree snapshot.
            by_thread = url if listening.watchable(url) else None  # https: the loop asks
            if target is not None:
                base = self._started_monotonic or started
                listened = listening.WATCHER.watch(
                    target,
                    health_url=by_thread,
                    due=listening.due_window(base, self._listen_history),
                    ready_history=tuple(self._ready_history),
                )
            printed = False  # the last wait ended because the backend printed a line
            while True:
                ready_at = await self._look(target, url, listened, printed=printed)
                if ready_at is not None:
                    self._became_healthy(ready_at)
                    return
                polled_at = time.monotonic()
                if polled_at - snapshot_at >= health.MAX_INTERVAL:  # helpers may leave the group
                    self._tree |= tree.snapshot(proc.keeper_pid)
                    snapshot_at = polled_at
                remaining = self._check_clocks(started, polled_at)
                if target is None:
                    interval = next(backoff)  # a remote backend: back off, as before
                elif listened is not None and not listened.done():
                    interval = health.MAX_INTERVAL  # the watcher wakes us when it is ready
                else:
                    interval = health.LOOP_HEALTH_INTERVAL  # https health: asked from the loop
                await self._waker.wait(
                    min(interval, remaining),
                    exited,
                    on_output=True,
                    also=listened if listened is not None and not listened.done() else None,
                )
                printed = self._waker.by_output
                if printed:  # but never look more often than the shortest interval
                    gap = health.MIN_LOOK_GAP - (time.monotonic() - polled_at)
                    if gap > 0:
                        await self._waker.wait(gap, exited, on_output=False)
                if exited.done():
                    await self._drain_output()
                    raise _StartFailed(
                        self._diagnoser.exit(
                            self.logs.tail(DIAGNOSIS_TAIL), proc.returncode, during="startup"
                        )
                    )
        finally:
            if not exited.done():
                exited.cancel()
            if listened is not None and not listened.done():
                listened.cancel()  # the watcher drops it

    async def _look(
        self,
        target: tuple[str, int] | None,
        url: str | None,
        listened: asyncio.Future[listening.Seen] | None,
        *,
        printed: bool,
    ) -> float | None:
        """One look at readiness: when the backend became ready (monotonic), or None."""
        if listened is None:  # no loopback port: the health answer says it all
            self.listening_at = self.listening_at or time.monotonic()
            healthy = url is None or await health.is_healthy(self._session, url)
            return time.monotonic() if healthy else None
        if listened.done():
            seen = listened.result()
            self.listening_at = seen.listening_at
            if url is None or seen.healthy_at is not None:
                return seen.healthy_at or seen.listening_at
            # The thread saw it listen; an https health URL is asked from the loop.
            return time.monotonic() if await health.is_healthy(self._session, url) else None
        if not printed or target is None or not health.is_listening(target):
            return None  # the thread looks; a printed line makes the loop look at once
        self.listening_at = listening.WATCHER.listening(listened) or time.monotonic()
        if url is None or await health.is_healthy(self._session, url):
            return time.monotonic()
        return None

    async def _restore_prompt_cache(self) -> None:
        """Read back the slots the last stop saved (bounded by restoreTimeout; a problem is a
        line of the report, never a failed start)."""
        if self._prompt_cache is None:
            return
        self._prompt_cache.started(self.config, self.logs.tail())
        try:
            report = await self._prompt_cache.restore(self.config)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("model %s: the prompt cache restore failed", self.model)
            return
        if report is not None:
            self.cache_restored = report
            self.logs.append(f"[modelswap] prompt cache: {report.summary()}")
            self._events.publish("prompt_cache.restored", **report.as_dict())

    async def _save_prompt_cache(self) -> None:
        """Have the drained backend save its slots before it is stopped (bounded by
        saveTimeout; a problem is a line of the report, never a failed stop)."""
        if self._prompt_cache is None or not self._prompt_cache.keeps(self.config, self.metadata):
            return
        try:
            report = await self._prompt_cache.save(self.config, self.metadata)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("model %s: the prompt cache save failed", self.model)
            return
        if report is not None:
            self.cache_saved = report
            self.logs.append(f"[modelswap] prompt cache: {report.summary()}")
            self._events.publish("prompt_cache.saved", **report.as_dict())

    def answered(self, cached: int | None, prompt: int | None, salted: bool) -> None:
        """A request to this model was answered (200): the first after a restore proves it
        (its cached tokens against those restored; issue 38), published as
        ``prompt_cache.proved``."""
        cache = self._prompt_cache
        if cache is None or not cache.awaits_proof(self.model):
            return
        verdict = cache.answered(self.config, self.metadata, cached, prompt, salted)
        if verdict is None or verdict.last is None:
            return
        self.logs.append(
            f"[modelswap] prompt cache: the first answer after the restore took "
            f"{verdict.last.cached} of {verdict.last.restored} restored tokens from the "
            f"cache: {verdict.state}" + (f" ({verdict.reason})" if verdict.reason else "")
        )
        self._events.publish("prompt_cache.proved", model=self.model, **verdict.as_dict())

    def prompt_cache_verdict(self) -> dict[str, object] | None:
        """What its restores proved (None: its prompt cache is off)."""
        if self._prompt_cache is None:
            return None
        return self._prompt_cache.verdict(self.config, self.metadata)

    def _became_healthy(self, at: float) -> None:
        """Remember how long after listening this start's health answered, for the next
        start's watch."""
        if self.listening_at is not None:
            seconds = self._listen_to_ready = max(0.0, at - self.listening_at)
            self._ready_history = [*self._ready_history, seconds][-LISTEN_HISTORY:]

    def start_clock(self) -> tuple[float | None, float | None]:
        """(monotonic) when the current or last start began, and when its port first
        listened — for the last-swap record."""
        return self._started_monotonic, self.listening_at

    def _check_clocks(self, started: float, now: float) -> float:
        """Seconds until the nearer clock runs out; raise when one has."""
        cfg = self.config
        last_output = max(started, self.logs.last_output_monotonic or started)
        silence_left = last_output + cfg.silence_timeout - now
        ceiling_left = started + cfg.start_timeout - now
        if ceiling_left <= 0:
            lines = self.logs.tail(DIAGNOSIS_TAIL)  # only when it fails: this runs every poll
            raise _StartFailed(self._diagnoser.ceiling(lines, cfg.start_timeout, self.progress))
        if silence_left <= 0:
            lines = self.logs.tail(DIAGNOSIS_TAIL)
            raise _StartFailed(self._diagnoser.silence(lines, cfg.silence_timeout, self.progress))
        return min(silence_left, ceiling_left)

    async def _drain_output(self) -> None:
        if self._pump_task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._pump_task), 1.0)

    async def _watch_exit(self) -> None:
        proc = self._proc
        assert proc is not None
        # Refresh the tree snapshot while waiting: once the backend is gone, helpers that
        # called setsid() can only be found through it. The first refresh (psutil reads and a
        # write to the state directory: 10-16 ms on a busy host) comes after the requests that
        # waited for READY were sent on, as the metadata probe does; the start's own snapshots
        # cover the moment in between.
        wait = PROBE_DELAY
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
                break
            except TimeoutError:
                wait = TREE_REFRESH_SECONDS
            self._tree = tree.alive(self._tree) | tree.snapshot(proc.keeper_pid)
            if self._record is not None:
                self._record.update(proc.keeper_pid, self._tree)
        if not self._mark_died(proc):
            return  # a stop is under way; it owns the outcome
        # The scheduler already knows; now read what the backend printed last, refine the
        # diagnosis with it, and clean up what the backend left behind.
        await self._drain_output()
        self.last_failure = self._diagnoser.exit(
            self.logs.tail(DIAGNOSIS_TAIL), proc.returncode, during="serving"
        )
        log.warning("model %s: backend died: %s", self.model, self.last_failure.summary)
        await self._terminate()  # the tree's leftovers, the reaper's registration

    def _mark_died(self, proc: keeper_client.Kept) -> bool:
        """``proc`` has exited: if it was our ready backend, fail at once. Idempotent."""
        if self._state not in (S.READY, S.SLEEPING) or proc is not self._proc:
            return False
        self._fail(
            self._diagnoser.exit(self.logs.tail(DIAGNOSIS_TAIL), proc.exit_code, during="serving")
        )
        return True

    async def confirm_exit(self, grace: float = 1.0) -> bool:
        """A connection to the backend was refused: has the backend died?

        Returns True (and the model is failed, so the next request starts it again) if the
        process has exited or exits within ``grace`` seconds; False if it is alive.
        """
        proc = self._proc
        if proc is None:
            return True
        if proc.exit_code is None:
            try:  # the backend itself: its keeper may still be ending what it left
                await asyncio.wait_for(proc.backend_exit(), grace)
            except TimeoutError:
                return False
        self._mark_died(proc)
        return True

    # ---- the stop --------------------------------------------------------------------------

    async def _terminate(self) -> None:
        """End the child and everything it started. Safe to call in any state."""
        proc = self._proc
        if proc is None:
            return
        self._tree |= tree.snapshot(proc.keeper_pid)
        if proc.returncode is None:
            await self._ask_to_stop(proc)
            try:  # the grace is the backend's; its keeper then ends what it left
                await asyncio.wait_for(proc.backend_exit(), self._stop_grace)
            except TimeoutError:
                self.logs.append(
                    f"[modelswap] no exit {self._stop_grace:g} s after the stop request: SIGKILL"
                )
                self._tree |= tree.snapshot(proc.keeper_pid)
                proc.kill_now()
            await self._wait_keeper(proc)
        await self._kill_leftovers(proc)
        await self._drain_output()
        for task in (self._monitor_task, self._probe_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        if self._reaper is not None:
            self._reaper.unregister(proc.keeper_pid)
        if self._record is not None:
            self._record.remove(proc.keeper_pid)
        self._proc = None
        self.logs.append(f"[modelswap] backend exited ({proc.returncode})")

    async def _wait_keeper(self, proc: keeper_client.Kept) -> None:
        """Until the keeper has ended the backend's leftovers (its grace, then SIGKILL) and
        exited. Only a hang ends otherwise: the keeper is told to SIGKILL at once, and one that
        still does not exit is killed itself (the tree snapshots then catch what is left)."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), KEEPER_KILL_CEILING)
            return
        proc.kill_now()
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), KEEPER_KILL_CEILING)
        except TimeoutError:
            self.logs.append(
                f"[modelswap] the keeper did not exit (pid {proc.keeper_pid}): SIGKILL"
            )
            proc.kill_keeper()
            await proc.wait()

    async def _ask_to_stop(self, proc: keeper_client.Kept) -> None:
        stop_cmd = self.config.cmd_stop
        if not stop_cmd:
            proc.signal_backend(signal.SIGTERM)
            return
        argv = [arg.replace("${PID}", str(proc.pid)) for arg in stop_cmd]
        try:
            stopper = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                env={**os.environ, **self.config.env},
            )
            await asyncio.wait_for(stopper.wait(), self._stop_grace)
        except (TimeoutError, OSError) as exc:
            self.logs.append(f"[modelswap] cmdStop failed ({exc!r}); sending SIGTERM")
            proc.signal_backend(signal.SIGTERM)

    async def _kill_leftovers(self, proc: keeper_client.Kept) -> None:
        """The keeper has exited, normally with nothing left (it said so). Should it have been
        killed, SIGKILL what the snapshots saw (pid + creation time), every process that carries
        this start's tag (a helper that daemonised after the last snapshot) and the backend's
        cgroup."""
        proc.signal_backend(signal.SIGKILL)  # only if the backend itself still runs
        leftovers = tree.alive(self._tree)
        if leftovers:
            tree.signal_all(leftovers, signal.SIGKILL)
        self._tree = set()
        if not proc.tree_ended and self._tag:
            found = await asyncio.to_thread(tree.end_tagged, self._tag)
            if found:
                self.logs.append(
                    f"[modelswap] the keeper was killed: ended {found} more process"
                    f"{'' if found == 1 else 'es'} the backend had started"
                )
        await self._remove_cgroup(proc.cgroup)

    # ---- transitions -----------------------------------------------------------------------

    def _fail(self, diagnosis: Diagnosis) -> None:
        if self._state not in (S.STARTING, S.READY, S.SLEEPING):
            return  # stopping or stopped: the stop owns the outcome
        self.last_failure = diagnosis
        self.logs.append(f"[modelswap] failed: {diagnosis.summary}")
        self._set_state(S.FAILED, diagnosis=diagnosis.as_dict())

    def _set_state(self, new: ProcessState, **details: object) -> None:
        old = self._state
        if not can_transition(old, new):
            raise RuntimeError(f"model {self.model}: illegal transition {old} -> {new}")
        self._state = new
        self._since = time.time()
        log.info("model %s: %s -> %s", self.model, old, new)
        self._events.publish("process.state", model=self.model, old=old, new=new, **details)
