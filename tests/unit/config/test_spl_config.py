"""The Swap Policy Language in a configuration (issue 29): ``policies``, ``hooks.on_request``,
``models.*.filters.policy`` and ``peers.*.filters.policy`` compile at load, or the load fails
with the key and the line:column inside the program. Never ignored with a warning."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest

from modelswap.cli import main
from modelswap.config import Config, load_config_text
from modelswap.config.compat import explain
from modelswap.errors import ConfigError
from modelswap.policy import Request, run

SERVER = "cmd: srv --port ${PORT}"
SERVER_FLOW = "{cmd: 'srv --port ${PORT}'}"

PAGE = """\
policies:
  coding-defaults: |
    default temperature to 0.2
    set context.workload to "coding"

  authenticated: |
    deny 401 "API key required"
      when auth.key is missing

hooks:
  on_request: |
    deny 400 "messages is required"
      when messages is missing
    apply authenticated
      when request.model matches /^private-/
    apply coding-defaults
      when request.model matches /coder/

models:
  qwen-coder:
    cmd: llama-server --port ${PORT} -m qwen-coder.gguf
    filters:
      policy: |
        remove reasoning_effort
        default max_tokens to 4096
  plain:
    cmd: llama-server --port ${PORT}
    filters:
      policy: "   "

peers:
  remote:
    proxy: http://10.0.0.2:8080
    models: [m1]
    filters:
      policy: |
        set provider to {"zdr": true}
"""


def load(text: str) -> Config:
    return load_config_text(textwrap.dedent(text), environ={"SECRET": "s3"})


def problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load(text)
    return list(info.value.problems)


def test_the_pages_working_config_compiles(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = load(PAGE)
    assert caplog.records == []  # nothing of it is ignored with a warning
    policies = config.policies
    assert policies is not None
    assert sorted(policies.library) == ["authenticated", "coding-defaults"]
    assert policies.on_request is not None
    assert len(policies.on_request) == 3
    assert sorted(policies.models) == ["qwen-coder"]  # a blank policy is none
    assert sorted(policies.peers) == ["remote"]

    programs = policies.programs_for(model="qwen-coder")
    request = Request({"model": "qwen-coder", "messages": [], "reasoning_effort": "high"})
    request.model = "qwen-coder"
    for program in programs:
        assert run(program, policies.library, request) is None
    assert request.body == {
        "model": "qwen-coder",
        "messages": [],
        "temperature": 0.2,
        "max_tokens": 4096,
    }
    assert request.context == {"workload": "coding"}

    denied = Request({"messages": []}, model="private-x")
    [hook] = policies.programs_for(model="elsewhere")
    outcome = run(hook, policies.library, denied)
    assert outcome is not None
    assert (outcome.status, outcome.message) == (401, "API key required")


def test_without_spl_there_is_nothing_to_run() -> None:
    assert load(f"models:\n  m: {SERVER_FLOW}\n").policies is None
    assert load(f"models:\n  m:\n    {SERVER}\n    filters:\n      policy: ''\n").policies is None


def test_explain_reads_the_keys_as_the_same_ones() -> None:
    text = explain(load(PAGE).compat)
    assert "warnings" not in text
    for key in ("policies", "hooks.on_request", "models.*.filters.policy"):
        assert f"  {key}: the Swap Policy Language" in text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "policies:\n  p: |\n    remove a\n    set b 1\n",
            ("policies.p", "line 2:7: unexpected \"1\", expected 'to'"),
        ),
        (
            'hooks:\n  on_request: |\n    deny 200 "x"\n',
            (
                "hooks.on_request",
                "line 1:6: deny status must be an integer between 400 and 599",
            ),
        ),
        (
            "hooks:\n  on_request: 'remove a when b matches /(?<=x)y/'\n",
            ("hooks.on_request", "line 1:25: invalid regex: invalid perl operator: (?<"),
        ),
        (
            "hooks:\n  on_request: apply nowhere\n",
            ("hooks.on_request", 'line 1:7: apply references unknown policy "nowhere"'),
        ),
        (
            "policies:\n  a: apply b\n  b: |\n    # b\n    apply a\n",
            ("policies", "cycle detected: a -> b -> a"),
        ),
        (
            "policies:\n  a: apply a\n",
            ("policies", "cycle detected: a -> a"),
        ),
        (
            "policies:\n  bad name: set a to 1\n",
            ('policies["bad name"]', "invalid policy name 'bad name'"),
        ),
        (
            'policies:\n  p: set model to "other"\n',
            ("policies.p", 'line 1:5: cannot set protected parameter "model"'),
        ),
        (
            "policies:\n  p: 'set context.x to \"${nope}\"'\n",
            ("policies.p", "${nope} is not a known macro"),
        ),
        (
            "policies:\n  p: 'set context.x to \"${MODEL_ID}\"'\n",
            ("policies.p", "${MODEL_ID} is only available in a model's filters.policy"),
        ),
    ],
)
def test_top_level_faults_name_the_key_and_the_position(
    text: str, expected: tuple[str, str]
) -> None:
    found = problems(f"{text}models:\n  m: {SERVER_FLOW}\n")
    assert len(found) == 1, found
    assert found[0][0] == expected[0]
    assert found[0][1].startswith(expected[1]), found


def test_model_and_peer_faults_name_their_key() -> None:
    found = problems(
        f"""\
        models:
          m:
            {SERVER}
            filters:
              policy: |
                remove reasoning_effort
                remove body.model
            aliases: [fast]
            aliasFilters:
              fast:
                policy: remove x
        peers:
          far:
            proxy: http://10.0.0.2:8080
            models: [x]
            filters:
              policy: 'deny "x" when (a = 1'
        """
    )
    assert found == [
        (
            "models.m.filters.policy",
            'line 2:8: cannot remove protected parameter "model"',
        ),
        (
            "models.m.aliasFilters.fast.policy",
            "a policy belongs to the model (its filters.policy, which may test request.model), "
            "not to one of its names",
        ),
        ("peers.far.filters.policy", "line 1:21: unexpected end of program, expected ')'"),
    ]


def test_macros_expand_before_parsing() -> None:
    config = load(
        """\
        macros:
          temp: 0.3
        models:
          qwen:
            cmd: srv --port ${PORT}
            macros:
              effort: high
            filters:
              policy: |
                set context.model_id to "${MODEL_ID}"
                set context.port to "${PORT}"
                default temperature to ${temp}
                set reasoning_effort to "${effort}"  # ${effort} in a comment too
        hooks:
          on_request: 'set context.key to "${env.SECRET}"'
        """
    )
    assert config.policies is not None
    request = Request({})
    for program in config.policies.programs_for(model="qwen"):
        run(program, config.policies.library, request)
    port = config.models["qwen"].port
    assert request.context == {"key": "s3", "model_id": "qwen", "port": str(port)}
    assert request.body == {"temperature": 0.3, "reasoning_effort": "high"}
    assert "s3" in config.secrets  # read from the environment: masked like any secret
    found = problems(
        f"models:\n  m:\n    {SERVER}\n    filters:\n      policy: |\n"
        "        remove a  # ${undefined_macro}\n"
    )
    assert found == [
        ("models.m.filters.policy", "${undefined_macro} is not a known macro"),
    ]


def test_every_problem_is_reported_at_once() -> None:
    found = problems(
        f"""\
        policies:
          a: set a 1
          b: apply c
        hooks:
          on_request: deny
        models:
          m:
            {SERVER}
            filters:
              policy: set model.x to 1
        """
    )
    assert [path for path, _ in found] == [
        "policies.a",
        "policies.b",
        "hooks.on_request",
        "models.m.filters.policy",
    ]


def test_check_prints_the_key_and_position(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"models:\n  m:\n    {SERVER}\n    filters:\n      policy: |\n"
        "        default max_tokens to 4096\n        set temperature 0.2\n"
    )
    assert main(["check", str(config)]) == 2
    err = capsys.readouterr().err
    assert "models.m.filters.policy: line 2:17: unexpected \"0.2\", expected 'to'" in err, err
