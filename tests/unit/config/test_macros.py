from __future__ import annotations

import pytest

from modelswap.config.macros import (
    MAX_DEPTH,
    MacroSyntaxError,
    Ref,
    Scope,
    clean_command,
    did_you_mean,
    expand,
    name_problem,
    parse,
    references,
    transitive_references,
)


def scope(
    macros: dict[str, str] | None = None,
    *,
    environ: dict[str, str] | None = None,
    keep: frozenset[str] = frozenset(),
    unavailable: dict[str, str] | None = None,
) -> Scope:
    return Scope(
        builtins={"PORT": "5800", "MODEL_ID": "qwen"},
        macros=macros or {},
        environ=environ or {},
        keep=keep,
        unavailable=unavailable or {},
    )


def test_parse_splits_literals_and_references() -> None:
    assert parse("a ${X} b${env.Y}") == ["a ", Ref("X"), " b", Ref("env.Y")]


def test_parse_escape_produces_literal_dollar_brace() -> None:
    assert parse("echo $${HOME}") == ["echo ", "${", "HOME}"]


def test_parse_unterminated_reference_raises() -> None:
    with pytest.raises(MacroSyntaxError, match="unterminated"):
        parse("--port ${PORT")


def test_references_lists_direct_names_once_and_skips_escapes() -> None:
    assert references("${A} ${B} ${A} $${C}") == ["A", "B"]


def test_transitive_references_follow_macro_values_and_tolerate_cycles() -> None:
    macros = {"common": "--port ${PORT} ${more}", "more": "${common}"}
    assert transitive_references(["srv ${common}"], macros) == {"common", "PORT", "more"}


def test_expand_builtins_and_nested_macros() -> None:
    text, problems = expand("srv ${args} -a ${MODEL_ID}", scope({"args": "--port ${PORT}"}))
    assert problems == []
    assert text == "srv --port 5800 -a qwen"


def test_expand_unknown_macro_suggests_closest_name() -> None:
    _, problems = expand("--port ${PORTT}", scope())
    assert problems == ["${PORTT} is not a known macro (did you mean ${PORT}?)"]


def test_expand_unknown_macro_inside_macro_names_the_macro() -> None:
    _, problems = expand("${args}", scope({"args": "${nope}"}))
    assert problems == ["in macro ${args}: ${nope} is not a known macro"]


def test_expand_env_reads_environ() -> None:
    text, problems = expand("${env.TOKEN}", scope(environ={"TOKEN": "s3cret"}))
    assert (text, problems) == ("s3cret", [])


def test_expand_missing_env_var_is_reported() -> None:
    _, problems = expand("${env.HF_TOKEN}", scope())
    assert problems == ["${env.HF_TOKEN}: environment variable HF_TOKEN is not set"]


def test_expand_cycle_names_the_cycle() -> None:
    _, problems = expand("${a}", scope({"a": "x ${b}", "b": "y ${a}"}))
    assert problems == ["macro cycle: ${a} -> ${b} -> ${a}"]


def test_expand_depth_is_capped() -> None:
    chain = {f"m{i}": f"${{m{i + 1}}}" for i in range(MAX_DEPTH + 5)}
    chain[f"m{MAX_DEPTH + 5}"] = "end"
    _, problems = expand("${m0}", scope(chain))
    assert len(problems) == 1
    assert f"nested deeper than {MAX_DEPTH} levels" in problems[0]


def test_expand_keep_emits_reference_verbatim() -> None:
    text, problems = expand("kill ${PID}", scope(keep=frozenset({"PID"})))
    assert (text, problems) == ("kill ${PID}", [])


def test_expand_unavailable_name_reports_reason() -> None:
    _, problems = expand("${PID}", scope(unavailable={"PID": "is only available in cmdStop"}))
    assert problems == ["${PID} is only available in cmdStop"]


def test_expand_escape_in_macro_value_is_not_rescanned() -> None:
    text, problems = expand("${script}", scope({"script": "echo $${HOME}"}))
    assert (text, problems) == ("echo ${HOME}", [])


def test_expand_reports_each_problem_once() -> None:
    _, problems = expand("${nope} ${nope} ${env.X}", scope())
    assert problems == [
        "${nope} is not a known macro",
        "${env.X}: environment variable X is not set",
    ]


@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("PORT", "built in"),
        ("MODEL_ID", "built in"),
        ("PID", "built in"),
        ("env.HOME", "may not start with 'env.'"),
        ("9lives", "not a valid macro name"),
        ("has space", "not a valid macro name"),
    ],
)
def test_name_problem_rejects_reserved_and_malformed_names(name: str, fragment: str) -> None:
    problem = name_problem(name)
    assert problem is not None
    assert fragment in problem


def test_name_problem_accepts_dots_and_dashes() -> None:
    assert name_problem("llama-server.bin_2") is None


def test_clean_command_drops_comment_lines_and_joins_continuations() -> None:
    text = "srv \\\n  # --flag-off \\\n  --port 1 \\  \n  -v"
    assert clean_command(text).split() == ["srv", "--port", "1", "-v"]


def test_did_you_mean_prefers_case_and_underscore_insensitive_match() -> None:
    assert did_you_mean("cmd_stop", ["cmd", "cmdStop", "proxy"]) == "cmdStop"
    assert did_you_mean("zzz", ["cmd", "proxy"]) is None
