"""The composition root: builds every collaborator from a Config; ``start()`` / ``close()``.

Only this module constructs concrete classes (client sessions, the reaper, processes, router);
everything else receives them.
"""

from __future__ import annotations

import logging
import time

import aiohttp

from modelswap.backends.configured import ConfiguredLimits, parse_configured
from modelswap.backends.diagnose import GenericDiagnoser
from modelswap.backends.logreader import BackendLogReader
from modelswap.backends.probe import MetadataProbe
from modelswap.config import Config, ModelConfig
from modelswap.config.resolved import ApiKey
from modelswap.errors import ModelNotFoundError
from modelswap.events import Event, EventBus
from modelswap.redact import Redactor
from modelswap.routing.local import LocalRouter
from modelswap.routing.resolve import close_names
from modelswap.supervisor.process import ManagedProcess
from modelswap.supervisor.reaper import Reaper

log = logging.getLogger(__name__)


class Runtime:
    """Everything one running gateway owns. Use ``await start()`` then ``await close()``."""

    def __init__(
        self,
        config: Config,
        *,
        stop_grace: float = 5.0,
        use_reaper: bool = True,
        allow_unauthenticated_network: bool = False,
    ) -> None:
        self.config = config
        self.allow_unauthenticated_network = allow_unauthenticated_network
        self.events = EventBus()
        self.started_at = time.time()
        self.redactor = Redactor(config.secrets)
        self.configured: dict[str, ConfiguredLimits] = {
            model_id: parse_configured(model.cmd) for model_id, model in config.models.items()
        }
        self.events.add_listener(self._warn_on_context_mismatch)
        self._stop_grace = stop_grace
        self._reaper = Reaper() if use_reaper else None
        self._health_session: aiohttp.ClientSession | None = None
        self._proxy_session: aiohttp.ClientSession | None = None
        self._router: LocalRouter | None = None

    async def start(self) -> None:
        if self._reaper is not None:
            self._reaper.start()
        self._health_session = aiohttp.ClientSession()
        # Relay bytes exactly as the backend sent them (no decompression, no pool limit:
        # the scheduler, not the connection pool, decides how much runs at once).
        self._proxy_session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
        )
        processes = {
            model_id: ManagedProcess(
                model,
                events=self.events,
                session=self._health_session,
                diagnoser=GenericDiagnoser(),
                log_reader=BackendLogReader(),
                prober=MetadataProbe(self._health_session),
                reaper=self._reaper,
                stop_grace=self._stop_grace,
            )
            for model_id, model in self.config.models.items()
        }
        self._router = LocalRouter(processes, self.events)

    async def close(self) -> None:
        if self._router is not None:
            await self._router.close()
        for session in (self._health_session, self._proxy_session):
            if session is not None:
                await session.close()
        if self._reaper is not None:
            self._reaper.close()

    def _warn_on_context_mismatch(self, event: Event) -> None:
        if event.kind != "process.metadata":
            return
        model_id = str(event.data["model"])
        reported = getattr(event.data["metadata"], "context_length", None)
        configured = self.configured[model_id].context
        if reported is not None and configured is not None and reported < configured:
            log.warning(
                "model %s: the backend serves %d tokens of context per request, but its command "
                "line asked for %d (a fit/auto-fit reduction, or slots sharing the context)",
                model_id,
                reported,
                configured,
            )

    @property
    def router(self) -> LocalRouter:
        assert self._router is not None, "Runtime.start() was not awaited"
        return self._router

    @property
    def proxy_session(self) -> aiohttp.ClientSession:
        assert self._proxy_session is not None, "Runtime.start() was not awaited"
        return self._proxy_session

    def resolve(self, name: str, key: ApiKey | None = None) -> ModelConfig:
        """The model a request names (its id or an alias). Raises ModelNotFoundError — also
        for a model the client's key may not use, exactly as if it did not exist."""
        model = self.config.resolve(name)
        if model is None or (key is not None and not key.allows(model)):
            raise ModelNotFoundError(name, close_names(name, self.visible_names(key)))
        return model

    def visible_names(self, key: ApiKey | None) -> list[str]:
        """Model ids and aliases ``key`` may use (all of them without keys)."""
        return [
            name
            for model in self.config.models.values()
            if key is None or key.allows(model)
            for name in (model.id, *model.aliases)
        ]
