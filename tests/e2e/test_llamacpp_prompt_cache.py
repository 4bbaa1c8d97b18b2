"""The prompt cache kept across a swap with the real llama.cpp server (issue 30): a swap away
and back restores the slot, and the next answer is the one a never-swapped server gives."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, fake_cmd, llamacpp_cmd, request

pytestmark = pytest.mark.e2e

# ~180 tokens of conversation: enough that a restore is plain in the cached count, few enough
# to prefill twice on two busy cores.
STORY = " ".join(
    f"On day {i} the keeper of the lighthouse wrote that the sea was calm." for i in range(12)
)


def ask(gw: Gateway, model: str, messages: list[dict[str, str]]) -> dict[str, Any]:
    body = {"model": model, "messages": messages, "max_tokens": 8, "temperature": 0}
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


def text(answer: dict[str, Any]) -> str:
    return str(answer["choices"][0]["message"]["content"])


def cached(answer: dict[str, Any]) -> int:
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_a_swap_away_and_back_restores_the_slot_and_the_same_answer(
    gateway: Any,
) -> None:
    # a keeps its prompt cache; twin is the same server never swapped away (the reference);
    # b is any other model (the fake: it only has to evict a).
    # disableKeepAlives: llama-server drops a kept-alive connection after an answer longer than
    # 5 s (a prefill on busy cores), and the next request on it would fail (bench/prompt_cache.py)
    fresh = "disableKeepAlives: true"
    gw = gateway(
        f"  a:\n    promptCache: true\n    {fresh}\n    cmd: {llamacpp_cmd(2048)}\n"
        f"  twin:\n    {fresh}\n    cmd: {llamacpp_cmd(2048)}\n"
        f"  b:\n    cmd: {fake_cmd()}\n"
    )
    first = [{"role": "user", "content": STORY + " What did the keeper write?"}]

    def second(reply: str) -> list[dict[str, str]]:
        return [
            *first,
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "Why?"},
        ]

    reference_first = ask(gw, "twin", first)
    reference = ask(gw, "twin", second(text(reference_first)))  # twin never left

    answer_first = ask(gw, "a", first)
    assert text(answer_first) == text(reference_first)
    prompt_tokens = int(answer_first["usage"]["prompt_tokens"])
    ask(gw, "b", [{"role": "user", "content": "hello"}])  # evicts a: its slot is saved
    (saved,) = gw.running()["b"]["last_swap"]["prompt_cache"]["saved"]
    assert saved["model"] == "a"
    assert saved["slots"] == 1
    assert saved["tokens"] >= prompt_tokens

    answer = ask(gw, "a", second(text(answer_first)))  # swaps back: restored, then sent
    restored = gw.running()["a"]["last_swap"]["prompt_cache"]["restored"]
    assert restored["slots"] == 1
    assert restored["tokens"] == saved["tokens"]
    # the backend's own count: the whole first turn came from the restored slot
    assert cached(answer) >= prompt_tokens
    assert text(answer) == text(reference)
    # the first answer proved the restore (the backend's own timings.cache_n / cached_tokens)
    gw.wait_for(lambda: gw.running()["a"]["prompt_cache"]["state"] != "unknown")  # recorded
    verdict = gw.running()["a"]["prompt_cache"]
    assert verdict["state"] == "works", verdict
    assert verdict["last"]["cached_tokens"] == cached(answer)
    assert gw.running()["a"]["last_swap"]["prompt_cache"]["proof"]["state"] == "works"
    rows = gw.get_json("/api/activity?model=a&limit=1")["data"]
    assert isinstance(rows, list)
    assert rows[0]["cached_tokens"] == cached(answer)  # the activity row shows it
