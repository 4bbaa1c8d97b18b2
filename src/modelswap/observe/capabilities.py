"""What each model can do, remembered (issue 30; docs/architecture.md, "The catalog").

When a model becomes ready, the metadata probe reads what its backend says about it
(``backends/probe.py``): llama.cpp's ``/props`` (the loaded ``n_ctx``, image and audio input,
whether the chat template carries tools, its slots) and vLLM's ``max_model_len``; of any other
server, the context its ``/v1/models`` row says (``max_model_len``, ``context_length``). That
report is kept here as an :class:`Observed`, under the model's id with a key of the command
that served it, and saved in ``<stateDir>/capabilities.json``, so ``/v1/models`` lists it after
the model stopped and after the gateway restarted.

It is a *memory*, never a receipt: the row's live fields (``max_model_len``,
``context_length``, ``meta.n_ctx``) stay those of a ready backend only, and what is listed
from here is labelled ``observed: {"source": "last run", "at": ...}``.

:func:`listing_fields` is the merge: a key written in the model's ``capabilities`` wins, field
by field; one not written is filled from the memory, unless ``disableAuto``. The result is
listed in llama-swap's shape (``architecture``, ``capabilities``, ``supported_parameters``,
``context_window``), so its clients read it unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from modelswap.config import ModelConfig
from modelswap.config.resolved import Capabilities
from modelswap.reported import CapabilityReport
from modelswap.statefile import StateFile

log = logging.getLogger(__name__)

SOURCE = "last run"
FILE_VERSION = 1
SAVE_DELAY = 0.5  # off the path of the requests that waited for the start (as stats.json)
MODALITIES = ("text", "audio", "image")


@dataclass(frozen=True, slots=True)
class Observed:
    """What a backend said about its model when it was last ready (None: not said).

    ``at``: when (epoch seconds); ``endpoint``: where it was read (``/props``,
    ``/v1/models``)."""

    at: float
    backend: str
    endpoint: str | None = None
    inputs: tuple[str, ...] | None = None
    outputs: tuple[str, ...] | None = None
    tools: bool | None = None
    context: int | None = None
    total_slots: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """The stored and listed form (``in``/``out`` as llama-swap spells them)."""
        values = {
            "at": self.at,
            "backend": self.backend,
            "endpoint": self.endpoint,
            "in": None if self.inputs is None else list(self.inputs),
            "out": None if self.outputs is None else list(self.outputs),
            "tools": self.tools,
            "context": self.context,
            "total_slots": self.total_slots,
        }
        return {key: value for key, value in values.items() if value is not None}


def observed_from(report: CapabilityReport | None, at: float) -> Observed | None:
    """What is kept of a probe's report, as its backend's adapter chose it
    (``backends.registry.capability_report``: llama.cpp's ``/props``, vLLM's context with text
    in and out); None when it keeps nothing."""
    if report is None:
        return None
    return Observed(
        at,
        report.backend,
        report.endpoint,
        report.inputs,
        report.outputs,
        report.tools,
        report.context,
        report.total_slots,
    )


def command_key(model: ModelConfig) -> str:
    """A digest of what decides what the backend reports: the resolved command line, its
    environment, the proxy and the model name sent upstream. The port ``${PORT}`` gave it is
    written back as ``${PORT}``, so a port moved by an edit elsewhere in the file (ports are
    handed out in file order) keeps the memory; any other change to the command drops it."""
    port = None if model.port is None else re.compile(rf"(?<![0-9]){model.port}(?![0-9])")

    def plain(text: str) -> str:
        return text if port is None else port.sub("${PORT}", text)

    parts = {
        "cmd": [plain(arg) for arg in model.cmd],
        "env": sorted((name, plain(value)) for name, value in model.env.items()),
        "proxy": plain(model.proxy),
        "model": model.upstream_name,
    }
    digest = hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()
    return "sha256:" + digest[:32]


class CapabilityMemory:
    """Each model's last :class:`Observed`, with the :func:`command_key` it was seen under;
    kept in ``path`` (JSON, written whole to a temporary file then renamed over it, so a
    reader never sees half a file) or only in memory when ``path`` is None."""

    def __init__(self, path: Path | None) -> None:
        self._path = path
        # A corrupt file is moved aside, a failed save retried: never off (statefile.py).
        self.file = StateFile(path, prefix=".capabilities-", what="capabilities") if path else None
        self._entries: dict[str, tuple[str, Observed]] = {}
        self._save_timer: asyncio.TimerHandle | None = None
        self._load()

    def get(self, model: ModelConfig) -> Observed | None:
        """The memory of ``model``, if it was seen under its present command."""
        entry = self._entries.get(model.id)
        if entry is None or entry[0] != command_key(model):
            return None
        return entry[1]

    def record(self, model: ModelConfig, observed: Observed) -> None:
        """Keep ``observed`` for ``model`` (the config it ran with); saved soon."""
        self._entries[model.id] = (command_key(model), observed)
        self._save_soon()

    def forget_changed(self, models: Mapping[str, ModelConfig]) -> None:
        """Drop the memory of every model that is gone or whose command changed (a config
        loaded at startup or by a reload): saved at once when anything was dropped."""
        stale = [
            model_id
            for model_id, (key, _) in self._entries.items()
            if model_id not in models or command_key(models[model_id]) != key
        ]
        for model_id in stale:
            del self._entries[model_id]
            why = "its command changed" if model_id in models else "it is gone from the config"
            log.info("model %s: what it could do is forgotten: %s", model_id, why)
        if stale:
            self.save()

    def flush(self) -> None:
        """Save now what a recent :meth:`record` left to be saved soon."""
        if self._save_timer is not None:
            self.save()

    def save(self) -> None:
        if self._save_timer is not None:
            self._save_timer.cancel()
            self._save_timer = None
        if self.file is None:
            return
        models = {
            model_id: {"command": key, **observed.as_dict()}
            for model_id, (key, observed) in sorted(self._entries.items())
        }
        # A failure is said once and retried: it serves anyway, remembering in memory.
        self.file.write({"version": FILE_VERSION, "models": models}, self.save)

    def _save_soon(self) -> None:
        if self._path is None or self._save_timer is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.save()
            return
        self._save_timer = loop.call_later(SAVE_DELAY, self.save)

    def _load(self) -> None:
        if self.file is None:
            return
        models = self.file.read(_models)
        if models is None:
            return
        for model_id, entry in models.items():
            parsed = _entry(entry)
            if parsed is None:
                log.warning("ignoring the unreadable entry of %r in %s", model_id, self._path)
                continue
            self._entries[str(model_id)] = parsed


def _models(data: object) -> dict[str, object]:
    """The ``models`` of a capabilities file; ValueError when it is not one (corrupt)."""
    models = data.get("models") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("version") != FILE_VERSION:
        raise ValueError(f"not a version {FILE_VERSION} capabilities file")
    if not isinstance(models, dict):
        raise ValueError(f"not a version {FILE_VERSION} capabilities file")
    return models


class _Malformed(ValueError):
    pass


def _entry(entry: object) -> tuple[str, Observed] | None:
    """One stored entry, checked field by field; None if anything is off."""
    try:
        if not isinstance(entry, dict):
            raise _Malformed
        at = entry.get("at")
        if isinstance(at, bool) or not isinstance(at, int | float):
            raise _Malformed
        tools = entry.get("tools")
        if tools is not None and not isinstance(tools, bool):
            raise _Malformed
        return _text(entry.get("command")), Observed(
            float(at),
            _text(entry.get("backend")),
            None if entry.get("endpoint") is None else _text(entry.get("endpoint")),
            _modalities(entry.get("in")),
            _modalities(entry.get("out")),
            tools,
            _count(entry.get("context")),
            _count(entry.get("total_slots")),
        )
    except _Malformed:
        return None


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise _Malformed
    return value


def _modalities(value: object) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(v in MODALITIES for v in value):
        raise _Malformed
    return tuple(value)


def _count(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise _Malformed
    return value


# ---- the listing --------------------------------------------------------------------------


def listing_fields(declared: Capabilities, observed: Observed | None) -> dict[str, Any]:
    """A model row's capability fields: each key written in ``declared`` wins; each one not
    written is filled from ``observed`` (none with ``disable_auto``), listed in llama-swap's
    shape, and the memory itself as ``observed`` (with ``fills``: the keys it filled)."""
    if declared.disable_auto:
        observed = None
    seen = observed or Observed(0.0, "")
    values: dict[str, Any] = {}
    fills: list[str] = []
    for key, written, remembered in (
        ("in", declared.inputs, seen.inputs),
        ("out", declared.outputs, seen.outputs),
        ("tools", declared.tools, seen.tools),
        ("reranker", declared.reranker, None),
        ("context", declared.context, seen.context),
    ):
        if written is not None:
            values[key] = written
        elif remembered is not None:
            values[key] = remembered
            fills.append(key)
    fields = llamaswap_fields(values)
    if observed is not None:
        fields["observed"] = {
            "source": SOURCE,
            "at": _iso(observed.at),
            **{k: v for k, v in observed.as_dict().items() if k != "at"},
            "fills": fills,
        }
    return fields


def llamaswap_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """llama-swap's /v1/models fields for capabilities ``in``, ``out``, ``tools``,
    ``reranker``, ``context``: each omitted when it would be empty."""
    inputs, outputs = list(values.get("in") or ()), list(values.get("out") or ())
    fields: dict[str, Any] = {}
    architecture: dict[str, Any] = {}
    if inputs:
        architecture["input_modalities"] = inputs
    if outputs:
        architecture["output_modalities"] = outputs
    if inputs and outputs:
        architecture["modality"] = "+".join(inputs) + "->" + "+".join(outputs)
    if architecture:
        fields["architecture"] = architecture
    flags: dict[str, bool] = {}
    if "image" in inputs:
        flags["vision"] = True
    if inputs and outputs:
        for name, needs_in, needs_out in (
            ("audio_transcriptions", "audio", "text"),
            ("audio_speech", "text", "audio"),
            ("image_generation", "text", "image"),
            ("image_to_image", "image", "image"),
        ):
            if needs_in in inputs and needs_out in outputs:
                flags[name] = True
    if values.get("tools"):
        flags["function_calling"] = True
        fields["supported_parameters"] = ["tools", "tool_choice"]
    if values.get("reranker"):
        flags["reranker"] = True
    if flags:
        fields["capabilities"] = flags
    context = values.get("context")
    if isinstance(context, int) and context > 0:
        fields["context_window"] = context
    return fields


def _iso(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
