"""The prompt cache kept across a swap (issue 30), with the fake backend's slots API: what is
saved, restored, dropped and skipped, and that every request is answered all the same."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, fake_cmd, fake_cmd_text, request

pytestmark = pytest.mark.e2e

# A conversation of 200 words (the fake's tokens) and its next turn.
PROMPT = " ".join(f"w{i}" for i in range(200))


def turn(gw: Gateway, model: str, *history: str, salt: str | None = None) -> dict[str, Any]:
    """One chat turn: ``history`` alternates user and assistant texts (``salt``: its
    ``cache_salt``)."""
    messages = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text}
        for i, text in enumerate(history)
    ]
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": 4}
    if salt is not None:
        body["cache_salt"] = salt
    reply = request(
        gw,
        "POST",
        "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    assert reply.status == 200, reply.body
    data = reply.json()
    assert isinstance(data, dict)
    return data


def cached(answer: dict[str, Any]) -> int:
    return int(answer["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0))


def row_of(gw: Gateway, model: str) -> dict[str, Any]:
    """Its /v1/models row (stopped models too)."""
    rows = gw.get_json("/v1/models")["data"]
    assert isinstance(rows, list)
    (row,) = [r for r in rows if r["id"] == model]
    assert isinstance(row, dict)
    return row


def receipt(gw: Gateway, model: str) -> dict[str, Any]:
    last = row_of(gw, model).get("last_swap")
    assert isinstance(last, dict), row_of(gw, model)
    return last


def verdict_of(gw: Gateway, model: str) -> dict[str, Any]:
    """What its restores proved, as its /v1/models row says (stopped models too)."""
    found = row_of(gw, model)["prompt_cache"]
    assert isinstance(found, dict)
    return found


def saved_files(state: Path) -> list[Path]:
    return sorted((state / "prompt-cache").glob("modelswap-*.bin"))


ON = "promptCache: {enabled: true}\n"


def models(*names: str, flags: str = "") -> str:
    return "".join(
        f"  {name}:\n    cmd: {fake_cmd('--slot-bytes-per-token 1000', flags)}\n" for name in names
    )


def test_a_swap_away_and_back_restores_the_slot(gateway: Any, tmp_path: Path) -> None:
    gw = gateway(models("a", "b"), extra_top="promptCache: {enabled: true}\n")
    first = turn(gw, "a", PROMPT)
    assert cached(first) == 0
    answer = first["choices"][0]["message"]["content"]
    turn(gw, "b", "hello")  # evicts a: its slot is saved first
    saved = receipt(gw, "b")["prompt_cache"]["saved"]
    assert [(s["model"], s["slots"]) for s in saved] == [("a", 1)]
    assert saved[0]["tokens"] >= 200
    assert len(saved_files(tmp_path / "state")) == 1
    assert verdict_of(gw, "a")["state"] == "unknown"  # saved, not yet proved
    again = turn(gw, "a", PROMPT, answer, "and then?")  # swaps back: restored before it is sent
    assert cached(again) >= 200
    restored = receipt(gw, "a")["prompt_cache"]["restored"]
    assert restored["slots"] == 1
    assert restored["tokens"] == saved[0]["tokens"]
    # the first answer proved the restore: on the model's row and in the swap's record (the
    # answer is recorded once it has gone out: wait for it)
    gw.wait_for(lambda: verdict_of(gw, "a")["state"] != "unknown")
    verdict = verdict_of(gw, "a")
    assert verdict["state"] == "works", verdict
    assert verdict["saving"] is True
    assert verdict["last"]["cached_tokens"] == cached(again)
    assert verdict["last"]["restored_tokens"] == restored["tokens"]
    proof = receipt(gw, "a")["prompt_cache"]["proof"]
    assert proof["state"] == "works"
    assert verdict_of(gw, "a")["state"] == "works"


def test_a_slot_file_the_backend_left_readable_is_made_private_once_saved(
    gateway: Any, tmp_path: Path
) -> None:
    # A backend that sets its own mode (0644) whatever the keeper's umask 077: the saved
    # conversation is still this user's alone once the gateway has checked it (issue 38).
    gw = gateway(models("a", "b", flags="--slot-file-mode 644"), extra_top=ON)
    turn(gw, "a", PROMPT)
    turn(gw, "b", "hello")  # evicts a: its slot is saved
    [saved] = saved_files(tmp_path / "state")
    assert stat.S_IMODE(os.stat(saved).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(saved.parent).st_mode) == 0o700


def test_a_corrupt_file_is_dropped_and_the_request_served(gateway: Any, tmp_path: Path) -> None:
    gw = gateway(models("a", "b"), extra_top="promptCache: {enabled: true}\n")
    answer = turn(gw, "a", PROMPT)["choices"][0]["message"]["content"]
    turn(gw, "b", "hello")
    (saved,) = saved_files(tmp_path / "state")
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0xFF  # one flipped byte: the size is right, the bytes are not
    saved.write_bytes(bytes(data))
    again = turn(gw, "a", PROMPT, answer, "and then?")
    assert cached(again) == 0  # prefilled again, as if nothing had been saved
    restored = receipt(gw, "a")["prompt_cache"]["restored"]
    assert restored["slots"] == 0
    (dropped,) = restored["detail"]
    assert dropped["result"] == "dropped"
    assert "differ" in dropped["reason"]
    assert not saved.exists()


def test_a_truncated_file_is_dropped(gateway: Any, tmp_path: Path) -> None:
    gw = gateway(models("a", "b"), extra_top="promptCache: {enabled: true}\n")
    turn(gw, "a", PROMPT)
    turn(gw, "b", "hello")
    (saved,) = saved_files(tmp_path / "state")
    saved.write_bytes(saved.read_bytes()[:-1000])
    assert cached(turn(gw, "a", PROMPT)) == 0
    (dropped,) = receipt(gw, "a")["prompt_cache"]["restored"]["detail"]
    assert "truncated" in dropped["reason"]
    assert not saved.exists()


def test_a_file_from_another_command_is_never_restored(gateway: Any, tmp_path: Path) -> None:
    # a and b differ only in their commands' flags: their files have the same size
    gw = gateway(
        models("a", flags="--model x") + models("b", flags="--model y"),
        extra_top="promptCache: {enabled: true}\n",
    )
    turn(gw, "a", PROMPT)
    turn(gw, "b", PROMPT)  # a saved
    turn(gw, "a", PROMPT)  # b saved (a restored)
    state = tmp_path / "state"
    index = json.loads((state / "prompt-cache" / "index.json").read_text())
    by_model = {f["model"]: state / "prompt-cache" / f["name"] for f in index["files"]}
    assert by_model["a"].stat().st_size == by_model["b"].stat().st_size
    shutil.copyfile(by_model["a"], by_model["b"])  # b's name, a's bytes
    assert cached(turn(gw, "b", PROMPT)) == 0
    (dropped,) = receipt(gw, "b")["prompt_cache"]["restored"]["detail"]
    assert dropped["result"] == "dropped"
    assert not by_model["b"].exists()
    assert by_model["a"].exists()  # a's own file is untouched


def test_a_changed_command_removes_its_files(gateway: Any, tmp_path: Path) -> None:
    gw = gateway(models("a", "b"), extra_top="promptCache: {enabled: true}\n")
    turn(gw, "a", PROMPT)
    turn(gw, "b", "hello")
    (saved,) = saved_files(tmp_path / "state")
    assert gw.config_path is not None
    text = gw.config_path.read_text().replace("1000", "1000 --tokens 3", 1)  # a's command
    gw.config_path.write_text(text)
    os.kill(gw.proc.pid, signal.SIGHUP)
    gw.wait_for(lambda: not saved.exists())
    assert cached(turn(gw, "a", PROMPT)) == 0
    assert "restored" not in receipt(gw, "a").get("prompt_cache", {})


def test_a_full_disk_budget_drops_the_oldest_file(gateway: Any, tmp_path: Path) -> None:
    # each save is 200+ words x 1000 bytes; the budget holds one; c keeps no cache
    c = f"  c:\n    promptCache: false\n    cmd: {fake_cmd()}\n"
    gw = gateway(
        models("a", "b") + c, extra_top="promptCache: {enabled: true, diskBudget: 300000}\n"
    )
    turn(gw, "a", PROMPT)
    turn(gw, "b", PROMPT)  # a saved
    turn(gw, "c", "hi")  # b saved: a's older file is dropped to make room
    files = json.loads((tmp_path / "state" / "prompt-cache" / "index.json").read_text())["files"]
    assert [f["model"] for f in files] == ["b"]
    assert len(saved_files(tmp_path / "state")) == 1
    assert cached(turn(gw, "b", PROMPT)) >= 200  # b's file was kept
    assert cached(turn(gw, "a", PROMPT)) == 0  # a's was not: served, prefilled again


def test_a_slot_larger_than_the_budget_is_skipped(gateway: Any, tmp_path: Path) -> None:
    gw = gateway(models("a", "b"), extra_top="promptCache: {enabled: true, diskBudget: 1000}\n")
    turn(gw, "a", PROMPT)
    turn(gw, "b", "hello")
    (saved,) = receipt(gw, "b")["prompt_cache"]["saved"]
    assert saved["slots"] == 0
    (slot,) = saved["detail"]
    assert slot["result"] == "skipped"
    assert "budget" in slot["reason"]
    assert saved_files(tmp_path / "state") == []
    assert cached(turn(gw, "a", PROMPT)) == 0


def test_a_save_past_the_ceiling_is_skipped_and_the_swap_goes_on(
    gateway: Any, tmp_path: Path
) -> None:
    gw = gateway(
        models("a", flags="--slot-save-seconds 30") + models("b"),
        extra_top="promptCache: {enabled: true, saveTimeout: 0.5}\n",
    )
    turn(gw, "a", PROMPT)
    assert turn(gw, "b", "hello")["choices"]  # b serves: the save did not hold the swap
    (saved,) = receipt(gw, "b")["prompt_cache"]["saved"]
    (slot,) = saved["detail"]
    assert slot["result"] == "skipped"
    assert "saveTimeout" in slot["reason"]
    assert saved_files(tmp_path / "state") == []  # the partial file is gone
    assert cached(turn(gw, "a", PROMPT)) == 0
    metrics = request(gw, "GET", "/metrics").body.decode()
    assert re.search(
        r'modelswap_prompt_cache_slots_total\{action="save",model="a",result="skipped"\} 1', metrics
    ), metrics


def test_a_restored_conversation_that_went_on_is_saved_anew(gateway: Any, tmp_path: Path) -> None:
    # restored, continued, swapped away again: the newer state is saved over the old file
    gw = gateway(models("a", "b"), extra_top="promptCache: {enabled: true}\n")
    first_turn = turn(gw, "a", PROMPT)
    answer = first_turn["choices"][0]["message"]["content"]
    turn(gw, "b", "hello")  # a saved
    (first,) = receipt(gw, "b")["prompt_cache"]["saved"]
    longer = (PROMPT, answer, "and then?")
    again = turn(gw, "a", *longer)  # restored, then continued
    assert cached(again) >= first_turn["usage"]["prompt_tokens"] - 1
    turn(gw, "b", "hello")  # a saved again: what it holds now, not the restored file
    (second,) = receipt(gw, "b")["prompt_cache"]["saved"]
    (slot,) = second["detail"]
    assert slot["result"] == "saved", slot
    assert second["tokens"] > first["tokens"]
    third = turn(gw, "a", *longer, again["choices"][0]["message"]["content"], "and after?")
    # the second turn's prompt came back whole: more than the first save held
    assert cached(third) >= again["usage"]["prompt_tokens"] - 1
    assert cached(third) > first["tokens"]


def swap_back_and_forth(gw: Gateway, times: int, *, salt: str | None = None) -> None:
    """a answers the same conversation, b evicts it (a saved): ``times`` over."""
    for _ in range(times):
        turn(gw, "a", PROMPT, salt=salt)
        turn(gw, "b", "hello")


def test_restores_that_never_work_stop_the_saves(gateway: Any, tmp_path: Path) -> None:
    # a's restores answer done and keep nothing (ggml-org/llama.cpp#26676)
    gw = gateway(
        models("a", flags="--slot-restore-noop") + models("b"),
        extra_top="promptCache: {enabled: true}\n",
    )
    swap_back_and_forth(gw, 2)  # saved twice; the second start's restore proved nothing
    verdict = verdict_of(gw, "a")
    assert verdict["state"] == "fails", verdict
    assert verdict["saving"] is True
    assert verdict["last"]["cached_tokens"] == 0
    assert receipt(gw, "a")["prompt_cache"]["proof"]["state"] == "fails"
    swap_back_and_forth(gw, 2)  # the third and fourth restores fail too: saving stops
    verdict = verdict_of(gw, "a")
    assert verdict["saving"] is False, verdict
    assert "3 restores in a row" in verdict["stopped"]
    assert verdict["proofs"] == {"fails": 3}
    index = json.loads((tmp_path / "state" / "prompt-cache" / "index.json").read_text())
    assert [f["model"] for f in index["files"]] == ["b"]  # a's file went with it
    assert "saved" not in receipt(gw, "b")["prompt_cache"]  # the last swap away saved none
    assert gw.log().count("restores in a row did not work") == 1  # said once
    metrics = request(gw, "GET", "/metrics").body.decode()
    assert 'modelswap_prompt_cache_proofs_total{model="a",state="fails"} 3.0' in metrics, metrics


def test_a_salted_request_is_the_known_reason(gateway: Any) -> None:
    gw = gateway(models("a", "b"), extra_top="promptCache: {enabled: true}\n")
    swap_back_and_forth(gw, 2, salt="user-42")
    verdict = verdict_of(gw, "a")
    assert verdict["state"] == "fails", verdict
    assert "cache_salt" in verdict["reason"]
    assert verdict["last"]["salted"] is True
    assert "cache_salt" in verdict["fix"]


def test_a_server_without_slots_is_not_asked_again(gateway: Any, tmp_path: Path) -> None:
    # issue 41 item 6: promptCache on for all, one server has no /slots
    gw = gateway(
        models("a", flags="--no-slots") + models("b"),
        extra_top="promptCache: {enabled: true}\n",
    )
    swap_back_and_forth(gw, 1)
    assert "prompt_cache" not in receipt(gw, "b")  # no error in the swap's record
    verdict = verdict_of(gw, "a")
    assert verdict["state"] == "unsupported", verdict
    assert "404" in verdict["reason"]
    assert "GET /slots" not in gw.log().replace(verdict["reason"], "")


def test_a_vllm_server_is_never_asked_for_slots(gateway: Any) -> None:
    vllm = f"  v:\n    cmd: {fake_cmd('--flavor vllm --no-slots')}\n"
    gw = gateway(models("b") + vllm, extra_top="promptCache: {enabled: true}\n")
    turn(gw, "v", "hello")
    gw.wait_for(lambda: "meta" in gw.running()["v"])  # its probe answered: vLLM
    turn(gw, "b", "hello")  # evicts v: nothing asked of it
    assert "prompt_cache" not in receipt(gw, "b")
    verdict = verdict_of(gw, "v")
    assert verdict["state"] == "unsupported"
    assert "vllm" in verdict["reason"]


def paired(release: Path, ram: str) -> str:
    """a and b in one swapping group (one runs at a time), each declaring 1 GiB of a ``ram``
    budget; a's save waits until b's command has begun (it creates ``release``)."""
    slots = "--slot-bytes-per-token 1000"
    b = f"touch {shlex.quote(str(release))}; exec {fake_cmd_text(slots)}"
    return (
        f"  a:\n    uses: {{ram: 1GiB}}\n"
        f"    cmd: {fake_cmd(slots, f'--slot-save-until {release}')}\n"
        f"  b:\n    uses: {{ram: 1GiB}}\n    cmd: {json.dumps('sh -c ' + shlex.quote(b))}\n"
    )


def pair_top(ram: str, save_timeout: float = 60) -> str:
    return (
        f"promptCache: {{enabled: true, saveTimeout: {save_timeout}}}\nresources: {{ram: {ram}}}\n"
        "groups:\n  pair: {members: [a, b], swap: true}\n"
    )


def test_the_start_begins_while_the_save_runs_when_both_fit(gateway: Any, tmp_path: Path) -> None:
    release = tmp_path / "b-began"
    gw = gateway(paired(release, "4GiB"), extra_top=pair_top("4GiB"))
    turn(gw, "a", PROMPT)
    turn(gw, "b", "hello")  # a's save finishes only because b's start began beside it
    record = receipt(gw, "b")
    assert record["stop_overlapped"] is True
    (saved,) = record["prompt_cache"]["saved"]
    assert saved["slots"] == 1, saved
    assert cached(turn(gw, "a", PROMPT)) >= 200  # and it restores as ever


def test_the_start_waits_for_the_stop_when_the_budget_is_tight(
    gateway: Any, tmp_path: Path
) -> None:
    # the budget holds one of them: the eviction makes the room, so the order is kept; a's
    # save then waits for a start that comes after it, and its ceiling ends it
    release = tmp_path / "b-began"
    gw = gateway(paired(release, "1GiB"), extra_top=pair_top("1GiB", save_timeout=1))
    turn(gw, "a", PROMPT)
    turn(gw, "b", "hello")
    record = receipt(gw, "b")
    assert "stop_overlapped" not in record
    (saved,) = record["prompt_cache"]["saved"]
    (slot,) = saved["detail"]
    assert slot["result"] == "skipped"
    assert "saveTimeout" in slot["reason"]
