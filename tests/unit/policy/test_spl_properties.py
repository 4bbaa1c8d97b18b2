"""Properties of the Swap Policy Language (issue 29), with hypothesis: programs built from the
grammar parse, whitespace, comments and continued lines never change what they mean, any text
either parses or fails with a located PolicyError, and the operators and actions keep their
laws on arbitrary JSON bodies."""

from __future__ import annotations

import contextlib
import copy
import itertools
import json
import time
from typing import Any

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tests.property import examples

from modelswap.policy import ABSENT, PolicyError, PolicyRuntimeError, Request, parse, read, run
from modelswap.policy.nodes import (
    AllOf,
    AnyOf,
    Clause,
    Compare,
    Condition,
    In,
    Matches,
    Not,
    Presence,
    Program,
)

RESERVED = {
    "default", "set", "remove", "apply", "deny", "to", "when", "and", "or", "not", "is",
    "present", "missing", "in", "matches", "true", "false", "null", "body", "context", "auth",
    "request", "model",
}  # fmt: skip
SETTINGS = settings(
    max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)

# -- programs, as token lists ----------------------------------------------------------------

idents = st.from_regex(r"[a-z_][a-z0-9_-]{0,6}", fullmatch=True).filter(lambda s: s not in RESERVED)
numbers = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.from_regex(r"-?[0-9]{1,4}\.[0-9]{1,4}([eE][+-]?[0-9]{1,2})?", fullmatch=True),
)
strings = st.text(max_size=8).map(lambda s: json.dumps(s, ensure_ascii=False))
scalars = st.one_of(numbers, strings, st.sampled_from(["true", "false", "null"]))
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def body_path(draw: st.DrawFn) -> list[str]:
    tokens = [draw(idents)]
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            tokens += [".", draw(idents)]
        else:
            tokens += ["[", str(draw(st.integers(-4, 4))), "]"]
    return (["body", "."] if draw(st.booleans()) else []) + tokens


@st.composite
def write_path(draw: st.DrawFn) -> list[str]:
    if draw(st.integers(0, 4)) == 0:
        return ["context", ".", draw(idents)]
    return draw(body_path())


@st.composite
def read_path(draw: st.DrawFn) -> list[str]:
    choice = draw(st.integers(0, 7))
    if choice == 0:
        return ["auth", ".", "key"]
    if choice == 1:
        return ["request", ".", draw(st.sampled_from(["model", "path", "method"]))]
    if choice == 2:
        return ["request", ".", "header", ".", draw(idents)]
    return draw(write_path())


@st.composite
def values(draw: st.DrawFn, depth: int = 2) -> list[str]:
    kind = draw(st.integers(0, 5 if depth else 3))
    if kind == 4:
        items = [draw(values(depth - 1)) for _ in range(draw(st.integers(0, 3)))]
        out = ["["]
        for index, item in enumerate(items):
            out += ([","] if index else []) + item
        return [*out, "]"]
    if kind == 5:
        obj = draw(st.dictionaries(st.text(max_size=4), json_values, max_size=3))
        return [json.dumps(obj, ensure_ascii=False, indent=draw(st.sampled_from([None, 1])))]
    return [draw(scalars)]


@st.composite
def conditions(draw: st.DrawFn, depth: int = 3) -> list[str]:
    kind = draw(st.integers(0, 8 if depth else 4))
    path = draw(read_path())
    if kind == 0:
        return [
            *path,
            draw(st.sampled_from(["=", "==", "!=", "<", "<=", ">", ">="])),
            draw(scalars),
        ]
    if kind == 1:
        return [*path, "matches", draw(st.sampled_from(["/^a/", "/(?i)x+/", "/\\/v1\\//", "/./"]))]
    if kind == 2:
        return [*path, "is", draw(st.sampled_from(["present", "missing"]))]
    if kind in (3, 4):
        items = [draw(scalars) for _ in range(draw(st.integers(0, 3)))]
        out = [*path, "in", "["]
        for index, item in enumerate(items):
            out += ([","] if index else []) + [item]
        return [*out, "]"]
    if kind == 5:
        return ["not", *draw(conditions(depth - 1))]
    if kind == 6:
        return ["(", *draw(conditions(depth - 1)), ")"]
    word = "and" if kind == 7 else "or"
    return [*draw(conditions(depth - 1)), word, *draw(conditions(depth - 1))]


@st.composite
def clauses(draw: st.DrawFn) -> list[str]:
    kind = draw(st.integers(0, 4))
    if kind in (0, 1):
        tokens = [("default", "set")[kind], *draw(write_path()), "to", *draw(values())]
    elif kind == 2:
        tokens = ["remove", *draw(write_path())]
    elif kind == 3:
        tokens = ["apply", draw(idents)]
    else:
        status = draw(st.one_of(st.just([]), st.integers(400, 599).map(lambda n: [str(n)])))
        tokens = ["deny", *status, draw(strings)]
    if draw(st.booleans()):
        tokens += ["when", *draw(conditions())]
    return tokens


programs = st.lists(clauses(), max_size=5)


def plain(program: list[list[str]]) -> str:
    return "\n".join(" ".join(tokens) for tokens in program)


@st.composite
def noisy(draw: st.DrawFn, program: list[list[str]]) -> str:
    """The same program with other whitespace: tabs and runs of spaces between tokens, blank
    and comment lines between clauses, a continued line before when/and/or, and newlines
    inside brackets and parentheses."""
    lines: list[str] = []
    for tokens in program:
        for _ in range(draw(st.integers(0, 1))):
            lines.append(draw(st.sampled_from(["", "   ", "# a comment", "\t# another"])))
        out, depth = tokens[0], 0
        for previous, token in itertools.pairwise(tokens):
            depth += previous in ("(", "[")
            depth -= previous in (")", "]") and depth > 0
            may_break = depth > 0 or token in ("when", "and", "or")
            if may_break and draw(st.booleans()):
                comment = draw(st.sampled_from(["", "  # why"]))
                out += comment + "\n" + draw(st.sampled_from(["  ", "\t", "    "]))
            else:
                out += draw(st.sampled_from([" ", "  ", "\t", " \t "]))
            out += token
        lines.append(out + draw(st.sampled_from(["", "  # trailing", " "])))
    return draw(st.sampled_from(["", "\n", "# head\n"])) + "\n".join(lines) + "\n"


# -- a canonical rendering of what was parsed ------------------------------------------------


def render(program: Program) -> str:
    return "\n".join(_clause(clause) for clause in program.clauses)


def _clause(clause: Clause) -> str:
    word = clause.action.value
    if clause.path is not None and clause.value is not None:
        text = f"{word} {clause.path.text} to {clause.value.raw}"
    elif clause.path is not None:
        text = f"{word} {clause.path.text}"
    elif word == "apply":
        text = f"apply {clause.policy}"
    else:
        text = f"deny {clause.status} {json.dumps(clause.message, ensure_ascii=False)}"
    return text if clause.when is None else f"{text} when {_cond(clause.when)}"


def _cond(cond: Condition) -> str:
    if isinstance(cond, AnyOf):
        return " or ".join(_cond(item) for item in cond.items)
    if isinstance(cond, AllOf):
        return " and ".join(_grouped(item) for item in cond.items)
    if isinstance(cond, Not):
        return "not " + _grouped(cond.inner, also=(AllOf,))
    if isinstance(cond, Compare):
        return f"{cond.path.text} {cond.op.value} {cond.value.raw}"
    if isinstance(cond, Matches):
        return f"{cond.path.text} matches /{cond.regex.pattern.replace('/', chr(92) + '/')}/"
    if isinstance(cond, Presence):
        return f"{cond.path.text} is {'present' if cond.present else 'missing'}"
    assert isinstance(cond, In)
    return f"{cond.path.text} in [{', '.join(v.raw for v in cond.values)}]"


def _grouped(cond: Condition, also: tuple[type, ...] = ()) -> str:
    return f"({_cond(cond)})" if isinstance(cond, (AnyOf, *also)) else _cond(cond)


@SETTINGS
@given(programs)
def test_a_program_from_the_grammar_parses_and_its_rendering_is_a_fixed_point(
    program: list[list[str]],
) -> None:
    parsed = parse(plain(program))
    assert len(parsed) == len(program)
    canonical = render(parsed)
    assert render(parse(canonical)) == canonical


@SETTINGS
@given(st.data(), programs)
def test_whitespace_comments_and_continued_lines_change_nothing(
    data: st.DataObject, program: list[list[str]]
) -> None:
    assert render(parse(data.draw(noisy(program)))) == render(parse(plain(program)))


@SETTINGS
@given(st.data(), programs)
def test_any_text_parses_or_fails_with_its_position(
    data: st.DataObject, program: list[list[str]]
) -> None:
    source = plain(program)
    edits = data.draw(
        st.lists(st.tuples(st.integers(0, max(0, len(source))), st.text(max_size=3)), max_size=3)
    )
    for at, text in edits:  # insert, and drop what follows: arbitrary breakage
        source = source[:at] + text + source[at + len(text) :]
    error = _error_of(source)
    if error is not None:
        lines = source.replace("\r\n", "\n").split("\n")
        assert 1 <= error.line <= len(lines)
        assert 1 <= error.col <= len(lines[error.line - 1]) + 1
        assert str(error).startswith(f"line {error.line}:{error.col}: ")


def _error_of(source: str) -> PolicyError | None:
    try:
        parse(source)
    except PolicyError as error:
        return error
    return None


@SETTINGS
@given(st.text(alphabet="abz09 .[]()-=!<>/\"'{}\\,#\n\twhenandornotisinmatches", max_size=60))
def test_arbitrary_text_never_raises_anything_else(source: str) -> None:
    with contextlib.suppress(PolicyError):
        parse(source)


# -- the laws of conditions and actions on arbitrary bodies ----------------------------------

bodies = st.dictionaries(st.sampled_from(["a", "b", "messages", "o"]), json_values, max_size=4).map(
    lambda d: {**d, "model": "m"}
)
heads = st.sampled_from(["a", "b", "o", "messages"])
steps = st.one_of(
    st.sampled_from(["a", "b", "o", "messages", "x"]).map(lambda k: "." + k),
    st.integers(-3, 3).map(lambda i: f"[{i}]"),
)
simple_paths = st.tuples(heads, st.lists(steps, max_size=3)).map(lambda p: p[0] + "".join(p[1]))


def _holds(condition: str, body: dict[str, Any]) -> bool:
    request = Request(copy.deepcopy(body))
    run(parse(f"set hit_ to true when {condition}"), {}, request)
    return request.body.get("hit_") is True


@SETTINGS
@given(bodies, simple_paths, scalars, scalars)
def test_not_equal_is_exactly_not_equal_and_in_is_any_equal(
    body: dict[str, Any], path: str, first: str, second: str
) -> None:
    equal = _holds(f"{path} = {first}", body)
    assert _holds(f"{path} != {first}", body) is not equal
    assert _holds(f"not {path} = {first}", body) is not equal
    either = _holds(f"{path} = {first} or {path} = {second}", body)
    assert _holds(f"{path} in [{first}, {second}]", body) is either
    present = _holds(f"{path} is present", body)
    assert _holds(f"{path} is missing", body) is not present
    if not present:  # absent: equal to nothing, ordered against nothing
        assert not equal
        assert not any(_holds(f"{path} {op} {first}", body) for op in ("<", "<=", ">", ">="))


@SETTINGS
@given(bodies, simple_paths, values(1))
def test_default_set_and_remove_keep_their_laws(
    body: dict[str, Any], path: str, value: list[str]
) -> None:
    literal = " ".join(value)
    [clause] = parse(f"remove {path}").clauses
    assert clause.path is not None
    before = read(clause.path, Request(body))

    request = Request(copy.deepcopy(body))
    try:
        run(parse(f"default {path} to {literal}"), {}, request)
    except PolicyRuntimeError:
        assume(False)  # a key into an array: refused, as llama-swap's library does
    if before is not ABSENT:  # default never overwrites what is there, even null
        assert request.body == body
        assert not request.changed

    request = Request(copy.deepcopy(body))
    try:
        run(parse(f"set {path} to {literal}"), {}, request)
    except PolicyRuntimeError:
        assume(False)  # a key into an array: refused, as llama-swap's library does
    if not clause.path.negative:
        assert read(clause.path, request) == json.loads(json.dumps(_value_of(literal)))

    request = Request(copy.deepcopy(body))
    run(parse(f"remove {path}"), {}, request)
    assert request.changed is (before is not ABSENT)
    if clause.path.segments[-1].key is not None:  # (an array's next item moves up)
        assert read(clause.path, request) is ABSENT


def _value_of(literal: str) -> object:
    [clause] = parse(f"set v to {literal}").clauses
    assert clause.value is not None
    return clause.value.value


@SETTINGS
@given(bodies, st.lists(clauses(), max_size=4))
def test_a_run_never_changes_the_callers_nested_values(
    body: dict[str, Any], program: list[list[str]]
) -> None:
    source = plain(program)
    try:
        parsed = parse(source)
    except PolicyError:
        assume(False)
    original = copy.deepcopy(body)
    shallow = dict(body)
    library = {name: parse("set lib_ to 1") for name in parsed.applies}
    with contextlib.suppress(PolicyRuntimeError):
        run(parsed, library, Request(shallow, api_key="k", model="m", path="/v1/x"))
    assert body == original  # only the top-level copy may change


@SETTINGS
@given(bodies)
def test_nothing_matching_changes_nothing(body: dict[str, Any]) -> None:
    source = (
        'set a to 1 when model = "never"\nremove messages when auth.key is present\n'
        'deny "no" when request.path matches /^\\/nowhere/\ndefault o to {} when x = 1 and b = 2'
    )
    request = Request(copy.deepcopy(body), path="/v1/chat/completions")
    assert run(parse(source), {}, request) is None
    assert request.body == body
    assert not request.changed


def test_a_request_no_condition_matches_costs_next_to_nothing() -> None:
    program = parse(
        "\n".join(
            [
                'deny 401 "API key required" when auth.key is missing '
                "and request.model matches /^private-/",
                'set context.workload to "coding" when request.model matches /coder/',
                "remove reasoning_effort when reasoning_effort is present",
                'deny 400 "too many" when max_tokens > 100000',
                'set temperature to 0.2 when messages[-1].role = "tool"',
            ]
            * 4
        )
    )
    body = {
        "model": "qwen",
        "messages": [{"role": "user", "content": "x" * 100_000}] * 20,
        "max_tokens": 10,
    }
    request = Request(dict(body), api_key="k", model="qwen", path="/v1/chat/completions")
    began = time.perf_counter()
    for _ in range(2000):
        request.context.clear()
        assert run(program, {}, request) is None
    per_request = (time.perf_counter() - began) / 2000
    assert not request.changed
    assert per_request < 0.001, per_request  # typically ~20 µs for these 20 clauses
