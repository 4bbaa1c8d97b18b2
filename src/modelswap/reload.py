"""Live reload: re-read the config file (on SIGHUP, or when it changes with --watch-config),
and apply what changed without touching what did not.

* A file that does not load (YAML, schema, checks) is rejected; the running config stays. The
  rejection is logged with every problem and published as a ``config.rejected`` event.
* A model whose command, address, environment, health endpoint or upstream name changed is
  stopped once idle, then started again with the new command if it was running.
* A removed model takes no new requests; those in flight finish, then it is stopped.
* Everything else — aliases, ttl, groups, budgets, keys, filters, peers, fallbacks — applies at
  once, without touching a running process.
* Settings read once at startup (listen address, limits, stateDir, metrics and activity) are
  reported as needing a restart.

Ports handed out from ``startPort`` stay with their model across reloads, so adding a model
does not change another model's command (and so does not restart it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from modelswap.config import Config, load_config, override_listen
from modelswap.config.preflight import check_runnable
from modelswap.errors import ConfigError
from modelswap.runtime import Runtime

log = logging.getLogger(__name__)

DEBOUNCE = 0.3
POLL = 0.25


@dataclass
class ReloadReport:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # stop when idle, then start again
    updated: list[str] = field(default_factory=list)  # live: no process touched
    needs_restart: list[str] = field(default_factory=list)  # gateway settings

    def as_dict(self) -> dict[str, list[str]]:
        return {
            "added": self.added,
            "removed": self.removed,
            "restarted": self.restarted,
            "updated": self.updated,
            "needs_restart": self.needs_restart,
        }


def apply_config(runtime: Runtime, new: Config) -> ReloadReport:
    """Make ``new`` the running config (see the module docstring). Synchronous: retirements
    run as background tasks owned by the runtime."""
    old = runtime.config
    report = ReloadReport(needs_restart=_startup_settings_changed(old, new))
    runtime.config = new
    runtime.redactor = runtime.redactor.with_secrets(new.secrets)
    runtime.refresh_configured()
    runtime.peers.reconfigure(new.peers)
    runtime.launcher.reconfigure(new.spare_keeper)  # the spare goes; a new one if still wanted
    router = runtime.router
    added = {m: runtime.make_process(cfg) for m, cfg in new.models.items() if m not in old.models}
    report.added = sorted(added)
    router.reconfigure(runtime.swapper(), runtime.scheduler_policy(), added)
    for model_id in old.models.keys() - new.models.keys():
        report.removed.append(model_id)
        runtime.spawn(router.retire(model_id, remove=True), f"remove:{model_id}")
    for model_id, cfg in new.models.items():
        if model_id in added or cfg == old.models[model_id]:
            continue
        if router.processes[model_id].reconfigure(cfg):
            report.restarted.append(model_id)
            runtime.spawn(router.retire(model_id, remove=False), f"restart:{model_id}")
        else:
            report.updated.append(model_id)
    report.removed.sort()
    return report


def _startup_settings_changed(old: Config, new: Config) -> list[str]:
    checks = {
        "listen": (old.listen_host, old.listen_port) != (new.listen_host, new.listen_port),
        "limits": old.limits != new.limits,
        "stateDir": old.scheduling.state_dir != new.scheduling.state_dir,
        # performance (the system monitor) is read at each sample: it applies at once
        "metrics/activity": replace(old.observability, performance=True, performance_every=0)
        != replace(new.observability, performance=True, performance_every=0),
        "maxRequestBodyBytes/maxUploadBodyBytes": (
            (old.max_request_body_bytes, old.max_upload_body_bytes)
            != (new.max_request_body_bytes, new.max_upload_body_bytes)
        ),
        "security.allowUnauthenticatedNetwork": (
            old.security.allow_unauthenticated_network != new.security.allow_unauthenticated_network
        ),
    }
    return [name for name, changed in checks.items() if changed]


@dataclass(frozen=True)
class Reloading:
    """How ``serve`` reloads: the file (None: the built-in demo, nothing to re-read), whether
    to watch it, whether ``--listen`` overrides the file's listen."""

    path: str | None = None
    watch: bool = False
    keep_listen: bool = False
    on_applied: Callable[[Config], None] | None = None


class ConfigReloader:
    """Reloads ``path`` into ``runtime`` on demand (``request()``: SIGHUP) and, with
    ``watch``, when the file's content changes (polled; a burst of writes is applied once,
    ``DEBOUNCE`` seconds after the last)."""

    def __init__(
        self,
        runtime: Runtime,
        path: str,
        *,
        watch: bool,
        listen: tuple[str, int] | None = None,
        on_applied: Callable[[Config], None] | None = None,
    ) -> None:
        self._runtime = runtime
        self._path = Path(path)
        self._watch = watch
        self._listen = listen  # --listen given on the command line wins over the file
        self._on_applied = on_applied
        self._wake = asyncio.Event()
        self._digest = _digest(self._path)

    def request(self) -> None:
        self._wake.set()

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), POLL if self._watch else None)
            asked = self._wake.is_set()
            self._wake.clear()
            digest = _digest(self._path)
            if not asked and digest == self._digest:
                continue
            if not asked:  # a change on disk: wait until the writes settle
                while True:
                    await asyncio.sleep(DEBOUNCE)
                    settled = _digest(self._path)
                    if settled == digest:
                        break
                    digest = settled
            self._digest = digest
            self.reload()

    def reload(self) -> ReloadReport | None:
        """Load, check and apply the file now. None when it was rejected."""
        events = self._runtime.events
        try:
            old = self._runtime.config.models
            ports = {m: cfg.port for m, cfg in old.items() if cfg.port is not None}
            new = load_config(self._path, ports=ports)
            check_runnable(new)  # what serve refuses at startup, a reload refuses too
            if self._listen is not None:
                new = override_listen(new, f"{self._listen[0]}:{self._listen[1]}")
        except ConfigError as exc:
            problems = [f"{p}: {m}" if p else m for p, m in exc.problems]
            log.error(
                "config reload rejected; the running config stays:\n  %s", "\n  ".join(problems)
            )
            events.publish("config.rejected", source=str(self._path), problems=problems)
            return None
        except OSError as exc:
            log.error("config reload: cannot read %s: %s", self._path, exc.strerror or exc)
            events.publish("config.rejected", source=str(self._path), problems=[str(exc)])
            return None
        report = apply_config(self._runtime, new)
        if self._on_applied is not None:
            self._on_applied(new)
        summary = ", ".join(f"{k}: {', '.join(v)}" for k, v in report.as_dict().items() if v)
        log.info("config reloaded from %s%s", self._path, f" ({summary})" if summary else "")
        for setting in report.needs_restart:
            log.warning("config reload: %s changed; it applies when modelswap restarts", setting)
        events.publish("config.reloaded", source=str(self._path), **report.as_dict())
        return report


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None
