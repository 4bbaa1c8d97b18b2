"""Capabilities remembered (issue 30): the key a memory is kept under, the store in
``<stateDir>/capabilities.json`` (a restart, a changed command, a bad file) and the merge rule
with what the config writes, listed in llama-swap's shape."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from modelswap.backends.registry import capability_report
from modelswap.config import ModelConfig, load_config_text
from modelswap.config.resolved import Capabilities
from modelswap.observe.capabilities import (
    CapabilityMemory,
    Observed,
    command_key,
    listing_fields,
    llamaswap_fields,
    observed_from,
)
from modelswap.reported import ModelMetadata

SEEN = Observed(1_800_000_000.5, "llamacpp", "/props", ("text", "image"), ("text",), True, 2048, 1)


def model(
    cmd: str = "llama-server -m a.gguf --port ${PORT} -c 2048",
    *,
    start_port: int = 10001,
    extra: str = "",
    before: str = "",
) -> ModelConfig:
    """Model ``m`` as the config loads it (``before``: models listed ahead of it)."""
    text = f"startPort: {start_port}\nmodels:\n{before}  m:\n    cmd: {json.dumps(cmd)}\n{extra}"
    return load_config_text(text).models["m"]


# ---- what of a probe's report is kept ------------------------------------------------------


def test_llamacpp_props_are_kept_whole() -> None:
    meta = ModelMetadata("llamacpp", 2048, 8192, 2, "/props", inputs=("text", "image"), tools=True)
    assert observed_from(capability_report(meta), 5.0) == Observed(
        5.0, "llamacpp", "/props", ("text", "image"), ("text",), True, 2048, 2
    )


def test_llamacpp_without_props_keeps_only_the_context() -> None:
    meta = ModelMetadata("llamacpp", 1536, source="/v1/models")
    assert observed_from(capability_report(meta), 5.0) == Observed(
        5.0, "llamacpp", "/v1/models", context=1536
    )


def test_vllm_keeps_its_context_with_text_in_and_out_as_llamaswap() -> None:
    meta = ModelMetadata("vllm", 4096, source="/v1/models")
    assert observed_from(capability_report(meta), 5.0) == Observed(
        5.0, "vllm", "/v1/models", ("text",), ("text",), None, 4096
    )


@pytest.mark.parametrize("backend", ["sglang", "ollama", "generic"])
def test_other_servers_keep_the_context_their_row_said_and_nothing_else(backend: str) -> None:
    # Remembered after an unload as llama.cpp's and vLLM's are (issue 38); modalities and
    # tools are not said by such a row, so none are kept.
    meta = ModelMetadata(backend, 4096, source="/v1/models")
    assert observed_from(capability_report(meta), 5.0) == Observed(
        5.0, backend, "/v1/models", context=4096
    )
    assert observed_from(capability_report(ModelMetadata(backend, None)), 5.0) is None


# ---- the key --------------------------------------------------------------------------------


def test_the_key_follows_the_command_but_not_the_port_it_was_given() -> None:
    key = command_key(model())
    assert key == command_key(model())
    assert key.startswith("sha256:")
    # Another startPort, or a model added ahead of it: the port moves, the memory stays.
    assert model(start_port=20001).cmd != model().cmd
    assert command_key(model(start_port=20001)) == key
    other = "  first:\n    cmd: x --port ${PORT}\n"
    assert command_key(model(before=other)) == key
    assert command_key(model("llama-server -m a.gguf --port ${PORT} -c 4096")) != key
    assert command_key(model("llama-server -m b.gguf --port ${PORT} -c 2048")) != key
    assert command_key(model(extra="    env: [LLAMA_ARG_CTX_SIZE=4096]\n")) != key
    assert command_key(model(extra="    useModelName: served\n")) != key
    # The port's own digits inside a longer number are not the port.
    assert command_key(model("s --port ${PORT} -c 100011")) != command_key(
        model("s --port ${PORT} -c 200011", start_port=20001)
    )


def test_the_key_holds_no_part_of_the_command() -> None:
    secret = model("llama-server --api-key sk-very-secret --port ${PORT}")
    assert "sk-very-secret" not in command_key(secret)


# ---- the store ------------------------------------------------------------------------------


def test_a_memory_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "state" / "capabilities.json"
    memory = CapabilityMemory(path)
    memory.record(model(), SEEN)  # no event loop here: saved at once
    stored = json.loads(path.read_text())
    assert stored["version"] == 1
    assert stored["models"]["m"] == {
        "command": command_key(model()),
        "at": SEEN.at,
        "backend": "llamacpp",
        "endpoint": "/props",
        "in": ["text", "image"],
        "out": ["text"],
        "tools": True,
        "context": 2048,
        "total_slots": 1,
    }
    assert [p.name for p in path.parent.iterdir()] == ["capabilities.json"]  # no temp left
    again = CapabilityMemory(path)
    assert again.get(model()) == SEEN
    assert again.get(model(start_port=30001)) == SEEN  # the next run's ports


def test_a_changed_command_drops_the_memory_at_once(tmp_path: Path) -> None:
    path = tmp_path / "capabilities.json"
    memory = CapabilityMemory(path)
    memory.record(model(), SEEN)
    changed = model("llama-server -m a.gguf --port ${PORT} -c 1024")
    assert memory.get(changed) is None  # never listed under the new command
    memory.forget_changed({"m": changed})  # what a reload or a restart does
    assert json.loads(path.read_text())["models"] == {}
    assert CapabilityMemory(path).get(model()) is None  # the old command does not bring it back


def test_a_model_gone_from_the_config_is_forgotten_and_others_kept(tmp_path: Path) -> None:
    path = tmp_path / "capabilities.json"
    memory = CapabilityMemory(path)
    memory.record(model(), SEEN)
    memory.forget_changed({"m": model()})
    assert memory.get(model()) == SEEN
    memory.forget_changed({})
    assert memory.get(model()) is None
    assert json.loads(path.read_text())["models"] == {}


def test_without_a_state_directory_it_remembers_until_exit() -> None:
    memory = CapabilityMemory(None)
    memory.record(model(), SEEN)
    assert memory.get(model()) == SEEN
    memory.save()  # nothing to write, nothing raised


async def test_a_record_is_saved_soon_off_the_requests_path(tmp_path: Path) -> None:
    path = tmp_path / "capabilities.json"
    memory = CapabilityMemory(path)
    memory.record(model(), SEEN)
    assert not path.exists()  # not written by the event that reported it
    memory.flush()
    assert "m" in json.loads(path.read_text())["models"]


@pytest.mark.parametrize(
    "text",
    ["", "not json", "[]", '{"version": 2, "models": {}}', '{"version": 1, "models": []}'],
)
def test_a_corrupt_file_is_moved_aside_said_once_and_started_afresh(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "capabilities.json"
    path.write_text(text)
    with caplog.at_level(logging.WARNING):
        memory = CapabilityMemory(path)
    assert memory.get(model()) is None
    # Corrupt: moved aside (kept, named with the time), said once, and started afresh.
    [kept] = tmp_path.glob("capabilities.json.corrupt-*")
    assert kept.read_text() == text
    assert not path.exists()
    assert caplog.text.count("is corrupt") == 1
    assert memory.file is not None
    assert memory.file.moved_aside == 1
    memory.record(model(), SEEN)  # and a good one written
    assert CapabilityMemory(path).get(model()) == SEEN


@pytest.mark.parametrize(
    "change",
    [
        {"command": 5},
        {"at": "yesterday"},
        {"at": True},
        {"backend": None},
        {"in": ["text", "video"]},
        {"out": "text"},
        {"tools": "yes"},
        {"context": 0},
        {"context": 2048.0},
        {"total_slots": -1},
        {"endpoint": 7},
    ],
)
def test_a_malformed_entry_is_skipped_and_the_rest_kept(
    tmp_path: Path, change: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "capabilities.json"
    memory = CapabilityMemory(path)
    memory.record(model(), SEEN)
    other = model(extra="    aliases: [x]\n")  # the same command: the same key
    data = json.loads(path.read_text())
    data["models"]["bad"] = {**data["models"]["m"], **change}
    path.write_text(json.dumps(data))
    with caplog.at_level(logging.WARNING):
        again = CapabilityMemory(path)
    assert again.get(other) == SEEN
    assert "unreadable entry of 'bad'" in caplog.text


def test_an_unwritable_directory_is_said_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    memory = CapabilityMemory(blocker / "state" / "capabilities.json")
    with caplog.at_level(logging.WARNING):
        memory.record(model(), SEEN)
        memory.record(model(), SEEN)
    assert caplog.text.count("cannot save") == 1
    assert memory.get(model()) == SEEN  # kept in memory


# ---- the merge rule -------------------------------------------------------------------------


def test_nothing_written_lists_the_memory_labelled_as_one() -> None:
    fields = listing_fields(Capabilities(), SEEN)
    assert fields == {
        "architecture": {
            "input_modalities": ["text", "image"],
            "output_modalities": ["text"],
            "modality": "text+image->text",
        },
        "capabilities": {"vision": True, "function_calling": True},
        "supported_parameters": ["tools", "tool_choice"],
        "context_window": 2048,
        "observed": {
            "source": "last run",
            "at": "2027-01-15T08:00:00Z",
            "backend": "llamacpp",
            "endpoint": "/props",
            "in": ["text", "image"],
            "out": ["text"],
            "tools": True,
            "context": 2048,
            "total_slots": 1,
            "fills": ["in", "out", "tools", "context"],
        },
    }
    assert "context_length" not in fields  # the receipt's field, never a memory's
    assert "max_model_len" not in fields


def test_a_written_key_wins_field_by_field() -> None:
    written = Capabilities(tools=False, context=1000)
    fields = listing_fields(written, SEEN)
    assert fields["capabilities"] == {"vision": True}  # written false beats remembered true
    assert "supported_parameters" not in fields
    assert fields["context_window"] == 1000
    assert fields["architecture"]["input_modalities"] == ["text", "image"]  # filled
    assert fields["observed"]["fills"] == ["in", "out"]
    assert fields["observed"]["context"] == 2048  # the memory itself stays as it was


def test_written_empty_values_win_too() -> None:
    fields = listing_fields(Capabilities(inputs=(), outputs=(), context=0), SEEN)
    assert "architecture" not in fields
    assert "context_window" not in fields
    assert fields["capabilities"] == {"function_calling": True}
    assert fields["observed"]["fills"] == ["tools"]


def test_disable_auto_lists_exactly_what_is_written() -> None:
    assert listing_fields(Capabilities(disable_auto=True), SEEN) == {}
    written = Capabilities(inputs=("text",), context=4096, disable_auto=True)
    assert listing_fields(written, SEEN) == {
        "architecture": {"input_modalities": ["text"]},
        "context_window": 4096,
    }


def test_no_memory_lists_what_is_written_and_nothing_else() -> None:
    assert listing_fields(Capabilities(), None) == {}
    assert listing_fields(Capabilities(tools=True), None) == {
        "capabilities": {"function_calling": True},
        "supported_parameters": ["tools", "tool_choice"],
    }


@pytest.mark.parametrize(
    ("values", "flags", "modality"),
    [
        ({"in": ["text", "image"], "out": ["text"]}, {"vision": True}, "text+image->text"),
        ({"in": ["audio"], "out": ["text"]}, {"audio_transcriptions": True}, "audio->text"),
        ({"in": ["text"], "out": ["audio"]}, {"audio_speech": True}, "text->audio"),
        ({"in": ["text"], "out": ["image"]}, {"image_generation": True}, "text->image"),
        (
            {"in": ["text", "image"], "out": ["image"]},
            {"vision": True, "image_generation": True, "image_to_image": True},
            "text+image->image",
        ),
        ({"in": ["image"]}, {"vision": True}, None),  # no out: no pairs, no modality
        ({"out": ["text"], "reranker": True}, {"reranker": True}, None),
        ({"in": ["text"], "out": ["text"]}, None, "text->text"),  # nothing to flag: omitted
    ],
)
def test_llamaswaps_listing_shape(
    values: dict[str, Any], flags: dict[str, bool] | None, modality: str | None
) -> None:
    fields = llamaswap_fields(values)
    assert fields.get("capabilities") == flags
    assert fields.get("architecture", {}).get("modality") == modality
