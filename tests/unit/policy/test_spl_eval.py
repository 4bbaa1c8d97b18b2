"""Running programs (issue 29): each action and condition, paths with negative indexes, the
request namespaces, deny and apply, and the load-time checks (unknown policies, cycles,
``model`` protected). Cases follow llama-swap's own tests of its SPL package."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping

import pytest
from multidict import CIMultiDict

from modelswap.policy import (
    ABSENT,
    Denial,
    PolicyRuntimeError,
    PolicySet,
    Program,
    Request,
    check,
    find_cycle,
    parse,
    read,
    run,
)

Body = dict[str, object]


def apply(
    source: str, body: Body, library: Mapping[str, Program] | None = None
) -> tuple[Body, Denial | None, Request]:
    request = Request(copy.deepcopy(body))
    denied = run(parse(source), library or {}, request)
    return request.body, denied, request


def holds(condition: str, body: Body) -> bool:
    out, _, _ = apply(f"set hit to true when {condition}", body)
    return out.get("hit") is True


BODY: Body = {
    "s": "abc",
    "n": 2,
    "b": True,
    "z": None,
    "o": {"k": 1},
    "a": [1],
    "big": 12345678901234567890,
    "f": 0.5,
}


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        ('s = "abc"', True),
        ('s == "abc"', True),
        ('s = "abd"', False),
        ('s != "abd"', True),
        ("s = 2", False),
        ("s != 2", True),
        ("n = 2", True),
        ("n = 2.0", True),
        ('n = "2"', False),  # a string is not a number
        ("b = true", True),
        ("b = false", False),
        ("b != false", True),
        ("b = 1", False),  # a boolean is not a number (Python's True == 1 is not SPL's)
        ("n = true", False),
        ("z = null", True),
        ("z != null", False),
        ("missing = null", False),  # absent is not null
        ("missing != null", True),  # != is exactly not =
        ('missing != "x"', True),
        ('missing = "x"', False),
        ('o = "x"', False),
        ('o != "x"', True),
        ("a = 1", False),
        ("n < 3", True),
        ("n <= 2", True),
        ("n > 2", False),
        ("n >= 2", True),
        ('n < "3"', False),  # mixed kinds are never ordered
        ('s < "abd"', True),
        ('s > "abb"', True),
        ('s >= "abc"', True),
        ('s <= "abb"', False),
        ("b < true", False),
        ("z < 1", False),
        ("missing < 1", False),
        ("missing > 1", False),
        ("f < 1", True),
        ("f > -1e3", True),
        ("s matches /^a.c$/", True),
        ("s matches /^b/", False),
        ("s matches /B/", False),
        ("s matches /(?i)B/", True),
        ("n matches /2/", False),  # only strings match
        ("missing matches /.*/", False),
        ("s is present", True),
        ("z is present", True),  # null counts as present
        ("z is missing", False),
        ("missing is missing", True),
        ("o.k is present", True),
        ("o.k = 1", True),
        ("o.j is missing", True),
        ("s.x is missing", True),  # through a string: absent
        ('s in ["x", "abc"]', True),
        ('s in ["x"]', False),
        ("n in [1, 2]", True),
        ("z in [null]", True),
        ("missing in [null]", False),
        ("s in []", False),
        ('s = "abc" and n = 2', True),
        ('s = "abc" and n = 3', False),
        ('s = "x" or n = 2', True),
        ('not s = "x"', True),
        ('not (s = "abc" or n = 3)', False),
        ('s = "x" or n = 2 and b = false', False),
        ('(s = "x" or n = 2) and b = true', True),
        ("big = 12345678901234567890", True),
        ("big > 1e19", True),
        ("a[0] = 1", True),
        ("a[-1] = 1", True),
        ("a[1] is missing", True),
        ("a[-2] is missing", True),
    ],
)
def test_conditions(condition: str, expected: bool) -> None:
    assert holds(condition, BODY) is expected


MESSAGES: Body = {
    "messages": [
        {"role": "system"},
        {"role": "user", "content": "hi"},
        {"role": "assistant"},
    ],
    "tools": [{"function": {"name": "f1"}}],
    "s": "str",
}


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("messages[-1].role", "assistant"),
        ("messages[-3].role", "system"),
        ("messages[-4].role", ABSENT),
        ("messages[0].role", "system"),
        ("messages[1].content", "hi"),
        ("messages[-1].content", ABSENT),
        ("tools[-1].function.name", "f1"),
        ("s[-1]", ABSENT),
        ("missing[-1]", ABSENT),
        ("messages[9]", ABSENT),
        ("body.s", "str"),
    ],
)
def test_negative_indexes_count_from_the_end(path: str, expected: object) -> None:
    [clause] = parse(f"remove {path}").clauses
    assert clause.path is not None
    assert read(clause.path, Request(MESSAGES)) == expected


def test_default_fills_only_what_is_missing() -> None:
    out, _, _ = apply(
        'default temperature to 0.2\ndefault top_p to 0.9\ndefault stop to "x"',
        {"temperature": 0.7, "stop": None},
    )
    assert out == {"temperature": 0.7, "stop": None, "top_p": 0.9}  # null counts as present


def test_set_overwrites_and_creates_what_is_on_the_way() -> None:
    out, _, request = apply(
        "set temperature to 0.1\n"
        "set chat_template_kwargs.enable_thinking to false\n"
        'set meta to {"a": [1, 2], "b": "s"}\n'
        'set stop to ["</s>", "\\n"]\n'
        "set n to null\n"
        "set big to 12345678901234567890",
        {"temperature": 0.7},
    )
    assert out == {
        "temperature": 0.1,
        "chat_template_kwargs": {"enable_thinking": False},
        "meta": {"a": [1, 2], "b": "s"},
        "stop": ["</s>", "\n"],
        "n": None,
        "big": 12345678901234567890,
    }
    assert request.changed


def test_writes_follow_llama_swaps_json_library() -> None:
    # A scalar in the way is replaced; an index after a new key makes a null-padded array;
    # an index past an array's end pads it with nulls; an index into an object is a key.
    out, _, _ = apply(
        "set a.b to 1\nset c[2] to 1\nset d[3] to true\nset e.f[1].g to 1\nset o[0] to 1",
        {"a": 5, "d": [0], "o": {}},
    )
    assert out == {
        "a": {"b": 1},
        "c": [None, None, 1],
        "d": [0, None, None, True],
        "e": {"f": [None, {"g": 1}]},
        "o": {"0": 1},
    }
    with pytest.raises(PolicyRuntimeError, match="cannot set array element for non-numeric key"):
        apply("set tools.name to 1", {"tools": [1]})


def test_remove_present_and_missing() -> None:
    out, _, request = apply(
        "remove a\nremove missing\nremove o.k\nremove arr[-1]\nremove arr[-9]\nremove arr[7]",
        {"a": 1, "o": {"k": 1, "j": 2}, "arr": [1, 2, 3]},
    )
    assert out == {"o": {"j": 2}, "arr": [1, 2]}
    assert request.changed
    untouched, _, request = apply("remove missing\nremove o.x.y", {"o": {}})
    assert (untouched, request.changed) == ({"o": {}}, False)


def test_negative_indexes_write_and_do_nothing_when_they_do_not_resolve() -> None:
    out, _, _ = apply(
        'set messages[-1].content to "replaced"',
        {"messages": [{"content": "a"}, {"content": "b"}]},
    )
    assert out == {"messages": [{"content": "a"}, {"content": "replaced"}]}
    out, _, request = apply('set messages[-1].content to "x"', {"messages": []})
    assert (out, request.changed) == ({"messages": []}, False)
    out, _, _ = apply('default messages[-1].name to "x"', {"messages": "text"})
    assert out == {"messages": "text"}


def test_the_body_prefix_reaches_keys_named_like_a_namespace() -> None:
    out, _, _ = apply(
        "set body.context to [1]\nremove body.auth\nset body.request.x to 1", {"auth": "k"}
    )
    assert out == {"context": [1], "request": {"x": 1}}


def test_clauses_run_in_order_and_conditions_gate_them() -> None:
    out, _, _ = apply(
        "set a to 1\nset a to 2 when a = 1\nset a to 3 when a = 1\nremove b when a = 2",
        {"b": True},
    )
    assert out == {"a": 2}


def test_a_written_list_is_a_copy_each_time() -> None:
    out, _, _ = apply('set x to ["a"]\nset y to ["a"]\nset x[1] to "b"', {})
    assert out == {"x": ["a", "b"], "y": ["a"]}
    program = parse('set x to {"k": [1]}\nset x.k[1] to 2')
    first, second = Request({}), Request({})
    run(program, {}, first)
    run(program, {}, second)
    assert first.body == second.body == {"x": {"k": [1, 2]}}


def test_nested_values_are_copied_before_they_change() -> None:
    shared = {"messages": [{"role": "user", "content": "hi"}], "o": {"k": 1, "j": {"x": 1}}}
    before = copy.deepcopy(shared)
    body = dict(shared)  # a shallow copy, as the relay passes it
    request = Request(body)
    run(
        parse('set messages[-1].content to "x"\nremove o.j.x\nset o.n to 1\nremove messages[0]'),
        {},
        request,
    )
    assert shared == before  # the caller's parsed body is as it was
    assert body == {"messages": [], "o": {"k": 1, "j": {}, "n": 1}}


def test_context_is_a_bag_of_strings() -> None:
    out, _, request = apply(
        'set context.s to "str"\n'
        "set context.n to 1.50\n"
        "set context.b to true\n"
        'set context.o to {"k": "v"}\n'
        'set context.l to [1, "a"]\n'
        'default context.s to "ignored"\n'
        'default context.d to "filled"\n'
        'set context.gone to "x"\n'
        "set context.gone to null\n"
        'set context.removed to "x"\n'
        "remove context.removed\n"
        'set hit to true when context.s = "str" and context.n = "1.50" '
        "and context.missing is missing",
        {},
    )
    assert request.context == {
        "s": "str",
        "n": "1.50",  # a number keeps its spelling
        "b": "true",
        "o": '{"k":"v"}',
        "l": '[1,"a"]',
        "d": "filled",
    }
    assert out == {"hit": True}


def test_request_namespaces() -> None:
    program = parse(
        "set key to true when auth.key is present\n"
        'set key_val to true when auth.key = "secret"\n'
        'set model to true when request.model = "alias"\n'
        "set path to true when request.path matches /^\\/v1\\/chat/\n"
        'set method to true when request.method = "POST"\n'
        'set hdr to true when request.header.x-session-id = "abc"\n'
        'set hdr_ci to true when request.header.X-Session-Id = "abc"\n'
        "set hdr_missing to true when request.header.nope is missing"
    )
    request = Request(
        {},
        api_key="secret",
        model="alias",
        path="/v1/chat/completions",
        method="POST",
        headers=CIMultiDict({"X-Session-Id": "abc"}),
    )
    run(program, {}, request)
    assert list(request.body) == [
        "key",
        "key_val",
        "model",
        "path",
        "method",
        "hdr",
        "hdr_ci",
        "hdr_missing",
    ]
    absent = Request({}, api_key="", headers=CIMultiDict({"X": ""}))
    run(
        parse(
            "set a to true when auth.key is missing\nset b to true when request.model is missing\n"
            "set c to true when request.header.x is missing\n"
            "set d to true when request.path is missing"
        ),
        {},
        absent,
    )
    assert absent.body == {"a": True, "b": True, "c": True, "d": True}


def test_deny_stops_everything() -> None:
    out, denied, _ = apply('deny "no"\nset after to true', {})
    assert (denied, out) == (Denial(403, "no"), {})
    _, denied, _ = apply('deny 400 "messages is required" when messages is missing', {})
    assert denied == Denial(400, "messages is required")
    out, denied, _ = apply('deny "no" when a = 1\nset after to true', {"a": 2})
    assert (denied, out) == (None, {"a": 2, "after": True})
    library = {"authed": parse('deny 401 "login required" when auth.key is missing')}
    out, denied, _ = apply("apply authed\nset after to true", {}, library)
    assert (denied, out) == (Denial(401, "login required"), {})


def test_apply_runs_in_place_and_in_order() -> None:
    library = {
        "inner": parse('set inner to true\nset shared to "inner"'),
        "outer": parse("apply inner\nset outer to true"),
        "tag": parse('set context.tag to "x"'),
    }
    out, _, request = apply(
        'set shared to "before"\napply outer\napply tag\nset after to true', {}, library
    )
    assert json.dumps(out) == json.dumps(
        {"shared": "inner", "inner": True, "outer": True, "after": True}
    )
    assert request.context == {"tag": "x"}


def test_apply_at_run_time_guards_what_load_refuses() -> None:
    cyclic = {"a": parse("apply b"), "b": parse("apply a")}
    with pytest.raises(PolicyRuntimeError, match="policy nesting deeper than 32"):
        run(cyclic["a"], cyclic, Request({}))
    with pytest.raises(PolicyRuntimeError, match="unknown policy"):
        run(parse("apply nowhere"), {}, Request({}))


def test_unknown_apply_and_protected_model_are_refused() -> None:
    program = parse(
        'apply known\napply unknown\nset model to "x"\nremove body.model\n'
        "default model.x to 1\nset context.model to 1\nset models to 1\nset x.model to 1"
    )
    assert [str(e) for e in check(program, ["known"])] == [
        'line 2:7: apply references unknown policy "unknown"',
        'line 3:5: cannot set protected parameter "model"',
        'line 4:8: cannot remove protected parameter "model"',
        'line 5:9: cannot set protected parameter "model"',
    ]
    assert check(parse("remove a when model = 1"), []) == []  # reading it is fine


def test_cycles_are_found() -> None:
    def cycle(policies: dict[str, str]) -> list[str] | None:
        return find_cycle({name: parse(source) for name, source in policies.items()})

    assert cycle({"a": "apply a"}) == ["a", "a"]
    assert cycle({"a": "apply b", "b": "apply a"}) == ["a", "b", "a"]
    assert cycle({"a": "apply b", "b": "apply c", "c": "apply a"}) == ["a", "b", "c", "a"]
    assert cycle({"x": "apply a", "a": "apply b", "b": "apply a"}) == ["a", "b", "a"]
    assert cycle({"a": "apply b\napply c", "b": "apply c", "c": "set x to 1"}) is None
    assert cycle({"a": "apply missing"}) is None  # check() reports the unknown name
    long = {f"p{i}": f"apply p{i + 1}" for i in range(5000)} | {"p5000": "set a to 1"}
    assert cycle(long) is None  # no recursion: a long chain is fine


def test_a_policy_set_runs_the_hook_then_the_targets_own() -> None:
    hook, qwen, far = parse("set a to 1"), parse("set b to 1"), parse("set c to 1")
    policies = PolicySet(on_request=hook, models={"qwen": qwen}, peers={"far": far})
    assert policies.programs_for(model="qwen") == [hook, qwen]
    assert policies.programs_for(model="other") == [hook]
    assert policies.programs_for(peer="far") == [hook, far]
    assert PolicySet(models={"qwen": parse("# nothing")}).programs_for(model="qwen") == []
