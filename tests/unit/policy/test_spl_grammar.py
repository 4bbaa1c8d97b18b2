"""The Swap Policy Language's grammar (issue 29): tokens, newline rules, every action and
condition, paths, and every error with its line:column — llama-swap's messages, word for word
where it has one."""

from __future__ import annotations

import pytest

from modelswap.policy import PolicyError, parse
from modelswap.policy.lexer import MAX_NESTING, T, lex
from modelswap.policy.nodes import (
    Action,
    AllOf,
    AnyOf,
    Compare,
    In,
    Kind,
    Matches,
    Namespace,
    Not,
    Op,
    Presence,
    Segment,
)


def test_tokens_and_their_positions() -> None:
    tokens = lex(
        'set a-b.c[0] to "x\\"y" # comment\n'
        "  when d == 1 and e != -2.5e3 or f matches /a\\/b\\d/ and g in [true, null]\n"
        'deny 400 "no"\n'
        'default h to {"k": [1, {"n": "}"}]}'
    )
    assert [t.kind for t in tokens] == [
        T.IDENT, T.IDENT, T.DOT, T.IDENT, T.LBRACKET, T.NUMBER, T.RBRACKET, T.IDENT, T.STRING,
        T.IDENT, T.IDENT, T.EQ, T.NUMBER, T.IDENT, T.IDENT, T.NE, T.NUMBER, T.IDENT,
        T.IDENT, T.IDENT, T.REGEX, T.IDENT, T.IDENT, T.IDENT, T.LBRACKET, T.IDENT, T.COMMA,
        T.IDENT, T.RBRACKET,
        T.NEWLINE,
        T.IDENT, T.NUMBER, T.STRING,
        T.NEWLINE,
        T.IDENT, T.IDENT, T.IDENT, T.OBJECT,
        T.EOF,
    ]  # fmt: skip
    texts = [t.text for t in tokens]
    assert texts[1] == "a-b"  # '-' continues a name (policy names use it)
    assert texts[8] == 'x"y'
    assert texts[16] == "-2.5e3"
    assert texts[20] == "a/b\\d"  # \/ is a slash; other escapes go to RE2 as written
    assert texts[37] == '{"k":[1,{"n":"}"}]}'  # compact, a brace inside a string kept
    # The continuation "when" swallowed the newline before it and keeps its own position.
    assert (tokens[9].line, tokens[9].col) == (2, 3)
    assert (tokens[-1].line, tokens[-1].col) == (4, 36)


def test_newlines_separate_clauses_only_where_they_mean_it() -> None:
    tokens = lex(
        "\n\n# leading comment\nremove a\n\n\nremove b\n  and\n  or\nremove c (\n)\n[\n1\n]\r\n"
    )
    # remove a | remove b and or | remove c ( ) [ 1 ]
    assert [t.kind for t in tokens].count(T.NEWLINE) == 3
    assert tokens[-1].kind is T.EOF


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ('deny "oops\n', "line 1:6: unterminated string"),
        ('deny "oops\\', "line 1:6: unterminated string"),
        ('deny "bad \\q escape"', "line 1:6: invalid string literal"),
        ("remove a when b matches /abc\n", "line 1:25: unterminated regex"),
        ('set a to {"k": 1', "line 1:10: unterminated object literal"),
        ("set a to {k: 1}", "line 1:10: invalid JSON object literal"),
        ('set a to {"k": NaN}', "line 1:10: invalid JSON object literal"),
        ("set a to $", "line 1:10: unexpected character '$'"),
        ("remove a when b ! 1", 'line 1:17: unexpected character "!"'),
        ("set a to 1.2.3", 'line 1:10: invalid number "1.2.3"'),
        ("set a to 1e", 'line 1:10: invalid number "1e"'),
        ("set a to 1e999", 'line 1:10: invalid number "1e999"'),
    ],
)
def test_lexer_errors(source: str, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        lex(source)
    assert str(info.value).startswith(message)


def test_every_action() -> None:
    program = parse(
        """
default temperature to 0.2
set chat_template_kwargs to {"reasoning_effort": "high"}
set stop to ["a", ["b", 1], {"c": null}]
remove reasoning_effort
apply coding-defaults
apply coding-defaults
deny "nope"
deny 429 "slow down"
set set.in to "keywords as keys"
set context.workload to "coding"
"""
    )
    assert len(program) == 10
    assert program.applies == ("coding-defaults",)
    c = program.clauses
    assert [x.action for x in c] == [
        Action.DEFAULT, Action.SET, Action.SET, Action.REMOVE, Action.APPLY, Action.APPLY,
        Action.DENY, Action.DENY, Action.SET, Action.SET,
    ]  # fmt: skip
    assert c[0].value is not None
    assert (c[0].value.value, c[0].value.raw) == (0.2, "0.2")
    assert c[1].value is not None
    assert c[1].value.kind is Kind.OBJECT
    assert c[1].value.raw == '{"reasoning_effort":"high"}'
    assert c[2].value is not None
    assert c[2].value.kind is Kind.ARRAY
    assert c[2].value.raw == '["a",["b",1],{"c":null}]'
    assert c[2].value.value == ["a", ["b", 1], {"c": None}]
    assert (c[4].policy, c[4].line, c[4].col) == ("coding-defaults", 6, 7)
    assert (c[6].status, c[6].message) == (403, "nope")
    assert (c[7].status, c[7].message) == (429, "slow down")
    assert c[8].path is not None
    assert c[8].path.namespace is Namespace.BODY
    assert c[8].path.segments == (Segment(key="set"), Segment(key="in"))
    assert c[9].path is not None
    assert c[9].path.namespace is Namespace.CONTEXT


def test_values() -> None:
    values = [
        clause.value
        for clause in parse(
            'set a to "s"\nset a to -12\nset a to 1.5e2\nset a to true\nset a to false\n'
            "set a to null\nset a to []\nset a to [\n  1,\n  2\n]\n"
            'set a to {\n  "multi": "line"\n}\nset a to 12345678901234567890'
        ).clauses
    ]
    got = [(v.kind, v.value, v.raw) for v in values if v is not None]
    assert got == [
        (Kind.STRING, "s", '"s"'),
        (Kind.NUMBER, -12, "-12"),
        (Kind.NUMBER, 150.0, "1.5e2"),
        (Kind.BOOL, True, "true"),
        (Kind.BOOL, False, "false"),
        (Kind.NULL, None, "null"),
        (Kind.ARRAY, [], "[]"),
        (Kind.ARRAY, [1, 2], "[1,2]"),
        (Kind.OBJECT, {"multi": "line"}, '{"multi":"line"}'),
        (Kind.NUMBER, 12345678901234567890, "12345678901234567890"),
    ]


def test_every_condition_and_their_precedence() -> None:
    program = parse(
        """
remove a when b = "x"
remove a when b == 1
remove a when b != true
remove a when b < 1 or b <= 2 or b > 3 or b >= 4
remove a when b matches /^co+der$/
remove a when b is present and c is missing
remove a when b in ["x", 2, null]
remove a when a = 1 or b = 2 and c = 3
remove a when not a = 1 and b = 2
remove a when (a = 1 or b = 2) and not (c = 3)
remove a
  when b = 1
  and c = 2
  or d = 3
remove a when b in []
"""
    )
    conds = [clause.when for clause in program.clauses]
    assert isinstance(conds[0], Compare)
    assert conds[0].op is Op.EQ
    assert isinstance(conds[1], Compare)
    assert conds[1].op is Op.EQ
    assert isinstance(conds[2], Compare)
    assert conds[2].op is Op.NE
    assert isinstance(conds[3], AnyOf)
    assert [c.op for c in conds[3].items if isinstance(c, Compare)] == [Op.LT, Op.LE, Op.GT, Op.GE]
    assert isinstance(conds[4], Matches)
    assert conds[4].regex.pattern == "^co+der$"
    assert isinstance(conds[5], AllOf)
    assert [c.present for c in conds[5].items if isinstance(c, Presence)] == [True, False]
    assert isinstance(conds[6], In)
    assert [v.kind for v in conds[6].values] == [
        Kind.STRING,
        Kind.NUMBER,
        Kind.NULL,
    ]
    # a = 1 or (b = 2 and c = 3): and binds tighter
    assert isinstance(conds[7], AnyOf)
    assert isinstance(conds[7].items[0], Compare)
    assert isinstance(conds[7].items[1], AllOf)
    # (not a = 1) and b = 2: not binds tighter still
    assert isinstance(conds[8], AllOf)
    assert isinstance(conds[8].items[0], Not)
    assert isinstance(conds[9], AllOf)
    assert isinstance(conds[9].items[0], AnyOf)
    assert isinstance(conds[9].items[1], Not)
    # (b = 1 and c = 2) or d = 3, over continued lines
    assert isinstance(conds[10], AnyOf)
    assert isinstance(conds[10].items[0], AllOf)
    assert isinstance(conds[11], In)
    assert conds[11].values == ()


def test_a_long_chain_is_one_node() -> None:
    chain = " and ".join(f"k{i} = {i}" for i in range(3000))
    [clause] = parse(f"remove a when {chain}").clauses
    assert isinstance(clause.when, AllOf)
    assert len(clause.when.items) == 3000


@pytest.mark.parametrize(
    ("source", "namespace", "segments"),
    [
        ("remove a", Namespace.BODY, (Segment("a"),)),
        (
            "remove metadata.client.name",
            Namespace.BODY,
            (Segment("metadata"), Segment("client"), Segment("name")),
        ),
        (
            "remove messages[0].role",
            Namespace.BODY,
            (Segment("messages"), Segment(index=0), Segment("role")),
        ),
        ("remove messages[-1]", Namespace.BODY, (Segment("messages"), Segment(index=-1))),
        ("remove body.context", Namespace.BODY, (Segment("context"),)),
        ("remove body.body", Namespace.BODY, (Segment("body"),)),
        ("remove context", Namespace.BODY, (Segment("context"),)),
        ("remove request", Namespace.BODY, (Segment("request"),)),
        ("remove context.x", Namespace.CONTEXT, (Segment("x"),)),
    ],
)
def test_paths(source: str, namespace: Namespace, segments: tuple[Segment, ...]) -> None:
    [clause] = parse(source).clauses
    assert clause.path is not None
    assert (clause.path.namespace, clause.path.segments) == (namespace, segments)


def test_read_only_namespaces_in_conditions() -> None:
    conds = [
        c.when
        for c in parse(
            "remove a when auth.key is present\n"
            "remove a when request.header.x-session-id is present\n"
            'remove a when request.model = "m"\n'
            "remove a when request.path matches /^\\/v1\\/chat/\n"
            'remove a when request.method = "POST"'
        ).clauses
    ]
    paths = [c.path for c in conds if isinstance(c, Presence | Compare | Matches)]
    assert [p.namespace for p in paths] == [Namespace.AUTH] + [Namespace.REQUEST] * 4
    assert paths[1].segments == (Segment("header"), Segment("x-session-id"))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("set a 1", "line 1:7: unexpected \"1\", expected 'to'"),
        ("set a to", "line 1:9: unexpected end of program, expected a value"),
        (
            "sett a to 1",
            'line 1:1: unexpected "sett", expected an action (default, set, remove, apply, deny)',
        ),
        ("1", 'line 1:1: unexpected "1", expected an action'),
        ("when a = 1", 'line 1:1: unexpected "when", expected an action'),
        ('deny 200 "x"', "line 1:6: deny status must be an integer between 400 and 599"),
        ('deny 600 "x"', "line 1:6: deny status must be an integer between 400 and 599"),
        ('deny 403.5 "x"', "line 1:6: deny status must be an integer between 400 and 599"),
        ("deny", "line 1:5: unexpected end of program, expected a quoted message"),
        ("deny 401", "line 1:9: unexpected end of program, expected a quoted message"),
        (
            'remove a when b = {"x": 1}',
            "line 1:19: object and array literals are only allowed in set and default values",
        ),
        (
            "remove a when b = [1]",
            "line 1:19: object and array literals are only allowed in set and default values",
        ),
        ("remove a when b in [[1]]", "line 1:21: object and array literals are only allowed"),
        ("remove a when b matches /(/", "line 1:25: invalid regex: missing ): ("),
        ("remove a when b matches /(?=x)/", "line 1:25: invalid regex: invalid perl operator"),
        ("remove a when b matches 'x'", 'line 1:25: unexpected character "\'"'),
        ("remove a when b matches x", 'line 1:25: unexpected "x", expected a /regex/'),
        (
            "remove a when b",
            "line 1:16: unexpected end of program, expected a comparison operator, 'is', "
            "'matches' or 'in'",
        ),
        (
            "remove a when b is absent",
            "line 1:20: unexpected \"absent\", expected 'present' or 'missing'",
        ),
        ("remove a b", 'line 1:10: unexpected "b", expected end of line'),
        ("remove a when b = 1 c", 'line 1:21: unexpected "c", expected end of line'),
        ("remove a when (b = 1", "line 1:21: unexpected end of program, expected ')'"),
        ("remove a when b in [1 2]", "line 1:23: unexpected \"2\", expected ',' or ']'"),
        ("remove a when b in [1,]", 'line 1:23: unexpected "]", expected a value'),
        ("apply 1", 'line 1:7: unexpected "1", expected a policy name'),
        ("remove a\nset b 1", "line 2:7: unexpected \"1\", expected 'to'"),
        ("remove a\n\n  # c\n\tset b to", "line 4:10: unexpected end of program"),  # a tab: 1
        ("remove context.a.b", "line 1:8: context paths must be context.<key>"),
        ("remove context[0]", "line 1:8: context paths must be context.<key>"),
        ('set auth.key to "x"', "line 1:5: auth.* is read-only"),
        ("remove request.path", "line 1:8: request.* is read-only"),
        (
            "remove a when auth.user is present",
            'line 1:15: unknown auth field "auth.user", only auth.key is available',
        ),
        (
            "remove a when request.body is present",
            'line 1:15: unknown request field "request.body"',
        ),
        ("remove a when request.header is present", "line 1:15: unknown request field"),
        ("remove a[1.5]", "line 1:10: array index must be an integer"),
        ("remove a[x]", 'line 1:10: unexpected "x", expected an array index'),
        ("remove a[1", "line 1:11: unexpected end of program, expected ']'"),
        ("remove a[1000000]", "line 1:10: array index is larger than 999999"),
        ("remove a.", "line 1:10: unexpected end of program, expected a field name after '.'"),
        ("remove .a", 'line 1:8: unexpected ".", expected a field path'),
        ("set a to [1", "line 1:12: unexpected end of program, expected ',' or ']'"),
    ],
)
def test_errors_name_their_line_and_column(source: str, message: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse(source)
    assert str(info.value).startswith(message), str(info.value)
    error = info.value
    assert str(error) == f"line {error.line}:{error.col}: {error.message}"


@pytest.mark.parametrize("source", ["", "\n\n", "# just a comment\n", "  \n # c \n\n", "\r\n"])
def test_empty_programs(source: str) -> None:
    program = parse(source)
    assert (len(program), program.applies) == (0, ())


def test_nesting_is_bounded_not_a_crash() -> None:
    deep = "remove a when " + "(" * (MAX_NESTING + 1) + "b = 1" + ")" * (MAX_NESTING + 1)
    with pytest.raises(PolicyError, match="nested deeper than"):
        parse(deep)
    nots = "remove a when " + "not " * (MAX_NESTING + 1) + "b = 1"
    with pytest.raises(PolicyError, match="nested deeper than"):
        parse(nots)
    lists = "set a to " + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1)
    with pytest.raises(PolicyError, match="nested deeper than"):
        parse(lists)
    objects = "set a to " + '{"a":' * (MAX_NESTING + 1) + "1" + "}" * (MAX_NESTING + 1)
    with pytest.raises(PolicyError, match="nested deeper than"):
        parse(objects)
    fine = "remove a when " + "(" * MAX_NESTING + "b = 1" + ")" * MAX_NESTING
    assert len(parse(fine)) == 1


def test_a_lone_surrogate_in_a_literal_is_the_replacement_character() -> None:
    [a, b] = parse('set a to "x\\ud800"\nset b to {"k": "\\udfff"}').clauses
    assert a.value is not None
    assert a.value.value == "x\ufffd"
    assert b.value is not None
    assert b.value.value == {"k": "\ufffd"}
