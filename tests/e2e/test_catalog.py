"""End to end: the truthful catalog (docs/architecture.md, "The catalog"; issue 3).
``/v1/models``, ``/models`` and ``/running`` show what each running backend itself reported,
nothing for models not running, the command line's promise apart as ``configured``, and the
allocator's receipt as ``capacity``.

The probe runs right after READY, concurrently with the first request, so tests poll (with a
deadline) until the reported fields appear."""

from __future__ import annotations

import functools
import http.client
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai
import pytest
from tests.e2e.conftest import (
    Gateway,
    Reply,
    chat,
    chat_body,
    fake_cmd,
    held_cmd,
    llamacpp_cmd,
)

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
LOGS = Path(__file__).resolve().parents[1] / "data" / "startup-logs"
REPORTED = ("max_model_len", "context_length", "meta")
NEVER_WHEN_NOT_READY = (*REPORTED, "reported", "capacity", "context_mismatch")


def models(gw: Gateway, path: str = "/v1/models") -> dict[str, dict[str, Any]]:
    data = gw.get_json(path)["data"]
    assert isinstance(data, list)
    return {str(row["id"]): row for row in data}


def reported_in(gw: Gateway, model: str) -> bool:
    return "max_model_len" in models(gw)[model]


def assert_omitted(row: dict[str, Any]) -> None:
    present = [key for key in NEVER_WHEN_NOT_READY if key in row]
    assert present == [], f"{row['id'] if 'id' in row else row['model']}: {present} in {row}"


def send_chat(gw: Gateway, model: str) -> http.client.HTTPConnection:
    """Send a chat request now; read its reply later with :func:`read_reply_of`."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=60)
    conn.request(
        "POST", "/v1/chat/completions", chat_body(model), {"Content-Type": "application/json"}
    )
    return conn


def read_reply_of(conn: http.client.HTTPConnection) -> Reply:
    resp = conn.getresponse()
    return Reply(resp.status, resp.headers, resp.read())


def ok_chat(gw: Gateway, model: str) -> None:
    reply = chat(gw, model, max_tokens=1)
    assert reply.status == 200, reply.body


# ---- configured, and nothing reported before a start ----------------------------------------


def test_stopped_rows_omit_reported_fields_and_show_configured(gateway: StartGateway) -> None:
    gw = gateway(
        f"""
  vl:
    cmd: {fake_cmd("--flavor vllm --max-model-len 200001 --max-num-seqs 8")}
    aliases: [vl-alias]
  eq:
    cmd: {fake_cmd("--flavor vllm --max-model-len=8192")}
  llama:
    cmd: {fake_cmd("-c 4096 -np 2")}
  last:
    cmd: {fake_cmd("--max-model-len 1024 --max-model-len 3072 -c junk")}
  plain:
    cmd: {fake_cmd()}
""",
        extra_top="includeAliasesInList: true\n",
    )
    for path in ("/v1/models", "/models"):
        rows = models(gw, path)
        assert set(rows) == {"vl", "vl-alias", "eq", "llama", "last", "plain"}  # with aliases
        for row in rows.values():
            assert row["state"] == "stopped"
            assert_omitted(row)
        assert rows["vl"]["configured"] == {
            "max_model_len": 200001,
            "max_num_seqs": 8,
            "context": 200001,
        }
        assert rows["vl-alias"]["configured"] == rows["vl"]["configured"]
        assert rows["vl-alias"]["alias_for"] == "vl"
        assert rows["eq"]["configured"] == {"max_model_len": 8192, "context": 8192}
        assert rows["llama"]["configured"] == {"ctx_size": 4096, "parallel": 2, "context": 2048}
        assert rows["last"]["configured"] == {"max_model_len": 3072, "context": 3072}
        assert "configured" not in rows["plain"]
    assert gw.running() == {}


# ---- a ready vLLM-like backend: reported, aliases, then gone when stopped --------------------


def test_ready_vllm_row_reports_its_own_context_and_aliases_inherit(
    gateway: StartGateway,
) -> None:
    cmd = fake_cmd("--flavor vllm --model served/vl --strict-model --ctx 4096 --max-model-len 4096")
    gw = gateway(
        f"""
  vl:
    cmd: {cmd}
    useModelName: served/vl
    aliases: [vl-alias, vl-other]
""",
        extra_top="includeAliasesInList: true\n",
    )
    ok_chat(gw, "vl-alias")  # the strict backend accepts only its served name
    gw.wait_for(lambda: reported_in(gw, "vl"))
    rows = models(gw)
    row = rows["vl"]
    assert row["state"] == "ready"
    assert row["max_model_len"] == row["context_length"] == 4096
    assert row["meta"] == {"n_ctx": 4096}
    assert row["configured"] == {"max_model_len": 4096, "context": 4096}
    for alias in ("vl-alias", "vl-other"):
        assert rows[alias]["alias_for"] == "vl"
        for key in (*REPORTED, "configured", "state"):
            assert rows[alias][key] == row[key], (alias, key)
    assert models(gw, "/models")["vl-alias"]["max_model_len"] == 4096
    running = gw.running()["vl"]
    assert running["reported"] == {
        "backend": "vllm",
        "context_length": 4096,
        "source": "/v1/models",
    }
    assert running["max_model_len"] == 4096
    assert "context_mismatch" not in running
    assert "the backend serves" not in gw.log()

    # Stopped: the value is gone (omitted, not null), the configured promise stays.
    status, _, body = gw.post("/api/models/unload/vl", b"")
    assert status == 200, body
    rows = models(gw)
    for model in ("vl", "vl-alias", "vl-other"):
        assert rows[model]["state"] == "stopped"
        assert_omitted(rows[model])
        assert rows[model]["configured"] == {"max_model_len": 4096, "context": 4096}
    assert "vl" not in gw.running()


# ---- reported < configured --------------------------------------------------------------------


def test_context_mismatch_is_noted_once(gateway: StartGateway) -> None:
    gw = gateway(
        f"""
  short:
    cmd: {fake_cmd("--flavor vllm --ctx 1024 --max-model-len 2048")}
"""
    )
    ok_chat(gw, "short")
    gw.wait_for(lambda: "context_mismatch" in gw.running().get("short", {}))
    running = gw.running()["short"]
    note = running["context_mismatch"]
    assert isinstance(note, str)
    assert "1024" in note
    assert "2048" in note
    assert running["max_model_len"] == 1024  # the receipt, not the promise
    assert running["configured"] == {"max_model_len": 2048, "context": 2048}
    row = models(gw)["short"]
    assert row["max_model_len"] == row["context_length"] == 1024
    assert row["configured"]["context"] == 2048

    warning = re.compile(r"WARNING .*model short: the backend serves 1024 tokens.*asked for 2048")
    gw.wait_for(lambda: len(warning.findall(gw.log())) >= 1)
    ok_chat(gw, "short")  # more traffic probes nothing more
    assert "context_mismatch" in gw.running()["short"]
    assert len(warning.findall(gw.log())) == 1, gw.log()


# ---- capacity receipts --------------------------------------------------------------------


def test_capacity_receipts_in_running(gateway: StartGateway) -> None:
    vllm_log = LOGS / "vllm-new-success.log"
    llama_log = LOGS / "llamacpp-success.log"
    gw = gateway(
        f"""
  cap-vllm:
    cmd: {fake_cmd(f'--flavor vllm --print-log "{vllm_log}"')}
  cap-llama:
    cmd: {fake_cmd(f'--flavor llamacpp --print-log "{llama_log}" -c 4096 -np 2')}
"""
    )
    ok_chat(gw, "cap-vllm")
    capacity = gw.running()["cap-vllm"]["capacity"]
    assert capacity == {
        "kv_cache_tokens": 1283072,
        "concurrency_tokens_per_request": 262144,
        "max_concurrency": 4.89,
        "kv_cache_gib": 61.52,
        "weights_gib": 22.07,
    }
    assert capacity == json.loads(vllm_log.with_suffix(".expected.json").read_text())["receipt"]

    ok_chat(gw, "cap-llama")  # swaps cap-vllm out
    running = gw.running()
    assert "cap-vllm" not in running
    assert running["cap-llama"]["capacity"] == {
        "n_ctx": 524288,
        "n_ctx_seq": 131072,
        "kv_cache_mib": 17408.0,
        "kv_cells": 524288,
    }
    assert running["cap-llama"]["configured"] == {
        "ctx_size": 4096,
        "parallel": 2,
        "context": 2048,
    }


# ---- the probe never delays a request ------------------------------------------------------


def test_slow_metadata_never_delays_the_first_request(gateway: StartGateway) -> None:
    gw = gateway(
        f"""
  slow:
    cmd: {fake_cmd("--flavor vllm --ctx 4096 --metadata-delay 5")}
"""
    )
    ok_chat(gw, "slow")
    # Answered while the probe still waited (the order of events): not after the probe's
    # 2-second bound (nor the 5 s delay).
    assert "model slow: metadata unavailable" not in gw.log()
    running = gw.running()["slow"]
    assert isinstance(running["start_seconds"], float)
    assert "max_model_len" not in running
    # The probe gives up within its bound; the model stays ready and reports nothing.
    gw.wait_for(lambda: "model slow: metadata unavailable: no answer within 2 s" in gw.log())
    row = models(gw)["slow"]
    assert row["state"] == "ready"
    assert_omitted(row)
    running = gw.running()["slow"]
    assert running["state"] == "ready"
    assert "reported" not in running
    assert "max_model_len" not in running
    ok_chat(gw, "slow")


# ---- starting and failed rows omit ------------------------------------------------------------


def test_starting_and_failed_rows_omit_reported_fields(
    gateway: StartGateway, tmp_path: Path
) -> None:
    release = tmp_path / "release-loading"  # its start waits for it: starting while we look
    gw = gateway(
        f"""
  loading:
    cmd: {held_cmd(release, "--ctx 3072")}
  broken:
    cmd: {fake_cmd("--fail-start --max-model-len 4096")}
    failureBackoff: 0
"""
    )
    conn = send_chat(gw, "loading")
    try:
        gw.wait_for(lambda: models(gw)["loading"]["state"] == "starting")
        assert_omitted(models(gw)["loading"])
        row = gw.running()["loading"]
        assert row["state"] == "starting"
        assert_omitted(row)
        release.touch()
        reply = read_reply_of(conn)
    finally:
        conn.close()
    assert reply.status == 200, reply.body
    gw.wait_for(lambda: reported_in(gw, "loading"))
    assert models(gw)["loading"]["max_model_len"] == 3072

    failed = chat(gw, "broken")
    assert failed.status >= 500
    rows = models(gw)
    assert rows["broken"]["state"] == "failed"
    assert_omitted(rows["broken"])
    assert rows["broken"]["configured"] == {"max_model_len": 4096, "context": 4096}
    assert rows["loading"]["state"] == "stopped"  # swapped out for the start that failed
    assert_omitted(rows["loading"])
    running = gw.running()["broken"]
    assert running["state"] == "failed"
    assert "last_failure" in running
    assert_omitted(running)


# ---- the real llama.cpp server --------------------------------------------------------------


def sdk_rows(gw: Gateway) -> dict[str, dict[str, Any]]:
    client = openai.OpenAI(base_url=gw.url("/v1"), api_key="unused", max_retries=0, timeout=30)
    try:
        return {m.id: dict(m.model_extra or {}) for m in client.models.list()}
    finally:
        client.close()


def test_real_llamacpp_reports_the_per_slot_context(gateway: StartGateway) -> None:
    gw = gateway(
        f"""
  ctx2048:
    cmd: {llamacpp_cmd(2048)}
  ctx4096np2:
    cmd: {llamacpp_cmd(4096, "-np 2")}
"""
    )
    before = sdk_rows(gw)
    for model in ("ctx2048", "ctx4096np2"):
        assert before[model]["state"] == "stopped"
        assert_omitted({"id": model, **before[model]})
    assert before["ctx2048"]["configured"] == {"ctx_size": 2048, "parallel": 1, "context": 2048}
    assert before["ctx4096np2"]["configured"] == {
        "ctx_size": 4096,
        "parallel": 2,
        "context": 2048,
    }

    for model, slots in (("ctx2048", 1), ("ctx4096np2", 2)):
        ok_chat(gw, model)
        gw.wait_for(functools.partial(reported_in, gw, model))
        row = models(gw)[model]
        assert row["max_model_len"] == row["context_length"] == row["meta"]["n_ctx"] == 2048
        assert row["meta"]["n_ctx_train"] == 8192  # SmolLM2's trained context
        extra = sdk_rows(gw)[model]
        assert extra["max_model_len"] == 2048
        assert extra["context_length"] == 2048
        assert extra["meta"]["n_ctx"] == 2048
        running = gw.running()[model]
        reported = running["reported"]
        assert isinstance(reported, dict)
        assert reported["backend"] == "llamacpp"
        assert reported["total_slots"] == slots
        assert reported["context_length"] == 2048
        assert "context_mismatch" not in running
    # The first model was swapped out: its row reports nothing any more.
    assert_omitted(models(gw)["ctx2048"])
