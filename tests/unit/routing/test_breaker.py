"""The peer circuit breaker and the parser of a peer's model list: pure, the time is passed in."""

from __future__ import annotations

import json

import pytest

from modelswap.routing.breaker import CircuitBreaker
from modelswap.routing.peer_directory import parse_model_list


def test_opens_after_consecutive_failures_only() -> None:
    breaker = CircuitBreaker(failures=3, cooldown=10)
    for now in (0.0, 1.0):
        assert breaker.admit(now)
        breaker.failure(now)
    breaker.success()  # a success in between resets the count
    for now in (2.0, 3.0, 4.0):
        assert breaker.admit(now)
        breaker.failure(now)
    assert breaker.state == "open"
    assert not breaker.admit(5.0)
    assert breaker.retry_in(5.0) == pytest.approx(9.0)


def test_half_open_lets_one_probe_through_and_its_verdict_decides() -> None:
    breaker = CircuitBreaker(failures=1, cooldown=10)
    breaker.failure(0.0)
    assert not breaker.admit(9.9)
    assert breaker.admit(10.0)  # the probe
    assert breaker.state == "half_open"
    assert not breaker.admit(10.1)  # others fail fast while it is out
    breaker.failure(11.0)  # the probe failed: open for another cooldown
    assert breaker.state == "open"
    assert not breaker.admit(20.9)
    assert breaker.admit(21.0)
    breaker.success()
    assert breaker.state == "closed"
    assert breaker.admit(21.1)
    assert breaker.admit(21.2)


def test_an_abandoned_probe_gives_its_slot_back() -> None:
    breaker = CircuitBreaker(failures=1, cooldown=1)
    breaker.failure(0.0)
    assert breaker.admit(1.0)
    breaker.abandon()  # the client left before the peer answered
    assert breaker.admit(1.1)


def test_model_list_keeps_ids_and_skips_rows_of_the_peers_own_peers() -> None:
    body = {
        "data": [
            {"id": "a"},
            {"id": "b", "owned_by": "vllm"},
            {"id": "x/y", "peer": "x"},
            {"id": ""},
            {"id": 7},
            "junk",
            {"id": "a"},
        ]
    }
    assert parse_model_list(json.dumps(body).encode()) == ("a", "b")
    with pytest.raises(ValueError, match="no `data` list"):
        parse_model_list(b'{"object": "list"}')
    with pytest.raises(json.JSONDecodeError):
        parse_model_list(b"not json")
