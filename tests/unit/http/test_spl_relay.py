"""The Swap Policy Language on the way to a backend (issue 29): ``prepare_body`` runs the
filters, then ``hooks.on_request``, then the target's own policy; a deny raises before any
start; a body nothing changed goes out as the client's very bytes; each target (a fallback)
starts again from the client's body."""

from __future__ import annotations

import json

import pytest
from multidict import CIMultiDict

from modelswap.config import load_config_text
from modelswap.errors import PolicyDeniedError, PolicyFailedError
from modelswap.http.error_responses import response_for
from modelswap.http.relay.dispatch import prepare_body
from modelswap.http.relay.extract import parse_request
from modelswap.http.relay.spl import PolicyRun
from modelswap.policy import PolicySet
from modelswap.routing.peer_directory import PeerRoute
from modelswap.runtime import LocalTarget

CONFIG = """\
hooks:
  on_request: |
    deny 429 "slow down" when slow = true
    set context.hook to "ran"
models:
  qwen:
    cmd: srv --port ${PORT}
    useModelName: upstream-qwen
    filters:
      stripParams: [top_k]
      policy: |
        default top_k to 40
        set context.renamed to "yes" when model = "upstream-qwen"
        set messages[-1].content to "x" when messages[-1].content = "secret"
        set tools.name to 1 when broken = true
  other:
    cmd: srv --port ${PORT}
peers:
  far:
    proxy: http://10.0.0.9:8080
    models: [remote]
    filters:
      policy: 'set provider to {"zdr": true}'
"""


Setup = tuple[LocalTarget, LocalTarget, PeerRoute, PolicySet]


@pytest.fixture(scope="module")
def setup() -> Setup:
    config = load_config_text(CONFIG, environ={})
    assert config.policies is not None
    qwen = LocalTarget(config.models["qwen"], "qwen")
    other = LocalTarget(config.models["other"], "other")
    far = PeerRoute(config.peers["far"], "remote")
    return qwen, other, far, config.policies


def run_for(policies: PolicySet, model: str = "qwen") -> PolicyRun:
    return PolicyRun(policies, None, model, "/v1/chat/completions", "POST", CIMultiDict())


def body(**fields: object) -> bytes:
    return json.dumps({"model": "qwen", **fields}).encode()


def test_order_filters_rename_hook_then_the_models_own(setup: Setup) -> None:
    qwen, _, _, policies = setup
    policy = run_for(policies)
    sent = parse_request("application/json", body(top_k=1, messages=[{"content": "secret"}]))
    payload, data = prepare_body(qwen, sent, policy)
    assert (
        json.loads(payload)
        == data
        == {
            "model": "upstream-qwen",  # useModelName came first: the policy sees it
            "messages": [{"content": "x"}],
            "top_k": 40,  # stripped by the filter, then the policy's default
        }
    )
    assert policy.context == {"hook": "ran", "renamed": "yes"}
    assert sent.data == {"model": "qwen", "top_k": 1, "messages": [{"content": "secret"}]}


def test_an_unchanged_body_is_the_clients_very_bytes(setup: Setup) -> None:
    _, other, _, policies = setup
    raw = b'{ "model" : "other",  "n": 1 }'
    sent = parse_request("application/json", raw)
    policy = run_for(policies, "other")
    payload, data = prepare_body(other, sent, policy)
    assert payload is raw
    assert data is sent.data
    assert policy.context == {"hook": "ran"}  # the hook ran; it wrote only context


def test_a_peer_gets_the_hook_and_its_own_policy(setup: Setup) -> None:
    _, _, far, policies = setup
    policy = run_for(policies, "remote")
    payload, _ = prepare_body(far, parse_request("application/json", body()), policy)
    assert json.loads(payload) == {"model": "remote", "provider": {"zdr": True}}


def test_each_attempt_starts_from_the_clients_body(setup: Setup) -> None:
    qwen, other, _, policies = setup
    sent = parse_request("application/json", body(messages=[{"content": "secret"}]))
    policy = run_for(policies)
    prepare_body(qwen, sent, policy)
    payload, _ = prepare_body(other, sent, policy)  # a fallback: other's (no) policy
    assert json.loads(payload)["messages"] == [{"content": "secret"}]
    assert policy.context == {"hook": "ran"}  # what this attempt wrote


def test_deny_and_a_failed_rewrite_are_errors_with_their_status(setup: Setup) -> None:
    qwen, _, _, policies = setup
    with pytest.raises(PolicyDeniedError) as denied:
        prepare_body(qwen, parse_request("application/json", body(slow=True)), run_for(policies))
    response = response_for(denied.value)
    assert response.status == 429
    assert isinstance(response.body, bytes)
    assert json.loads(response.body)["error"] == {
        "message": "slow down",
        "type": "rate_limit_error",
        "code": "policy_denied",
        "param": None,
        # where the deny is written (issue 41): the program, its line, the clause as it ran
        "policy": {
            "program": "hooks.on_request",
            "line": 1,
            "rule": 'deny 429 "slow down" when slow = true',
        },
    }
    broken = body(broken=True, tools=[1])
    with pytest.raises(PolicyFailedError) as failed:
        prepare_body(qwen, parse_request("application/json", broken), run_for(policies))
    assert response_for(failed.value).status == 500
    assert str(failed.value).startswith("policy error: set tools.name: cannot set array element")


def test_a_status_without_a_named_type_still_gets_one() -> None:
    response = response_for(PolicyDeniedError(418, "teapot"))
    assert isinstance(response.body, bytes)
    assert json.loads(response.body)["error"]["type"] == "invalid_request_error"
    response = response_for(PolicyDeniedError(599, "odd"))
    assert isinstance(response.body, bytes)
    assert json.loads(response.body)["error"]["type"] == "server_error"
