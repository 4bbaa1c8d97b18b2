"""The pure parsers behind the metadata probe (docs/backends.md §7): what a backend's
``/v1/models``, llama.cpp ``/props`` and Ollama ``/api/ps`` say, and which numbers are
believed."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from modelswap.backends import llamacpp, ollama, registry
from modelswap.backends import metadata as parse
from modelswap.reported import ModelMetadata

# Every kind of value that is not a plain positive integer no larger than 2^31.
INVALID: list[Any] = [
    0,
    -1,
    -2048,
    2048.0,
    1.5,
    float("inf"),
    "2048",
    "",
    True,
    False,
    None,
    2**31 + 1,
    2**63,
    [2048],
    {"n": 2048},
]
INVALID_IDS = [repr(v) for v in INVALID]


def kind_of(row: Mapping[str, Any] | None) -> str | None:
    """The backend kind a ``/v1/models`` row's ``owned_by`` names (the registry's adapter)."""
    adapter = registry.owning(row.get("owned_by") if row else None)
    return adapter.name if adapter is not None else None


def body(data: object) -> bytes:
    return json.dumps(data).encode()


# ---- positive_int ---------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 512, 2048, 200001, 2**31])
def test_positive_int_accepts_plain_positive_integers(value: int) -> None:
    assert parse.positive_int(value) == value


@pytest.mark.parametrize("value", INVALID, ids=INVALID_IDS)
def test_positive_int_rejects_every_other_kind(value: object) -> None:
    assert parse.positive_int(value) is None


def test_json_floats_and_strings_stay_rejected_after_decoding() -> None:
    # What a backend body really yields: 2048.0 decodes to a float, "2048" to a str.
    decoded = json.loads('[2048.0, "2048", true, null, 2048e0, 4294967296]')
    assert [parse.positive_int(v) for v in decoded] == [None] * 6


# ---- json_object / model_rows ---------------------------------------------------------------


@pytest.mark.parametrize(
    "raw", [b"", b"not json", b"[1, 2]", b'"text"', b"null", b"\xff\xfe{}", b'{"data": [']
)
def test_json_object_is_none_for_anything_but_an_object(raw: bytes) -> None:
    assert parse.json_object(raw) is None


@pytest.mark.parametrize(
    "raw",
    [b"", b"garbage", b"[]", body({"data": {}}), body({"data": "x"}), body({"object": "list"})],
)
def test_model_rows_of_malformed_lists_are_empty(raw: bytes) -> None:
    assert parse.model_rows(raw) == []


def test_model_rows_keeps_only_object_rows() -> None:
    raw = body({"data": [{"id": "a"}, "b", 3, None, {"id": "c"}]})
    assert parse.model_rows(raw) == [{"id": "a"}, {"id": "c"}]


# ---- row selection ------------------------------------------------------------------------


ROWS = [
    {"id": "base-model", "max_model_len": 8192},
    {"id": "served/name", "max_model_len": 4096},
    {"id": "my-model", "max_model_len": 2048},
]


def test_select_row_prefers_the_name_sent_upstream_use_model_name() -> None:
    # useModelName "served/name" is what the gateway sends, so that row wins.
    assert parse.select_row(ROWS, "served/name") is ROWS[1]


def test_select_row_by_the_models_own_id() -> None:
    assert parse.select_row(ROWS, "my-model") is ROWS[2]


def test_select_row_matches_even_when_the_row_is_first_of_many() -> None:
    assert parse.select_row(ROWS, "base-model") is ROWS[0]


def test_select_row_falls_back_to_the_single_row() -> None:
    only = [{"id": "/models/whatever.gguf", "meta": {"n_ctx": 2048}}]
    assert parse.select_row(only, "my-model") is only[0]


def test_select_row_is_none_when_ambiguous() -> None:
    assert parse.select_row(ROWS, "nobody") is None


def test_select_row_of_no_rows_is_none() -> None:
    assert parse.select_row([], "my-model") is None


def test_select_row_does_not_match_case_insensitively_or_by_prefix() -> None:
    rows = [{"id": "My-Model"}, {"id": "my-model-2"}]
    assert parse.select_row(rows, "my-model") is None


# ---- kind detection -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("owner", "kind"),
    [
        ("vllm", "vllm"),
        ("sglang", "sglang"),
        ("llamacpp", "llamacpp"),
        ("library", None),  # Ollama: a namespace, not a server name
        ("openai", None),
        ("VLLM", None),
        (None, None),
        (7, None),
    ],
)
def test_kind_of_reads_owned_by(owner: object, kind: str | None) -> None:
    assert kind_of({"id": "m", "owned_by": owner}) == kind


def test_kind_of_no_row_is_none() -> None:
    assert kind_of(None) is None
    assert kind_of({"id": "m"}) is None


# ---- row_context ----------------------------------------------------------------------------


def test_row_context_reads_max_model_len_then_context_length_then_meta_n_ctx() -> None:
    both = {"max_model_len": 4096, "context_length": 1, "meta": {"n_ctx": 2}}
    assert parse.row_context(both) == 4096
    assert parse.row_context({"max_model_len": 4096}) == 4096
    assert parse.row_context({"context_length": 3000}) == 3000
    assert parse.row_context({"meta": {"n_ctx": 2048}}) == 2048
    # An invalid first field does not hide a valid later one.
    assert parse.row_context({"max_model_len": 2048.0, "meta": {"n_ctx": 2048}}) == 2048


def test_row_context_of_a_row_without_numbers_is_none() -> None:
    assert parse.row_context({"id": "m"}) is None
    assert parse.row_context({"meta": "n_ctx=2048"}) is None
    assert parse.row_context({"meta": None}) is None


@pytest.mark.parametrize("value", INVALID, ids=INVALID_IDS)
def test_row_context_rejects_invalid_values_in_every_field(value: object) -> None:
    row = {"max_model_len": value, "context_length": value, "meta": {"n_ctx": value}}
    assert parse.row_context(row) is None


@pytest.mark.parametrize("value", INVALID, ids=INVALID_IDS)
def test_row_n_ctx_train_rejects_invalid_values(value: object) -> None:
    assert parse.row_n_ctx_train({"meta": {"n_ctx_train": value}}) is None


def test_row_n_ctx_train() -> None:
    assert parse.row_n_ctx_train({"meta": {"n_ctx": 2048, "n_ctx_train": 8192}}) == 8192
    assert parse.row_n_ctx_train({"max_model_len": 2048}) is None


# ---- llama.cpp /props -----------------------------------------------------------------------


def test_llamacpp_props_per_slot_n_ctx_and_total_slots() -> None:
    raw = body({"default_generation_settings": {"n_ctx": 2048, "params": {}}, "total_slots": 2})
    assert llamacpp.props_context(raw) == (2048, 2)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"<html>not found</html>",
        b"[]",
        body({}),
        body({"default_generation_settings": None, "total_slots": None}),
        body({"default_generation_settings": [2048]}),
        body({"n_ctx": 2048}),  # top-level n_ctx is not the per-slot value
    ],
)
def test_llamacpp_props_without_the_fields_is_unknown(raw: bytes) -> None:
    assert llamacpp.props_context(raw) == (None, None)


@pytest.mark.parametrize("value", INVALID, ids=INVALID_IDS)
def test_llamacpp_props_rejects_invalid_values(value: object) -> None:
    raw = body({"default_generation_settings": {"n_ctx": value}, "total_slots": value})
    assert llamacpp.props_context(raw) == (None, None)


def test_llamacpp_props_keeps_a_valid_n_ctx_when_total_slots_is_bad() -> None:
    raw = body({"default_generation_settings": {"n_ctx": 4096}, "total_slots": "2"})
    assert llamacpp.props_context(raw) == (4096, None)


# ---- Ollama /api/ps -------------------------------------------------------------------------


def ps(*models: dict[str, Any]) -> bytes:
    return body({"models": list(models)})


def test_ollama_context_selects_by_name_or_model() -> None:
    raw = ps(
        {"name": "qwen3:8b", "model": "qwen3:8b", "context_length": 8192},
        {"name": "llama3:latest", "model": "llama3", "context_length": 4096},
    )
    assert ollama.ps_context(raw, "qwen3:8b") == 8192
    assert ollama.ps_context(raw, "llama3") == 4096
    assert ollama.ps_context(raw, "llama3:latest") == 4096


def test_ollama_context_single_fallback_and_ambiguous() -> None:
    one = ps({"name": "qwen3:8b", "context_length": 8192})
    two = ps({"name": "a", "context_length": 1}, {"name": "b", "context_length": 2})
    assert ollama.ps_context(one, "other") == 8192
    assert ollama.ps_context(two, "other") is None
    assert ollama.ps_context(ps(), "other") is None


@pytest.mark.parametrize("raw", [b"", b"{}", body({"models": None}), body({"models": {}}), b"[]"])
def test_ollama_context_malformed(raw: bytes) -> None:
    assert ollama.ps_context(raw, "m") is None


@pytest.mark.parametrize("value", INVALID, ids=INVALID_IDS)
def test_ollama_context_rejects_invalid_values(value: object) -> None:
    assert ollama.ps_context(ps({"name": "m", "context_length": value}), "m") is None


# ---- ModelMetadata --------------------------------------------------------------------------


def test_model_metadata_as_dict_omits_what_is_unknown() -> None:
    found = ModelMetadata("vllm", 4096, source="/v1/models")
    assert found.as_dict() == {"backend": "vllm", "context_length": 4096, "source": "/v1/models"}
    full = ModelMetadata("llamacpp", 2048, 8192, 2, "/props")
    assert full.as_dict() == {
        "backend": "llamacpp",
        "context_length": 2048,
        "n_ctx_train": 8192,
        "total_slots": 2,
        "source": "/props",
    }


def test_deeply_nested_metadata_is_a_value_error_with_the_reason() -> None:
    hostile = b'{"data": ' + b"[" * 30_000 + b"]" * 30_000 + b"}"
    with pytest.raises(ValueError, match="nested deeper than"):
        parse.json_object(hostile)
