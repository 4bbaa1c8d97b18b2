"""What a request of a limited key is charged at its end (http/tracking/client_gate.py): the
backend's usage, else the estimate, nothing when no backend answered; its place back always."""

from __future__ import annotations

from modelswap.config.resolved import ApiKey, KeyDefaults, Quota
from modelswap.http.request_obs import RequestObs
from modelswap.http.tracking.client_gate import charge
from modelswap.observe.usage import UsageTracker
from modelswap.routing.gate import ClientGate

DEFAULTS = KeyDefaults()
KEY = ApiKey("ana", "sk-charge-0001", frozenset({"inference"}), quota=Quota(2, 0, 1000, 0))


def charged(obs: RequestObs | None, request_bytes: int = 40) -> tuple[int, int, int]:
    gate = ClientGate(lambda: DEFAULTS, clock=lambda: 0.0)
    admitted = gate.admit(KEY)
    charge(admitted, obs, request_bytes)
    charge(admitted, obs, request_bytes)  # once: a second end charges nothing more
    return gate.ledger.usage("ana")


def answered(prompt: int | None, completion: int | None, bytes_out: int = 80) -> RequestObs:
    obs = RequestObs()
    obs.first_byte()
    obs.bytes_out = bytes_out
    obs.usage = UsageTracker(streamed=False)
    obs.usage.prompt_tokens, obs.usage.completion_tokens = prompt, completion
    return obs


def test_the_backends_usage_is_charged() -> None:
    assert charged(answered(12, 30)) == (0, 1, 42)
    assert charged(answered(None, 7)) == (0, 1, 7)


def test_without_usage_the_estimate_is_charged() -> None:
    assert charged(answered(None, None, bytes_out=80)) == (0, 1, 30)  # (40 + 80) / 4


def test_a_request_no_backend_answered_is_charged_nothing() -> None:
    assert charged(RequestObs()) == (0, 1, 0)  # refused, failed to start, client gone early


def test_unobserved_the_requests_size_is_charged() -> None:
    assert charged(None, request_bytes=41) == (0, 1, 11)
