"""The last swap's receipt in ``GET /running`` (issue 21): drain, stop, spawn to listening,
listening to healthy and the first request's first byte, through ``python -m modelswap serve``."""

from __future__ import annotations

from collections.abc import Callable

from tests.e2e.conftest import Gateway, chat, fake_cmd, request

StartGateway = Callable[..., Gateway]


def test_running_shows_where_the_last_swap_went(gateway: StartGateway) -> None:
    gw = gateway(f"  a:\n    cmd: {fake_cmd()}\n  b:\n    cmd: {fake_cmd()}\n")
    assert chat(gw, "a").status == 200
    assert chat(gw, "b").status == 200  # one at a time: b evicts a
    gw.wait_for(lambda: "first_byte_seconds" in gw.running()["b"].get("last_swap", {}))
    receipt = gw.running()["b"]["last_swap"]
    assert receipt["target"] == "b"
    assert receipt["evict"] == ["a"]
    for key in ("stop_seconds", "spawn_to_listening_seconds", "listening_to_ready_seconds"):
        assert receipt[key] >= 0, key
    assert receipt["total_seconds"] >= receipt["stop_seconds"]
    # the request that asked for b waited for the swap: its first byte counts it
    assert receipt["first_byte_seconds"] >= receipt["first_request_load_seconds"] > 0
    assert "a" not in gw.running()  # evicted
    # what evicting a threw away (issue 40): its start again; no prefill is known for it
    # (its slots are read only where budgets choose by cost)
    work = receipt["evicted_work"]["a"]
    assert work["start_seconds"] > 0
    assert work["prefill_seconds"] == 0
    assert work["total_seconds"] == work["start_seconds"]


def test_the_activity_log_counts_cached_prompt_tokens(gateway: StartGateway) -> None:
    """Issue 19's Activity stats: the cached tokens a backend reports are recorded (and a
    backend that reports none leaves them unknown, not 0)."""
    gw = gateway(
        f"  warm:\n    cmd: {fake_cmd('--cached-tokens 3')}\n  cold:\n    cmd: {fake_cmd()}\n"
    )
    assert chat(gw, "warm").status == 200
    assert chat(gw, "warm", stream=True, stream_options={"include_usage": True}).status == 200
    assert chat(gw, "cold").status == 200
    rows = request(gw, "GET", "/api/activity").json()["data"]
    cached = {(r["model"], r["streamed"]): r["cached_tokens"] for r in rows}
    assert cached == {("warm", False): 3, ("warm", True): 3, ("cold", False): None}
