"""The ``model`` a client asked for, as a request's record shows it: bounded and redacted,
remembered per redactor (a reload's redactor knows other secrets)."""

from __future__ import annotations

from modelswap.errors import ECHO_CHARS
from modelswap.http.tracking.scope import _requested
from modelswap.redact import Redactor

SECRET = "my-private-model-7"  # a name only a redactor that knows it masks


def test_the_same_name_is_redacted_by_each_redactor_in_turn() -> None:
    plain, knowing = Redactor(), Redactor([SECRET])
    assert _requested(plain, SECRET) == SECRET
    assert SECRET not in _requested(knowing, SECRET)  # a new redactor: not the one remembered
    assert _requested(plain, SECRET) == SECRET


def test_a_long_name_is_cut_as_echo_cuts_it() -> None:
    long = "m" * (ECHO_CHARS + 500)
    shown = _requested(Redactor(), long)
    assert shown.startswith("m" * ECHO_CHARS)
    assert f"({len(long)} characters)" in shown
    assert _requested(Redactor(), "qwen") == "qwen"
