"""Alias rows of /v1/models: served by the same process, so they report what it reported."""

from __future__ import annotations

from modelswap.http.catalog import alias_rows

ROW = {
    "id": "qwen",
    "object": "model",
    "state": "ready",
    "aliases": ["coder", "q"],
    "max_model_len": 4096,
    "context_length": 4096,
    "meta": {"n_ctx": 4096, "n_ctx_train": 32768},
    "configured": {"context": 8192},
}


def test_each_alias_inherits_the_reported_context_and_state() -> None:
    rows = alias_rows(ROW, ("coder", "q"))
    assert [row["id"] for row in rows] == ["coder", "q"]
    for row in rows:
        assert row["alias_for"] == "qwen"
        assert row["state"] == "ready"
        assert row["max_model_len"] == row["context_length"] == 4096
        assert row["meta"] == {"n_ctx": 4096, "n_ctx_train": 32768}
        assert row["configured"] == {"context": 8192}
        assert "aliases" not in row


def test_no_alias_no_row() -> None:
    assert alias_rows(ROW, ()) == []
