"""Issue 41: a ``deny`` says where it is written — the program's name (its config key), the
clause's line in that program's text, the rule as it ran (macros expanded), and the
``apply`` clauses that led to it — and the error's JSON carries it as ``error.policy`` in both
envelopes, without changing the error's shape."""

from __future__ import annotations

import json

from modelswap.config.load import load_config_text
from modelswap.errors import PolicyDeniedError
from modelswap.http.error_responses import anthropic_envelope, explained, response_for
from modelswap.policy import Denial, Request, parse, run
from modelswap.redact import Redactor

CONFIG = """\
macros:
  FORBIDDEN: "sk-secret-word"
policies:
  strict: |
    # a comment line
    deny 401 "API key required"
      when auth.key is missing
hooks:
  on_request: |
    set context.workload to "coding" when request.model matches /coder/
    deny 400 "messages is required" when messages is missing
      and request.path in ["/v1/chat/completions", "/v1/messages"]
    apply strict when request.model matches /^private-/
    deny 403 "forbidden word" when messages[0].content = "${FORBIDDEN}"
models:
  qwen:
    cmd: llama-server --port ${PORT}
"""


def denial(path: str, body: dict[str, object], key: str | None = "sk-x") -> Denial | None:
    policies = load_config_text(CONFIG).policies
    assert policies is not None
    assert policies.on_request is not None
    request = Request(dict(body), api_key=key, model=str(body.get("model", "")), path=path)
    return run(policies.on_request, policies.library, request)


def test_a_deny_in_the_hook_names_its_program_line_and_rule_over_two_lines() -> None:
    denied = denial("/v1/chat/completions", {"model": "qwen"})
    assert denied == Denial(400, "messages is required")
    assert denied is not None
    assert denied.provenance() == {
        "program": "hooks.on_request",
        "line": 2,
        "rule": 'deny 400 "messages is required" when messages is missing\n'
        'and request.path in ["/v1/chat/completions", "/v1/messages"]',
    }


def test_a_deny_in_an_applied_policy_names_that_policy_and_the_apply_that_led_there() -> None:
    denied = denial("/v1/embeddings", {"model": "private-x", "input": "a"}, key=None)
    assert denied is not None
    assert denied.provenance() == {
        "program": "policies.strict",
        "line": 2,  # the comment is line 1 of the policy's own text
        "rule": 'deny 401 "API key required"\nwhen auth.key is missing',
        "applied_by": ["hooks.on_request line 4"],
    }


def test_the_rule_is_quoted_as_it_ran_and_the_answer_masks_a_secret_in_it() -> None:
    body = {"model": "qwen", "messages": [{"content": "sk-secret-word"}]}
    denied = denial("/v1/chat/completions", body)
    assert denied is not None
    assert (denied.status, denied.line) == (403, 5)
    assert denied.rule == 'deny 403 "forbidden word" when messages[0].content = "sk-secret-word"'
    redactor = Redactor(["sk-secret-word"])
    error = PolicyDeniedError(denied.status, denied.message, denied.provenance())
    response = response_for(error, redactor)
    assert isinstance(response.body, bytes)
    assert b"sk-secret-word" not in response.body
    assert json.loads(response.body)["error"]["policy"]["line"] == 5


def test_a_program_parsed_without_a_name_still_gives_line_and_rule() -> None:
    program = parse('remove x\ndeny 418 "no tea" when tea is present')
    denied = run(program, {}, Request({"tea": 1}))
    assert denied is not None
    assert denied.provenance() == {"program": "", "line": 2, "rule": program.lines[1]}


def test_the_error_json_carries_the_policy_in_both_envelopes() -> None:
    where = {"program": "hooks.on_request", "line": 2, "rule": 'deny 400 "m"'}
    response = response_for(PolicyDeniedError(400, "messages is required", where))
    assert response.status == 400
    assert isinstance(response.body, bytes)
    openai = json.loads(response.body)
    assert openai["error"] == {
        "message": "messages is required",
        "type": "invalid_request_error",
        "code": "policy_denied",
        "param": None,
        "policy": where,
    }
    anthropic = anthropic_envelope(openai, 400)
    assert anthropic["error"]["details"] == {"error_code": "policy_denied", "policy": where}  # type: ignore[index]
    for data in (openai, anthropic):
        why = explained(data)
        assert why is not None
        assert (why.code, why.message) == ("policy_denied", "messages is required")
        assert why.rule == {"kind": "policy", **where}


def test_a_denial_without_provenance_keeps_the_old_shape() -> None:
    response = response_for(PolicyDeniedError(403, "no"))
    assert isinstance(response.body, bytes)
    assert "policy" not in json.loads(response.body)["error"]
    why = explained(json.loads(response.body))
    assert why is not None
    assert (why.code, why.message, why.rule) == ("policy_denied", "no", None)
