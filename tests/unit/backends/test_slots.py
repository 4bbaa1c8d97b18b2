"""llama.cpp's slots API read (issue 30): /slots as the installed server lists it, and the
answers of a save and a restore."""

from __future__ import annotations

import json

from modelswap.backends.slots import parse_action, parse_slots, save_path
from modelswap.reported import SlotState

# GET /slots of llama.cpp (xllamacpp 2026.10, -np 2): slot 1 has served one task; slot 0 none.
SLOTS_2026 = json.dumps(
    [
        {"id": 0, "n_ctx": 2048, "speculative": False, "is_processing": False},
        {
            "id": 1,
            "n_ctx": 2048,
            "speculative": False,
            "is_processing": False,
            "id_task": 0,
            "n_prompt_tokens": 870,
            "n_prompt_tokens_processed": 0,
            "n_prompt_tokens_cache": 0,
            "params": {"temperature": 0.0},
            "next_token": [{"has_next_token": False, "n_remain": -1, "n_decoded": 0}],
        },
    ]
).encode()


def test_slots_of_the_installed_server() -> None:
    assert parse_slots(SLOTS_2026) == [
        SlotState(0, False, None, None),
        SlotState(1, False, 870, 0),
    ]


def test_slots_of_older_servers_and_junk() -> None:
    old = json.dumps([{"id": 0, "state": 1, "n_past": 12}, {"id": 1, "tokens_cached": 7}])
    assert parse_slots(old.encode()) == [SlotState(0, True, 12), SlotState(1, False, 7)]
    assert parse_slots(b'{"error": "no slots"}') is None
    assert parse_slots(b"not json") is None
    assert parse_slots(b'[{"id": -1}, {"id": true}, "x", {"id": 2, "n_prompt_tokens": -3}]') == [
        SlotState(2, False, None)
    ]


def test_a_save_and_a_restore_answer() -> None:
    saved = (  # as the installed server answered
        b'{"id_slot":1,"filename":"f.bin","n_saved":870,"n_written":20059496,'
        b'"timings":{"save_ms":139.479}}'
    )
    restored = (
        b'{"id_slot":0,"filename":"f.bin","n_restored":870,"n_read":20059496,'
        b'"timings":{"restore_ms":12.262}}'
    )
    s = parse_action(1, 200, saved, "save")
    assert (s.slot, s.tokens, s.bytes, s.ms, s.error) == (1, 870, 20059496, 139.479, None)
    r = parse_action(0, 200, restored, "restore")
    assert (r.tokens, r.bytes, r.ms, r.error) == (870, 20059496, 12.262, None)
    assert parse_action(0, 200, saved, "restore").error  # a save's answer is no restore's


def test_a_refusal_says_why() -> None:
    refused = (
        b'{"error":{"code":501,"message":"This server does not support slots action. '
        b'Start it with `--slot-save-path`","type":"not_supported_error"}}'
    )
    answer = parse_action(0, 501, refused, "save")
    assert answer.error is not None
    assert answer.error.startswith("answered 501: This server does not support slots action")
    assert parse_action(0, 400, b"oops", "restore").error == "answered 400"


def test_the_save_path_a_command_names() -> None:
    assert save_path(["llama-server", "-m", "m.gguf", "--slot-save-path", "/var/slots"]) == (
        "/var/slots"
    )
    assert save_path(["llama-server", "--slot-save-path=/a", "--slot-save-path=/b"]) == "/b"
    assert save_path(["llama-server", "-m", "m.gguf"]) is None
