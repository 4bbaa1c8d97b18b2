"""``matches /re/`` is Go's RE2 (issue 29): what RE2 accepts is accepted, what it refuses is
refused at load with RE2's reason, and matching takes linear time whatever the pattern — the
patterns that make Python's ``re`` backtrack for minutes answer here in milliseconds."""

from __future__ import annotations

import time

import pytest

from modelswap.policy import PolicyError, parse
from modelswap.policy.regex import Regex, RegexError


@pytest.mark.parametrize(
    ("pattern", "text", "expected"),
    [
        ("^private-", "private-llama", True),
        ("coder", "qwen-coder-32b", True),
        ("(?i)CLAUDE", "claude-3", True),
        ("a(?i)B", "ab", True),  # a flag from the middle on, as RE2 reads it
        ("(?i:A)b", "aB", False),
        ("(?s)a.b", "a\nb", True),
        ("a.b", "a\nb", False),
        ("(?m)^b$", "a\nb\nc", True),
        ("^b$", "a\nb", False),
        ("a$", "a\n", False),  # $ is the end of the text (Python's would match before \n)
        ("a\\z", "a", True),
        ("(?U)a+", "aaa", True),
        ("\\pL+", "héllo", True),
        ("\\p{Greek}", "λ", True),
        ("\\PL", "abc", False),
        ("[[:alpha:]]+[[:digit:]]", "abc1", True),
        ("[[:^space:]]", " ", False),
        ("\\Qa.b\\E", "axb", False),
        ("\\Qa.b\\E", "a.b", True),
        ("(?P<name>x)", "x", True),
        ("(?<name>x)", "x", True),
        ("\\d+", "٣", False),  # \d is ASCII in RE2
        ("\\w", "é", False),
        ("\\bword\\b", "a word here", True),
        ("\\x{263a}", "☺", True),
        ("\\101", "A", True),  # octal
        ("a{2,3}", "aa", True),
        ("a{,3}", "a{,3}", True),  # not a repetition in RE2: literal
        ("a{1000}", "a" * 1000, True),
        ("[]a]", "]", True),
        ("^$", "", True),
        ("\\C", "", None),
    ],
)
def test_re2_semantics(pattern: str, text: str, expected: bool | None) -> None:
    if expected is None:
        with pytest.raises(RegexError):
            Regex(pattern)
        return
    assert Regex(pattern).search(text) is expected


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(?=a)", "invalid perl operator: (?="),
        ("(?!a)", "invalid perl operator: (?!"),
        ("(?<=a)b", "invalid perl operator: (?<"),
        ("(?<!a)b", "invalid perl operator: (?<"),
        ("(a)\\1", "invalid escape sequence: \\1"),
        ("(?P<n>a)(?P=n)", "invalid perl operator: (?P"),
        ("a*+", "bad repetition operator: *+"),
        ("a++", "bad repetition operator: ++"),
        ("a**", "bad repetition operator: **"),
        ("(?>a)", "invalid perl operator: (?>"),
        ("a{1001}", "invalid repetition size: {1001}"),
        ("\\Z", "invalid escape sequence: \\Z"),
        ("\\C", "invalid escape sequence: \\C"),  # C++ RE2 has it; Go's does not
        ("\\u1234", "invalid escape sequence: \\u"),
        ("\\e", "invalid escape sequence: \\e"),
        ("(?#comment)", "invalid perl operator: (?#"),
        ("(", "missing ): ("),
        ("[a", "missing ]: [a"),
        ("x{2}{3}", "bad repetition operator: {2}{3}"),
    ],
)
def test_what_re2_refuses_is_refused_at_load(pattern: str, reason: str) -> None:
    with pytest.raises(RegexError) as info:
        Regex(pattern)
    assert str(info.value).startswith(reason)
    escaped = pattern.replace("/", "\\/")
    with pytest.raises(PolicyError) as parsed:
        parse(f"remove a\nremove b when c matches /{escaped}/")
    assert str(parsed.value).startswith(f"line 2:25: invalid regex: {reason}")


def test_an_escaped_slash_and_a_quoted_c_are_not_refusals() -> None:
    [clause] = parse("remove a when p matches /^\\/v1\\/chat/").clauses
    assert clause.when is not None
    assert Regex("\\QC:\\C\\E").search("C:\\C")  # \C between \Q and \E is text
    assert Regex("\\\\C").search("\\C")  # an escaped backslash, then C


@pytest.mark.parametrize(
    "pattern", ["(a+)+x", "(a|a)*x", ".*.*.*x", "[ab]*[ab]*[ab]*x", "(a*)*b", "(x+x+)+y"]
)
def test_matching_takes_linear_time(pattern: str) -> None:
    text = "a" * 1_000_000  # Python's re takes minutes on some of these at 10 000
    regex = Regex(pattern)
    began = time.perf_counter()
    assert regex.search(text) is False
    assert time.perf_counter() - began < 2.0


def test_a_lone_surrogate_in_the_text_is_matched_not_raised() -> None:
    # One character, as llama-swap's JSON reader makes it (the replacement character).
    assert Regex("a.b").search("a\ud800b") is True
    assert Regex("^a").search("a\ud800") is True
    assert Regex("x").search("\udfff") is False
