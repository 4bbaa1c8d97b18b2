"""End to end: what each model can do, discovered, kept and labelled (issue 30).

A model that became ready once is listed in ``/v1/models`` with its capabilities in
llama-swap's shape (``architecture``, ``capabilities``, ``supported_parameters``,
``context_window``) after it stopped and after the gateway restarted, labelled as a memory
(``observed``: the last run); the live receipt (``max_model_len``, ``context_length``,
``meta``) stays a ready model's own. A changed command drops the memory at once; a key written
in the config wins; ``disableAuto`` lists exactly what is written. Each gateway of a test shares
its ``stateDir`` (``capabilities.json``) and gets new ports, as a restarted one would.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    Gateway,
    chat,
    fake_cmd,
    held_cmd,
    llamacpp_cmd,
    stop_gateway,
)

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
RECEIPT = ("max_model_len", "context_length", "meta", "reported", "capacity", "context_mismatch")
LISTED = ("architecture", "capabilities", "supported_parameters", "context_window", "observed")
PEER = "peers:\n  box: {proxy: 'http://127.0.0.1:9', models: [beta]}\n"
APPLIED = "config reloaded from"


def rows(gw: Gateway) -> dict[str, dict[str, Any]]:
    data = gw.get_json("/v1/models")["data"]
    assert isinstance(data, list)
    return {str(row["id"]): row for row in data}


def observed_in(gw: Gateway, model: str) -> bool:
    return "observed" in rows(gw)[model]


def ran(gw: Gateway, model: str) -> None:
    """``model`` served a request and its backend's report is kept."""
    reply = chat(gw, model, max_tokens=1)
    assert reply.status == 200, reply.body
    gw.wait_for(lambda: observed_in(gw, model))


def unload(gw: Gateway, model: str) -> None:
    status, _, body = gw.post(f"/api/models/unload/{model}", b"")
    assert status == 200, body
    gw.wait_for(lambda: rows(gw)[model]["state"] == "stopped")


def stored_models(path: Path) -> dict[str, Any]:
    """The ``models`` of ``capabilities.json`` (none before its first save)."""
    if not path.is_file():
        return {}
    models = json.loads(path.read_text())["models"]
    assert isinstance(models, dict)
    return models


def no_receipt(row: dict[str, Any]) -> None:
    present = [key for key in RECEIPT if key in row]
    assert present == [], f"{row['id']}: the live receipt {present} on a row not ready: {row}"


def nothing_listed(row: dict[str, Any]) -> None:
    present = [key for key in LISTED if key in row]
    assert present == [], f"{row['id']}: {present} listed: {row}"


# ---- with the fake backend (llama.cpp's /props and vLLM's /v1/models) ----------------------


def test_capabilities_outlive_the_model_and_the_gateway(gateway: StartGateway) -> None:
    models = f"""
  eye:
    cmd: {fake_cmd("--modalities vision --template-tools --ctx 3072")}
    aliases: [eye-alias]
  vl:
    cmd: {fake_cmd("--flavor vllm --ctx 4096")}
    capabilities: {{tools: true}}
"""
    top = "includeAliasesInList: true\n" + PEER
    gw = gateway(models, extra_top=top)
    before = rows(gw)
    nothing_listed(before["eye"])  # never run: nothing to remember
    assert before["vl"]["capabilities"] == {"function_calling": True}  # written: listed at once
    assert "observed" not in before["vl"]

    ran(gw, "eye")
    ready = rows(gw)["eye"]
    assert ready["max_model_len"] == ready["context_length"] == 3072  # the receipt, while ready
    assert ready["observed"]["source"] == "last run"  # and the memory, labelled apart
    ran(gw, "vl")  # swaps eye out
    listed = rows(gw)
    eye = listed["eye"]
    assert eye["state"] == "stopped"
    no_receipt(eye)
    expected_eye = {
        "architecture": {
            "input_modalities": ["text", "image"],
            "output_modalities": ["text"],
            "modality": "text+image->text",
        },
        "capabilities": {"vision": True, "function_calling": True},
        "supported_parameters": ["tools", "tool_choice"],
        "context_window": 3072,
    }
    assert {key: eye[key] for key in expected_eye} == expected_eye
    observed = eye["observed"]
    assert observed["source"] == "last run"
    assert observed["at"].endswith("Z")
    assert {k: v for k, v in observed.items() if k not in ("source", "at")} == {
        "backend": "llamacpp",
        "endpoint": "/props",
        "in": ["text", "image"],
        "out": ["text"],
        "tools": True,
        "context": 3072,
        "total_slots": 1,
        "fills": ["in", "out", "tools", "context"],
    }
    alias = listed["eye-alias"]
    for key in (*expected_eye, "observed", "state"):
        assert alias[key] == eye[key], key
    assert gw.get_json("/v1/models/eye") == eye  # one model's row: the same
    vl = listed["vl"]
    assert vl["state"] == "ready"
    assert vl["context_window"] == vl["max_model_len"] == 4096
    assert vl["capabilities"] == {"function_calling": True}
    assert vl["observed"]["backend"] == "vllm"
    assert vl["observed"]["fills"] == ["in", "out", "context"]  # tools is written
    peer = listed["box/beta"]
    no_receipt(peer)
    nothing_listed(peer)  # a peer's capabilities are its own to report

    kept = Path(str(gw.config_path)).parent / "state" / "capabilities.json"
    gw.wait_for(lambda: set(stored_models(kept)) == {"eye", "vl"})  # saved soon after READY
    stored = json.loads(kept.read_text())
    assert "openai_backend" not in json.dumps(stored)  # a digest of the command, not its text

    stop_gateway(gw)
    again = gateway(models, extra_top=top)  # a restart: new ports, the same stateDir
    after = rows(again)
    for model in ("eye", "eye-alias", "vl"):
        assert after[model]["state"] == "stopped"
        no_receipt(after[model])
    assert {key: after["eye"][key] for key in expected_eye} == expected_eye
    assert after["eye"]["observed"] == observed
    assert after["vl"]["context_window"] == 4096
    nothing_listed(after["box/beta"])


def test_a_generic_server_s_context_is_shown_ready_and_kept_after_unload(
    gateway: StartGateway,
) -> None:
    # Neither llama.cpp nor vLLM (its row's owned_by names another server), but its /v1/models
    # row says max_model_len: shown while ready, and kept after the unload like theirs (issue 38).
    models = f"""
  other:
    cmd: {fake_cmd("--flavor vllm --owned-by someserver --ctx 5120")}
"""
    gw = gateway(models)
    ran(gw, "other")
    ready = rows(gw)["other"]
    assert ready["max_model_len"] == ready["context_length"] == 5120
    assert ready["context_window"] == 5120
    unload(gw, "other")
    row = rows(gw)["other"]
    no_receipt(row)
    assert row["context_window"] == 5120
    assert row["observed"]["backend"] == "generic"
    assert row["observed"]["context"] == 5120
    assert row["observed"]["fills"] == ["context"]


def test_a_changed_command_drops_the_memory_at_once(gateway: StartGateway, tmp_path: Path) -> None:
    gw = gateway(f"  m:\n    cmd: {fake_cmd('--template-tools')}\n")
    ran(gw, "m")
    assert rows(gw)["m"]["capabilities"] == {"function_calling": True}
    assert gw.config_path is not None
    kept = gw.config_path.parent / "state" / "capabilities.json"
    gw.wait_for(lambda: "m" in stored_models(kept))
    # The new command's start waits for a file: the reload restarts m, and we look meanwhile.
    release = tmp_path / "release"
    text = gw.config_path.read_text()
    gw.config_path.write_text(text.replace(fake_cmd("--template-tools"), held_cmd(release)))
    os.kill(gw.proc.pid, signal.SIGHUP)
    gw.wait_for(lambda: APPLIED in gw.log())
    nothing_listed(rows(gw)["m"])  # at once: never the old command's memory
    assert stored_models(kept) == {}
    gw.wait_for(lambda: rows(gw)["m"]["state"] == "starting")
    nothing_listed(rows(gw)["m"])
    release.touch()
    gw.wait_for(lambda: observed_in(gw, "m"))  # the new command's own report
    assert "capabilities" not in rows(gw)["m"]  # its template has no tools


def test_written_keys_win_and_disable_auto_lists_only_them(gateway: StartGateway) -> None:
    cmd = fake_cmd("--modalities vision,audio --template-tools")
    gw = gateway(f"  m:\n    cmd: {cmd}\n")
    ran(gw, "m")
    unload(gw, "m")
    stop_gateway(gw)

    written = gateway(f"  m:\n    cmd: {cmd}\n    capabilities: {{tools: false, context: 1000}}\n")
    row = rows(written)["m"]
    assert row["capabilities"] == {"vision": True, "audio_transcriptions": True}  # no tools
    assert "supported_parameters" not in row
    assert row["context_window"] == 1000
    assert row["architecture"]["input_modalities"] == ["text", "image", "audio"]
    assert row["observed"]["fills"] == ["in", "out"]
    assert row["observed"]["context"] == 2048  # what the backend said stays visible
    no_receipt(row)
    stop_gateway(written)

    exact = gateway(f"  m:\n    cmd: {cmd}\n    capabilities: {{disableAuto: true, in: [text]}}\n")
    row = rows(exact)["m"]
    assert row["architecture"] == {"input_modalities": ["text"]}
    for key in ("capabilities", "supported_parameters", "context_window", "observed"):
        assert key not in row, key
    assert exact.config_path is not None
    kept = exact.config_path.parent / "state" / "capabilities.json"
    before = stored_models(kept)
    assert before["m"]["context"] == 2048
    reply = chat(exact, "m", max_tokens=1)
    assert reply.status == 200, reply.body
    exact.wait_for(lambda: "max_model_len" in rows(exact)["m"])  # probed: the live receipt
    assert "observed" not in rows(exact)["m"]
    stop_gateway(exact)  # a save left pending is made on the way out
    assert stored_models(kept) == before  # a run with disableAuto keeps nothing new


# ---- the real llama.cpp server --------------------------------------------------------------


def test_real_llamacpp_props_are_kept_and_listed_for_what_they_are(
    gateway: StartGateway,
) -> None:
    models = f"  smol:\n    cmd: {llamacpp_cmd(2048)}\n"
    gw = gateway(models, extra_top=PEER)
    nothing_listed(rows(gw)["smol"])
    ran(gw, "smol")
    unload(gw, "smol")
    row = rows(gw)["smol"]
    no_receipt(row)
    remembered = {
        "architecture": {
            "input_modalities": ["text"],
            "output_modalities": ["text"],
            "modality": "text->text",
        },
        "context_window": 2048,
    }
    assert {key: row[key] for key in remembered} == remembered
    assert "capabilities" not in row  # SmolLM2: no image input, a template without tools
    observed = row["observed"]
    assert {k: v for k, v in observed.items() if k != "at"} == {
        "source": "last run",
        "backend": "llamacpp",
        "endpoint": "/props",
        "in": ["text"],
        "out": ["text"],
        "tools": False,
        "context": 2048,
        "total_slots": 1,
        "fills": ["in", "out", "tools", "context"],
    }
    no_receipt(rows(gw)["box/beta"])
    nothing_listed(rows(gw)["box/beta"])
    stop_gateway(gw)

    restarted = gateway(models, extra_top=PEER)
    row = rows(restarted)["smol"]
    assert row["state"] == "stopped"
    no_receipt(row)
    assert {key: row[key] for key in remembered} == remembered
    assert row["observed"] == observed
    stop_gateway(restarted)

    caps = "{tools: true, context: 1000}"
    written = gateway(models + f"    capabilities: {caps}\n")
    row = rows(written)["smol"]
    assert row["capabilities"] == {"function_calling": True}
    assert row["context_window"] == 1000
    assert row["architecture"] == remembered["architecture"]
    assert row["observed"]["fills"] == ["in", "out"]
    stop_gateway(written)

    exact = gateway(models + "    capabilities: {disableAuto: true}\n")
    nothing_listed(rows(exact)["smol"])
    stop_gateway(exact)

    changed = gateway(f"  smol:\n    cmd: {llamacpp_cmd(1024)}\n")
    nothing_listed(rows(changed)["smol"])
    stop_gateway(changed)
    back = gateway(models)  # the old command again: dropped for good, not hidden
    nothing_listed(rows(back)["smol"])
