"""What a backend says its model can do (issue 30): llama.cpp's ``/props`` (captured from the
real server on SmolLM2, then varied) and vLLM's model row."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from modelswap.backends import llamacpp, registry
from modelswap.backends import metadata as parse
from modelswap.reported import ModelMetadata

PROPS = Path(__file__).resolve().parents[2] / "data" / "props" / "llamacpp-smollm2.json"


def kind_of(row: Mapping[str, Any] | None) -> str | None:
    """The backend kind a ``/v1/models`` row's ``owned_by`` names (the registry's adapter)."""
    adapter = registry.owning(row.get("owned_by") if row else None)
    return adapter.name if adapter is not None else None


def captured() -> dict[str, Any]:
    data = json.loads(PROPS.read_text())
    assert isinstance(data, dict)
    return data


def caps(data: object) -> tuple[tuple[str, ...], bool | None] | None:
    return llamacpp.props_capabilities(json.dumps(data).encode())


def test_the_real_servers_props_say_text_only_and_no_tools() -> None:
    data = captured()
    assert caps(data) == (("text",), False)
    assert llamacpp.props_context(PROPS.read_bytes()) == (2048, 1)  # the same body's context


@pytest.mark.parametrize(
    ("modalities", "inputs"),
    [
        ({"vision": True, "video": False, "audio": False}, ("text", "image")),
        ({"vision": False, "video": False, "audio": True}, ("text", "audio")),
        ({"vision": True, "video": True, "audio": True}, ("text", "image", "audio")),
        ({"video": True}, ("text",)),  # llama-swap lists no video modality
        ({"vision": "true", "audio": 1}, ("text",)),  # only a JSON true counts
        ({}, ("text",)),
        ([], ("text",)),
        (None, ("text",)),
    ],
)
def test_modalities_map_to_llamaswap_inputs(modalities: object, inputs: tuple[str, ...]) -> None:
    data = captured()
    data["modalities"] = modalities
    assert caps(data) == (inputs, False)


def test_no_modalities_key_still_takes_text() -> None:
    data = captured()
    del data["modalities"]
    assert caps(data) == (("text",), False)


@pytest.mark.parametrize(
    ("template_caps", "tools"),
    [
        ({"supports_tools": True, "supports_tool_calls": True}, True),
        ({"supports_tools": True, "supports_tool_calls": False}, False),  # no round trip
        ({"supports_tools": False, "supports_tool_calls": True}, False),
        ({"supports_tools": "true", "supports_tool_calls": True}, False),
        ({"supports_system_role": True}, False),
    ],
)
def test_tools_need_both_template_caps(template_caps: dict[str, object], tools: bool) -> None:
    data = captured()
    data["chat_template_caps"] = template_caps
    assert caps(data) == (("text",), tools)


@pytest.mark.parametrize(
    ("template", "tools"),
    [
        ("{% if tools %}{{ tools | tojson }}{% endif %}", True),
        ("{% for message in messages %}{{ message.content }}{% endfor %}", False),
        (None, None),  # neither caps nor a template: unknown, not false
        (42, None),
    ],
)
def test_an_older_build_without_template_caps_is_asked_its_template(
    template: object, tools: bool | None
) -> None:
    data = captured()
    del data["chat_template_caps"]
    data["chat_template"] = template
    assert caps(data) == (("text",), tools)
    data["chat_template_caps"] = {}  # an empty object says nothing either
    assert caps(data) == (("text",), tools)


@pytest.mark.parametrize("body", [b"", b"not json", b"[]", b'"props"', b"\xff\xfe"])
def test_a_body_that_is_no_json_object_says_nothing(body: bytes) -> None:
    assert llamacpp.props_capabilities(body) is None


def test_a_vllm_row_gives_its_context_only() -> None:
    body = json.dumps(
        {
            "object": "list",
            "data": [
                {"id": "base", "owned_by": "vllm", "max_model_len": 32768, "parent": None},
                {"id": "lora", "owned_by": "vllm", "max_model_len": 8192, "parent": "base"},
            ],
        }
    ).encode()
    row = parse.select_row(parse.model_rows(body), "base")
    assert row is not None
    assert kind_of(row) == "vllm"
    assert parse.positive_int(row.get("max_model_len")) == 32768


def test_equality_of_the_receipt_ignores_the_capabilities() -> None:
    # The context receipt's tests compare ModelMetadata; what /props adds is compared apart.
    plain = ModelMetadata("llamacpp", 2048, 8192, 1, "/props")
    assert plain == ModelMetadata("llamacpp", 2048, 8192, 1, "/props", ("text",), False)
    assert ModelMetadata("llamacpp", 2048, source="/props", inputs=("text",)).as_dict() == {
        "backend": "llamacpp",
        "context_length": 2048,
        "source": "/props",
        "inputs": ("text",),
    }
