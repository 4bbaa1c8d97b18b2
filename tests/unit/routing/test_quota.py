"""The per-key quota ledger (routing/quota.py): token buckets driven by a given clock, no
sleeps. Each test names the promise of docs/sharing.md it checks."""

from __future__ import annotations

import pytest

from modelswap.config.resolved import ApiKey, KeyDefaults, Quota
from modelswap.errors import RateLimitedError
from modelswap.routing.gate import ClientGate
from modelswap.routing.quota import QuotaLedger, duration_text, estimate_tokens, window_headers


def test_requests_per_minute_refuses_the_next_request_and_says_when_to_retry() -> None:
    ledger = QuotaLedger()
    quota = Quota(requests_per_minute=3)
    for _ in range(3):
        assert ledger.admit("alice", quota, 100.0).allowed
    refused = ledger.admit("alice", quota, 100.0)
    assert not refused.allowed
    assert refused.refusal is not None
    assert (refused.refusal.name, refused.refusal.limit) == ("requests", 3)
    assert refused.refusal.remaining == 0
    assert refused.retry_after == pytest.approx(20.0)  # one request refills in 60 / 3 s
    headers = refused.headers()
    assert headers["x-ratelimit-limit-requests"] == "3"
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-ratelimit-reset-requests"] == "1m0s"  # empty to full: 60 s
    assert headers["retry-after"] == "20"
    assert headers["retry-after-ms"] == "20000"
    # the bucket refills continuously: 20 s later, exactly one more
    assert ledger.admit("alice", quota, 120.0).allowed
    assert not ledger.admit("alice", quota, 120.0).allowed


def test_a_refused_request_takes_nothing_and_an_admitted_one_is_counted_once() -> None:
    ledger = QuotaLedger()
    quota = Quota(requests_per_minute=2)
    first = ledger.admit("alice", quota, 0.0)
    assert first.ticket is not None
    # However long it waits in the queue, finishing it never takes another request.
    ledger.finish(first.ticket, 50.0, tokens=10)
    ledger.finish(first.ticket, 51.0, tokens=10)  # a second finish is a no-op
    assert ledger.usage("alice") == (0, 1, 10)
    assert ledger.admit("alice", quota, 0.0).allowed
    for _ in range(5):
        assert not ledger.admit("alice", quota, 0.0).allowed
    assert ledger.usage("alice")[1] == 2


def test_concurrency_counts_requests_until_they_finish() -> None:
    ledger = QuotaLedger()
    quota = Quota(concurrency=2)
    a = ledger.admit("bob", quota, 0.0)
    b = ledger.admit("bob", quota, 0.0)
    refused = ledger.admit("bob", quota, 0.0)
    assert refused.refusal is not None
    assert refused.refusal.name == "concurrency"
    assert refused.retry_after > 0
    assert a.ticket is not None
    assert b.ticket is not None
    ledger.finish(a.ticket, 1.0, tokens=None, estimate=0)
    assert ledger.admit("bob", quota, 1.0).allowed
    assert ledger.admit("carol", quota, 1.0).allowed  # another key has its own places


def test_tokens_are_charged_at_the_end_and_a_debt_refuses_until_it_refills() -> None:
    ledger = QuotaLedger()
    quota = Quota(tokens_per_minute=600)  # 10 tokens a second
    verdict = ledger.admit("dan", quota, 0.0)
    assert verdict.ticket is not None
    assert dict(verdict.headers())["x-ratelimit-remaining-tokens"] == "600"
    ledger.finish(verdict.ticket, 0.0, tokens=900)  # usage: prompt + completion
    refused = ledger.admit("dan", quota, 0.0)
    assert refused.refusal is not None
    assert refused.refusal.name == "tokens"
    assert refused.retry_after == pytest.approx(30.1)  # 300 of debt + 1 token at 10/s
    assert ledger.admit("dan", quota, 30.2).allowed


def test_unknown_usage_charges_the_estimate() -> None:
    ledger = QuotaLedger()
    quota = Quota(tokens_per_day=1000)
    verdict = ledger.admit("erin", quota, 0.0)
    assert verdict.ticket is not None
    estimate = estimate_tokens(request_bytes=2000, answer_bytes=1000)
    assert estimate == 750
    ledger.finish(verdict.ticket, 0.0, tokens=None, estimate=estimate)
    (window,) = ledger.windows("erin", quota, 0.0)
    assert (window.name, window.limit, window.remaining) == ("tokens-day", 1000, 250)
    assert window.reset == pytest.approx(750 * 86.4)  # a rolling day refills 1000 per 86400 s


def test_no_quota_costs_no_account() -> None:
    ledger = QuotaLedger()
    for _ in range(1000):
        verdict = ledger.admit("free", Quota(), 0.0)
        assert verdict.allowed
        assert verdict.headers() == {}
    assert ledger.usage("free") == (0, 0, 0)


def test_a_reload_that_changes_a_quota_keeps_what_was_used() -> None:
    ledger = QuotaLedger()
    for _ in range(10):
        assert ledger.admit("f", Quota(requests_per_minute=10), 0.0).allowed
    assert not ledger.admit("f", Quota(requests_per_minute=100), 0.0).allowed  # still empty
    assert ledger.admit("f", Quota(requests_per_minute=100), 0.6).allowed  # 100/min refills


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.25, "250ms"), (7.5, "7.5s"), (60.0, "1m0s"), (90.0, "1m30s"), (3725.0, "1h2m5s")],
)
def test_reset_durations_are_written_as_openai_writes_them(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text


def test_the_gate_refuses_with_the_error_http_turns_into_a_429() -> None:
    clock = [0.0]
    gate = ClientGate(lambda: KeyDefaults(), clock=lambda: clock[0])
    key = ApiKey("alice", "sk-secret-0001", frozenset({"inference"}), quota=Quota(1, 0, 0, 0))
    admitted = gate.admit(key)
    assert admitted.client.name == "alice"
    assert admitted.headers()["x-ratelimit-remaining-concurrency"] == "0"
    with pytest.raises(RateLimitedError) as info:
        gate.admit(key)
    assert (info.value.limit, info.value.value) == ("concurrency", 1)
    assert info.value.headers["retry-after"] == "1"
    assert "sk-secret-0001" not in str(info.value)
    admitted.finish(tokens=0)
    gate.admit(key).finish(tokens=None, estimate=3)
    assert gate.ledger.usage("alice") == (0, 2, 3)


def test_a_refund_undoes_an_admission_and_a_key_without_quota_counts_nothing() -> None:
    # The fast door refunds a request it hands to aiohttp's path, which admits it again.
    defaults = KeyDefaults()
    gate = ClientGate(lambda: defaults, clock=lambda: 0.0)
    key = ApiKey("bob", "sk-secret-0002", frozenset({"inference"}), quota=Quota(1, 2, 0, 0))
    first = gate.admit(key)
    first.refund()
    first.refund()  # once
    first.finish(tokens=5)  # nor finished after
    assert gate.ledger.usage("bob") == (0, 0, 0)
    again = gate.admit(key)  # its place and its request are back
    assert again.headers()["x-ratelimit-remaining-requests"] == "1"
    assert again.raw_headers()[0] == (b"x-ratelimit-limit-concurrency", b"1")
    free = ApiKey("eve", "sk-secret-0003", frozenset({"inference"}))
    assert gate.admit(free) is gate.admit(free)  # one shared pass: nothing to count
    assert not gate.admit(free).limited
    assert gate.admit(free).headers() == {}
    assert gate.admit(free).raw_headers() == []


def test_the_anonymous_client_gets_key_defaults_at_the_gate() -> None:
    gate = ClientGate(lambda: KeyDefaults(Quota(requests_per_minute=1)), clock=lambda: 5.0)
    gate.admit(None)
    with pytest.raises(RateLimitedError) as info:
        gate.admit(None)
    assert info.value.client == "anonymous"
    assert gate.headers(None)["x-ratelimit-remaining-requests"] == "0"


@pytest.mark.parametrize("used", [0, 1, 7, 30])
def test_the_fast_headers_say_what_the_windows_say(used: int) -> None:
    # Every answer of a limited key builds its headers directly; they must match the windows.
    ledger = QuotaLedger()
    quota = Quota(concurrency=50, requests_per_minute=30, tokens_per_minute=5000, tokens_per_day=9)
    verdict = ledger.admit("g", quota, 0.0)
    for step in range(used):
        verdict = ledger.admit("g", quota, step * 0.5)
        if verdict.ticket is not None:
            ledger.finish(verdict.ticket, step * 0.5, tokens=200)
    expected = window_headers(verdict.windows)
    if verdict.refused_by is not None:
        expected["retry-after"] = verdict.headers()["retry-after"]
        expected["retry-after-ms"] = verdict.headers()["retry-after-ms"]
    assert verdict.headers() == expected
    # and the fast door's head lines are those headers, in the same order
    assert verdict.head_bytes() == b"".join(b"%b: %b\r\n" % p for p in verdict.raw_headers())


@pytest.mark.parametrize(
    "quota",
    [Quota(concurrency=2), Quota(requests_per_minute=3), Quota(0, 0, 100, 1000), Quota(4, 5, 0, 6)],
)
def test_the_fast_door_head_lines_carry_only_the_limits_a_quota_has(quota: Quota) -> None:
    ledger = QuotaLedger()
    first = ledger.admit("h", quota, 0.0)
    assert first.ticket is not None
    ledger.finish(first.ticket, 0.25, tokens=40)
    verdict = ledger.admit("h", quota, 0.5)
    assert verdict.head_bytes() == b"".join(b"%b: %b\r\n" % p for p in verdict.raw_headers())
    assert verdict.head_bytes().count(b"\r\n") == 3 * len(verdict.windows)


def test_standing_shows_each_key_against_its_limits_by_name_only() -> None:
    clock = [0.0]
    gate = ClientGate(lambda: KeyDefaults(), clock=lambda: clock[0])
    limited = ApiKey(
        "alice", "sk-secret-0002", frozenset({"inference"}), quota=Quota(2, 10, 1000, 0)
    )
    free = ApiKey("evals", "sk-secret-0003", frozenset({"inference"}), priority="batch")
    held = gate.admit(limited)
    gate.admit(limited).finish(tokens=400)
    alice, evals = gate.standing([limited, free])
    shown = alice.as_dict()
    assert (shown["key"], shown["in_flight"], shown["requests"], shown["tokens"]) == (
        "alice",
        1,
        2,
        400,
    )
    limits = {w["limit"]: (w["value"], w["remaining"]) for w in shown["limits"]}  # type: ignore[attr-defined]
    assert limits == {"concurrency": (2, 1), "requests": (10, 8), "tokens": (1000, 600)}
    assert (evals.as_dict()["limits"], evals.as_dict()["class"]) == ([], "batch")
    assert "sk-secret" not in repr(alice.as_dict()) + repr(evals.as_dict())
    held.finish(tokens=0)
    clock[0] = 60.0  # a minute on: the buckets are full again
    (again,) = gate.standing([limited])
    assert {w.name: w.remaining for w in again.windows} == {
        "concurrency": 2,
        "requests": 10,
        "tokens": 1000,
    }
