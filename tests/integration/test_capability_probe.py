"""Capabilities over real sockets (issue 30): the metadata probe reads them from a ready fake
backend's ``/props`` (or vLLM's ``/v1/models``), and what it read is kept, survives a new
store on the same file (a gateway restart) and is listed with the config's keys winning. The
e2e tests (tests/e2e/test_capabilities.py) run the same through ``modelswap serve``."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from tests.integration.conftest import MakeModel, MakeProcess

from modelswap.backends.logreader import BackendLogReader
from modelswap.backends.probe import MetadataProbe
from modelswap.backends.registry import capability_report
from modelswap.config import ModelConfig
from modelswap.config.resolved import Capabilities
from modelswap.observe.capabilities import CapabilityMemory, listing_fields, observed_from
from modelswap.reported import ModelMetadata
from modelswap.supervisor.process import ManagedProcess

pytestmark = pytest.mark.integration

HANG = 30.0


async def probed(
    make_process: MakeProcess, session: aiohttp.ClientSession, config: ModelConfig
) -> tuple[ManagedProcess, ModelMetadata]:
    """``config``'s backend started, ready, and its probe's report."""
    process = make_process(config, prober=MetadataProbe(session), log_reader=BackendLogReader())
    await process.ensure_ready()
    deadline = time.monotonic() + HANG
    while process.metadata is None:
        assert time.monotonic() < deadline, "the probe reported nothing"
        await asyncio.sleep(0.01)
    return process, process.metadata


async def test_props_are_read_kept_and_listed_after_the_backend_stopped(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    config = make_model("--modalities", "vision,audio", "--template-tools", "--ctx", "3072")
    process, meta = await probed(make_process, session, config)
    assert (meta.inputs, meta.tools) == (("text", "image", "audio"), True)
    assert meta.context_length == 3072
    path = tmp_path / "capabilities.json"
    observed = observed_from(capability_report(meta), time.time())
    assert observed is not None
    memory = CapabilityMemory(path)
    memory.record(process.config, observed)
    memory.flush()  # what the runtime's close does with a save still pending
    await process.stop()

    kept = CapabilityMemory(path).get(config)  # a new store on the same file: a restart
    assert kept == observed
    fields = listing_fields(Capabilities(tools=False), kept)
    assert fields["capabilities"] == {"vision": True, "audio_transcriptions": True}
    assert fields["context_window"] == 3072
    assert fields["observed"]["fills"] == ["in", "out", "context"]
    other = dataclasses.replace(config, cmd=(*config.cmd[:-2], "--ctx", "4096"))
    assert CapabilityMemory(path).get(other) is None  # another command line: not its memory


async def test_a_plain_props_says_text_and_nothing_of_tools(
    make_model: MakeModel, make_process: MakeProcess, session: aiohttp.ClientSession
) -> None:
    _, meta = await probed(make_process, session, make_model())
    assert (meta.inputs, meta.tools) == (("text",), None)
    observed = observed_from(capability_report(meta), time.time())
    assert observed is not None
    fields: dict[str, Any] = listing_fields(Capabilities(), observed)
    assert fields["architecture"]["modality"] == "text->text"
    assert "capabilities" not in fields
    assert "tools" not in fields["observed"]  # unknown is not said to be false


async def test_a_generic_server_s_max_model_len_is_kept_after_it_stopped(
    make_model: MakeModel,
    make_process: MakeProcess,
    session: aiohttp.ClientSession,
    tmp_path: Path,
) -> None:
    # Neither llama.cpp nor vLLM (owned_by names another server), but its /v1/models row says
    # max_model_len: its context is remembered as theirs are (issue 38).
    config = make_model(
        "--flavor", "vllm", "--owned-by", "someserver", "--ctx", "6144", backend="auto"
    )
    process, meta = await probed(make_process, session, config)
    assert (meta.backend, meta.context_length) == ("generic", 6144)
    observed = observed_from(capability_report(meta), time.time())
    assert observed is not None
    memory = CapabilityMemory(tmp_path / "capabilities.json")
    memory.record(process.config, observed)
    memory.flush()
    await process.stop()
    kept = CapabilityMemory(tmp_path / "capabilities.json").get(config)
    assert kept is not None
    assert (kept.backend, kept.endpoint, kept.context) == ("generic", "/v1/models", 6144)
    assert (kept.inputs, kept.outputs, kept.tools) == (None, None, None)  # not said
    fields = listing_fields(Capabilities(), kept)
    assert fields["context_window"] == 6144
    assert fields["observed"]["fills"] == ["context"]
    assert "architecture" not in fields


async def test_vllm_reports_its_max_model_len(
    make_model: MakeModel, make_process: MakeProcess, session: aiohttp.ClientSession
) -> None:
    config = make_model("--flavor", "vllm", "--ctx", "4096", backend="vllm")
    _, meta = await probed(make_process, session, config)
    assert (meta.inputs, meta.tools) == (None, None)  # vLLM says nothing of either
    observed = observed_from(capability_report(meta), time.time())
    assert observed is not None
    assert listing_fields(Capabilities(tools=True), observed) == {
        "architecture": {
            "input_modalities": ["text"],
            "output_modalities": ["text"],
            "modality": "text->text",
        },
        "capabilities": {"function_calling": True},
        "supported_parameters": ["tools", "tool_choice"],
        "context_window": 4096,
        "observed": {
            "source": "last run",
            "at": fields_at(observed.at),
            "backend": "vllm",
            "endpoint": "/v1/models",
            "in": ["text"],
            "out": ["text"],
            "context": 4096,
            "fills": ["in", "out", "context"],
        },
    }


def fields_at(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
