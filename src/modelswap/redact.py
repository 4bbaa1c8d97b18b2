"""The one redaction layer: masks secrets in everything modelswap shows.

Every surface that shows text or data to a person or writes it to a log -- config export,
``/running`` command lines, the activity log, captured requests and headers, error messages,
gateway logs, diagnostics -- passes it through a :class:`Redactor` first. This module is a leaf:
it imports nothing from modelswap, only the standard library.

Redaction must never damage data: numbers, timings, token counts and field names are never
masked, and a JSON document stays valid JSON with every non-secret value kept (the property
test, tests/unit/test_redact_real_data.py, feeds llama.cpp, vLLM and OpenAI bodies and startup
logs through it). A value is
masked where it *is* a secret: under a name that holds secrets, in a shape that carries one.

Two kinds of masking, applied together:

1. **Known values.** The caller hands the redactor every secret value it knows (API keys, values
   that came from ``${env.…}``, ``keyEnv``/``keyFile`` contents, upstream keys). Each occurrence
   is replaced by :data:`MASK`, longest secret first so a secret containing another is masked
   whole. Common encodings of each value are masked too: the whitespace-stripped value, its
   URL-quoted forms and its JSON-escaped form. Not used as known values: values shorter than
   ``min_length`` (masking ``"0"`` everywhere would destroy every text), and values that are a
   number (``4096``, ``0.02``, ``-1e-3``) or a JSON literal word (``true``, ``false``, ``null``,
   ``none``): a ``${env.CTX}`` of ``4096`` would otherwise mask every 4096 in every body and
   turn ``"n_ctx": 4096`` into invalid JSON. The shape rules below still apply to all of them
   (``--api-key 1234`` is masked).

2. **Shapes.** Wherever they appear, these are masked:

   * URL userinfo: ``scheme://user:pass@host`` -> ``scheme://***@host`` (the whole userinfo,
     with or without a password);
   * query (or fragment) parameters with a secret-looking name, and ``sig``/``signature``:
     ``?api_key=X`` -> ``?api_key=***``;
   * header lines ``Authorization:``, ``Proxy-Authorization:``, ``x-api-key:``, ``api-key:``,
     ``Cookie:``, ``Set-Cookie:`` and any hyphenated header name that looks secret
     (``X-Auth-Token:``): the value up to the end of the line;
   * command-line flags whose name looks secret, ``--api-key X`` and ``--api-key=X`` (also
     ``-hft``, llama.cpp's short ``--hf-token``; single-letter flags are never considered, and
     ``--no-…``/``--enable-…``/``--disable-…`` switches take no value; in free text a value
     that is itself a long flag, ``--x…``, is the next flag, not a value), and flag pairs in a
     printed list (``'--api-key', 'X'``);
   * ``Bearer``/``Basic``/``Token`` credentials in prose, well-known token formats (``sk-…``,
     ``hf_…``, ``ghp_…``, ``github_pat_…``, ``xox?-…``, ``AKIA…``, ``AIza…``), and PEM private keys;
   * *when the value could be a secret* (the value rule below): JSON / Python-repr pairs whose
     key looks secret (``"api_key": "X"``, ``'token': 'X'``) and ``name=value`` pairs whose name
     looks secret (``HF_TOKEN=X``, ``OPENAI_API_KEY=X``, ``hf_token='X'``).

**Secret-looking names** (:func:`is_secret_name`). The name is split into words (camelCase,
``-``, ``_``, ``.`` and spaces separate words; case is ignored; digits ending the name are
dropped: ``api_key_2``). A name looks secret, in one of two kinds:

* *secret names*: a word ends in ``password``, ``passwd``, ``passphrase``, ``secret`` or
  ``credential`` (plural too: ``DB_PASSWORD``, ``client_secret``, ``credentials``), the last word
  ends in ``auth``, ``authorization`` or ``cookie(s)`` (``Proxy-Authorization``, ``Set-Cookie``),
  or the whole name is ``pass``, ``pwd`` or ``pw``;
* *key names*: the last word ends in ``key``, ``keys`` or ``token`` (``api_key``, ``apiKeys``,
  ``X-Api-Key``, ``access_token``, ``hfToken``, ``key``, ``token``) -- except a token of the
  vocabulary (``bos``/``eos``/``pad``/``unk``/``sep``/``cls``/``mask``/``eot``/``eog``/``eom``/
  ``special``/``stop`` before ``token``: ``eos_token``, ``add_bos_token``) and a rate (``per``
  before it: ``timings_per_token``, ``cost_per_key``). A key name written as an environment
  variable (upper case with underscores: ``HF_TOKEN``, ``OPENAI_API_KEY``) is a secret name.

Everything else is not secret, in particular a name whose marker is not the *last* word: it
names something about the secret, not the secret (``prompt_per_token_ms``, ``--token-delay``,
``token_count``, ``encoder_cudagraph_token_budgets``, ``key_path``, ``keyFile``, ``keyEnv``),
and ``tokens`` (counts: ``max_tokens``, ``prompt_tokens``, ``tokens_cached``, ``n_tokens``),
``tokenizer``, ``author``, ``keywords``. A name that ends in something after the marker
(``api_key_value``) is not recognised: such a value is masked only when it is known or has a
well-known token format.

**The value rule** (JSON/repr pairs, ``name=value`` pairs, :meth:`Redactor.data`). Under a
secret-looking name a value is masked only when it is a string that could be a secret:

* numbers, booleans, ``null``/``None`` are never masked, whatever their key, nor the bare words
  ``true``/``false``/``null``/``none`` after ``NAME=`` (``api_key=None``); objects and lists
  are never masked whole: their strings are judged one by one, under the same name;
* a blank string is never masked;
* under a *secret name* any other string is masked (a password may be a short word);
* under a *key name* only a *key-like* string is masked: at least 8 characters (after a
  ``Bearer``/``Basic``/``Token`` prefix), no whitespace, none of ``< > | [ ] { } ( )``
  (special tokens like ``</s>``, placeholders like ``<your_token>`` and ``${env.KEY}``), and
  not a plain word -- letters only and shorter than 16 (``"token": "understanding"``). In data
  and in JSON text, a ``token`` next to a ``logprob`` key (a logprobs entry: generated text) is
  never masked.

A masked string is replaced by a string (``"***"``, quotes kept), so a masked JSON body stays
valid JSON. Should a text rule still break a JSON document (a header line quoted inside a
one-line body is masked to the end of that line), :meth:`Redactor.text` redacts that document
structurally instead (parse, :meth:`Redactor.data`, serialize): the whole text when it is one
JSON document, else each line that is one (``data: {…}`` events included).

**Structured input is masked by structure.** :meth:`Redactor.argv` masks the whole element after
a secret flag and everything after ``=`` in ``--flag=X`` / ``NAME=X`` elements;
:meth:`Redactor.headers` masks whole values; :meth:`Redactor.data` applies the value rule to
values under secret-looking keys. A dict under a secret-looking key is walked rather than
flattened, so ``apiKeys`` entries keep their ``name``/``scopes``/``models``: inside it, only
descriptive keys (see ``_DESCRIPTIVE``) are shown, every other string is judged by the value
rule of the enclosing key.

**Limits of free text.** In :meth:`Redactor.text` an unquoted flag/env/query value ends at
whitespace or a quote, so a secret with spaces is only fully masked when it is known, quoted, or
given structurally (argv element, header, data). Header lines are masked to the end of the line.
A short (under 8 characters) or plain-word value under a key name in JSON is shown unless it is
a known secret. Masking is for display only: never feed redacted output back into a request.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from urllib.parse import quote, quote_plus, unquote

__all__ = ["MASK", "Redactor", "is_secret_name"]

MASK = "***"

# --------------------------------------------------------------------------------------------
# Secret-looking names
# --------------------------------------------------------------------------------------------

# The kinds of name (module docstring): not secret, a key name, a secret name.
_NOT, _KEY, _SECRET = 0, 1, 2

_EXACT_SECRET = frozenset({"pass", "pwd", "pw"})
# Every name of either kind contains one of these.
_MARKERS = ("key", "token", "pass", "secret", "credential", "auth", "cookie", "pw")
_SECRET_ANYWHERE = ("password", "passwd", "passphrase", "secret", "credential")
_SECRET_LAST = ("auth", "authorization", "cookie")
_KEY_LAST = ("key", "keys", "token")
_VOCABULARY = frozenset(
    {"bos", "eos", "pad", "unk", "sep", "cls", "mask", "eot", "eog", "eom", "special", "stop"}
)
_ENV_NAME = re.compile(r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+")
# Keys shown as-is inside a value that sits under a secret-looking key (``apiKeys`` entries).
_DESCRIPTIVE = frozenset(
    {
        "name",
        "names",
        "label",
        "description",
        "id",
        "type",
        "kind",
        "scope",
        "scopes",
        "model",
        "models",
        "enabled",
        "created",
        "createdat",
        "expires",
        "expiresat",
        "keyenv",
        "keyfile",
        "keypath",
    }
)
_SECRET_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"}
)
_FLAG_ALIASES = frozenset({"hft"})
# Secret flags that always take a value (llama.cpp, vLLM, SGLang, huggingface-cli): the word
# after one is its value even when it looks like a flag (an API key may begin with "--").
_VALUE_FLAGS = frozenset(
    {"api-key", "hf-token", "hft", "token", "password", "secret", "access-token", "auth-token"}
)
_SWITCH_PREFIXES = frozenset({"no", "enable", "disable"})
_QUERY_EXTRA = frozenset({"sig", "signature"})

_CAMEL_ACRONYM = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def _words(name: str) -> list[str]:
    s = _CAMEL.sub(r"\1_\2", _CAMEL_ACRONYM.sub(r"\1_\2", name))
    return [w for w in _NON_WORD.split(s.lower()) if w]


def _ends(word: str, stems: tuple[str, ...]) -> bool:
    return any(word.endswith(stem) or word.endswith(stem + "s") for stem in stems)


@functools.lru_cache(maxsize=4096)
def _name_kind(name: str) -> int:
    """``_NOT``, ``_KEY`` or ``_SECRET`` (module docstring, "Secret-looking names")."""
    lowered = name.lower()
    if not any(marker in lowered for marker in _MARKERS):
        return _NOT  # the common case, cheap: most names mention no marker at all
    words = _words(name)
    if words:
        words[-1] = words[-1].rstrip("0123456789")
        if not words[-1]:
            words.pop()
    if not words:
        return _NOT
    if "".join(words) in _EXACT_SECRET:
        return _SECRET
    last = words[-1]
    if any(_ends(w, _SECRET_ANYWHERE) for w in words) or _ends(last, _SECRET_LAST):
        return _SECRET
    if not last.endswith(_KEY_LAST):
        return _NOT
    if len(words) > 1 and (words[-2] == "per" or (last == "token" and words[-2] in _VOCABULARY)):
        return _NOT
    return _SECRET if _ENV_NAME.fullmatch(name.strip()) else _KEY


def is_secret_name(name: str) -> bool:
    """Whether a key/flag/header/parameter name looks like it holds a secret (module docstring)."""
    return _name_kind(name) != _NOT


def _is_secret_flag(flag: str) -> bool:
    name = flag.lstrip("-")
    if len(name) < 2:
        return False
    if name.lower() in _FLAG_ALIASES:
        return True
    words = _words(name)
    if words and words[0] in _SWITCH_PREFIXES:
        return False
    return is_secret_name(name)


def _is_secret_query(name: str) -> bool:
    plain = unquote(name)
    return is_secret_name(plain) or any(w in _QUERY_EXTRA for w in _words(plain))


def _is_descriptive(name: str) -> bool:
    return "".join(_words(name)) in _DESCRIPTIVE


# --------------------------------------------------------------------------------------------
# The value rule
# --------------------------------------------------------------------------------------------

_LITERALS = frozenset({"true", "false", "null", "none"})
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_NOT_IN_KEYS = re.compile(r"[\s<>|\[\]{}()]")
_KEY_MIN = 8
_WORD_MAX = 16
_SCHEME_PREFIX = re.compile(r"(?:Bearer|Basic|Token)[ \t]+", re.IGNORECASE)


def _key_like(value: str) -> bool:
    if (prefix := _SCHEME_PREFIX.match(value)) is not None:
        value = value[prefix.end() :]
    if len(value) < _KEY_MIN or _NOT_IN_KEYS.search(value) is not None:
        return False
    return not (value.isalpha() and len(value) < _WORD_MAX)


def _string_secret(kind: int, value: str) -> bool:
    """Whether a string under a name of ``kind`` is masked (module docstring, value rule)."""
    if kind == _NOT:
        return False
    s = value.strip()
    if not s:
        return False
    return kind == _SECRET or _key_like(s)


def _is_plain_data(value: str) -> bool:
    """A number or a JSON literal word: never used as a known value."""
    return value.lower() in _LITERALS or _NUMBER.fullmatch(value) is not None


# --------------------------------------------------------------------------------------------
# Shape rules (compiled once)
# --------------------------------------------------------------------------------------------

_DQ = r'"(?:[^"\\\r\n]|\\.)*"'
_SQ = r"'(?:[^'\\\r\n]|\\.)*'"
_QUOTED = re.compile(rf"{_DQ}|{_SQ}")
# A value runs to the next blank: quoted parts and bare text joined without one are one
# value, as a shell reads them (``TOKEN="a b"c`` is ``a bc``), so no fragment is left unmasked
# -- but a part after a quoted one stops at ``,;)]}``: Python's repr (``api_key=['k'], x=1``)
# and argument lists end a value there. Atomic groups: a value never backtracks.
_JOINED = r"[^\s\"',;)\]}\[(]+"
_VALUE = rf"(?>(?:{_DQ}|{_SQ}|[^\s\"']+)(?:{_DQ}|{_SQ}|{_JOINED})*)"
_FLAT_LIST = r"[\[(][^\[\](){}\r\n]*[\])]"

_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
    re.DOTALL,
)
_JSON_PAIR = re.compile(
    r"(?P<pre>(?P<q>[\"'])(?P<name>[^\"'\\\r\n]{1,100})(?P=q)[ \t]*:[ \t]*)"
    rf"(?P<value>[bru]?{_DQ}|[bru]?{_SQ}|{_FLAT_LIST}|[^\s,;}}\]\"'\\]+)"
)
_QUOTED_FLAG_PAIR = re.compile(
    r"(?P<pre>(?P<q>[\"'])(?P<name>-{1,2}[A-Za-z][\w.-]*)(?P=q)[ \t]*,[ \t]*)"
    rf"(?P<value>{_DQ}|{_SQ})"
)
_USERINFO = re.compile(r"(?P<pre>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^\s/?#\"'<>`]+@")
_USERINFO_URL = re.compile(r"(?P<pre>\b[A-Za-z][A-Za-z0-9+.\-]*://)[^/?#]+@")
_QUERY = re.compile(r"(?P<pre>[?&#](?P<name>[A-Za-z0-9_.\-\[\]%]+)=)(?P<value>[^&#\s\"'<>]*)")
_QUERY_URL = re.compile(r"(?P<pre>[?&#;](?P<name>[A-Za-z0-9_.\-\[\]%]+)=)(?P<value>[^&#;]*)")
_HEADER = re.compile(
    r"(?<![\w-])(?P<name>proxy-authorization|authorization|x-api-key|api-key|set-cookie|cookie"
    r"|[a-z0-9]+(?:-[a-z0-9]+)+)(?P<sep>[ \t]*:[ \t]*)(?=[^\s])",
    re.IGNORECASE,
)
_FLAG = re.compile(
    rf"(?P<pre>(?<![\w-])(?P<name>-{{1,2}}[A-Za-z][\w.-]*)(?P<sep>=|[ \t]+))(?P<value>{_VALUE})"
)
_ENV = re.compile(
    r"(?P<pre>(?<![\w\-?&#])(?P<name>[A-Za-z_][A-Za-z0-9_.]*)=)"
    rf"(?P<value>(?>(?:{_DQ}|{_SQ}|{_FLAT_LIST}|[^\s\"'\[(]+|[\[(])"
    rf"(?:{_DQ}|{_SQ}|{_FLAT_LIST}|{_JOINED}|[\[(])*))"
)
_SCHEME_CRED = re.compile(
    r"(?P<pre>\b(?P<name>Bearer|Basic|Token)[ \t]+)(?P<value>[A-Za-z0-9\-._~+/]{8,}=*)"
)
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_\-])(?:"
    r"sk-[A-Za-z0-9_\-]{20,}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_\-]{35}"
    r")"
)
_ARG_FLAG = re.compile(r"(?P<name>-{1,2}[A-Za-z][\w.-]*)(?:=(?P<value>.*))?", re.DOTALL)
_ARG_ENV = re.compile(r"(?P<name>[A-Za-z_][A-Za-z0-9_.]*)=(?P<value>.*)", re.DOTALL)
_NEXT_FLAG = re.compile(r"--[A-Za-z]")
_EVENT_PREFIX = re.compile(r"[ \t]*(?:data:[ \t]?)?")

_Match = re.Match[str]


def _mask_value(value: str) -> str:
    """MASK, keeping the quotes (and a ``b``/``r``/``u`` prefix) of a quoted value."""
    body = value.lstrip("bru") if value[:1] in "bru" and value[1:2] in "\"'" else value
    if len(body) >= 2 and body[0] in "\"'" and body[-1] == body[0]:
        prefix = value[: len(value) - len(body)]
        return f"{prefix}{body[0]}{MASK}{body[0]}"
    return MASK


def _unquote(value: str) -> str | None:
    """The text of a quoted value (JSON escapes decoded where they parse); None if unquoted."""
    body = value.lstrip("bru") if value[:1] in "bru" and value[1:2] in "\"'" else value
    if len(body) < 2 or body[0] not in "\"'" or body[-1] != body[0]:
        return None
    inner = body[1:-1]
    if body[0] == '"' and "\\" in inner:
        try:
            decoded = json.loads(body)
        except ValueError:
            return inner
        return decoded if isinstance(decoded, str) else inner
    return inner


def _judged(kind: int, value: str, *, in_json: bool) -> str | None:
    """The masked form of ``value`` (quoted, a flat list, or bare) under a name of ``kind``, or
    None when nothing in it is masked (module docstring, value rule). ``in_json``: a bare
    number is a JSON/Python number, never masked (after ``NAME=`` it is text)."""
    inner = _unquote(value)
    if inner is not None:
        return _mask_value(value) if _string_secret(kind, inner) else None
    if value[:1] in "[(" and value[-1:] in "])" and (in_json or _QUOTED.search(value)):
        masked = _QUOTED.sub(
            lambda e: _mask_value(e[0]) if _string_secret(kind, _unquote(e[0]) or "") else e[0],
            value,
        )
        return masked if masked != value else None
    if value.lower() in _LITERALS or (in_json and (value[:1] == "{" or _NUMBER.fullmatch(value))):
        return None
    return MASK if _string_secret(kind, value) else None


# A logprobs entry (``{"token": " Paris", "bytes": [...], "logprob": -0.01, ...}``): the
# ``"logprob"`` key a few flat pairs after or before a ``"token"`` pair of the same object.
# Regular expressions over a bounded window: bounded work per pair, whatever the body.
_FLAT_VALUE = rf'(?:{_DQ}|[^,{{}}\[\]"\s]+|\[[^\[\]{{}}]*\])'
_FLAT_PAIR = rf"{_DQ}\s*:\s*{_FLAT_VALUE}"
_LOGPROB_AFTER = re.compile(rf'(?:\s*,\s*{_FLAT_PAIR}){{0,6}}\s*,\s*"logprob"\s*:')
_LOGPROB_BEFORE = re.compile(
    rf'"logprob"\s*:\s*{_FLAT_VALUE}(?:\s*,\s*{_FLAT_PAIR}){{0,6}}\s*,\s*\Z'
)
_LOGPROB_WINDOW = 2048


def _near_logprob(s: str, start: int, end: int) -> bool:
    """Whether the JSON object holding the pair ``s[start:end]`` has a ``logprob`` key (a
    logprobs entry, in either key order)."""
    if _LOGPROB_AFTER.match(s, end, end + _LOGPROB_WINDOW) is not None:
        return True
    return _LOGPROB_BEFORE.search(s, max(0, start - _LOGPROB_WINDOW), start) is not None


def _json_pair(m: _Match) -> str | None:
    name = m["name"]
    kind = _name_kind(name)
    if kind == _NOT:
        return None
    masked = _judged(kind, m["value"], in_json=True)
    if masked is not None and name == "token" and _near_logprob(m.string, m.start(), m.end()):
        return None
    return masked


def _env_pair(m: _Match) -> str | None:
    kind = _name_kind(m["name"])
    return None if kind == _NOT else _judged(kind, m["value"], in_json=False)


def _named(secret: Callable[[str], bool]) -> Callable[[_Match], str | None]:
    """A replacement masking the whole value when the name is ``secret``."""
    return lambda m: _mask_value(m["value"]) if secret(m["name"]) else None


def _flag_replace(m: _Match) -> str | None:
    """The value after a secret flag -- unless it is the next long flag, so a switch whose name
    looks secret (``--timings-per-token --port 1``) does not swallow it; after a flag known to
    take a value (``--api-key``), whatever follows is its value."""
    if not _is_secret_flag(m["name"]):
        return None
    takes_value = m["name"].lstrip("-").lower() in _VALUE_FLAGS
    if m["sep"] != "=" and not takes_value and _NEXT_FLAG.match(m["value"]):
        return None
    return _mask_value(m["value"])


def _query_replace(m: _Match) -> str | None:
    return MASK if m["value"] and _is_secret_query(m["name"]) else None


def _cred_replace(m: _Match) -> str | None:
    value = m["value"]
    if (value.isalpha() and len(value) < 20) or _NUMBER.fullmatch(value):
        return None  # prose: "Bearer authentication", "Token 12345678"
    return MASK


def _pairs(regex: re.Pattern[str], replace: Callable[[_Match], str | None]) -> Callable[[str], str]:
    """A rule putting ``replace(match)`` in place of group ``value`` where it is not None.

    A match left alone consumes only up to the end of its ``name``, so whatever its value
    pattern swallowed (``--verbose --api-key X``) is still examined.
    """

    def rule(s: str) -> str:
        out: list[str] = []
        pos = 0
        while (m := regex.search(s, pos)) is not None:
            new = replace(m)
            if new is not None:
                out.append(s[pos : m.start("value")])
                out.append(new)
                pos = m.end()
            else:
                out.append(s[pos : m.end("name")])
                pos = m.end("name")
        out.append(s[pos:])
        return "".join(out)

    return rule


def _headers_in_text(text: str) -> str:
    """Header lines, masked to the end of the line; other ``name:`` pairs consume only a name."""
    out: list[str] = []
    pos = 0
    while (m := _HEADER.search(text, pos)) is not None:
        name = m["name"].lower()
        out.append(text[pos : m.end()])
        pos = m.end()
        if name in _SECRET_HEADERS or is_secret_name(name):
            ends = [i for i in (text.find("\n", pos), text.find("\r", pos)) if i >= 0]
            out.append(MASK)
            pos = min(ends) if ends else len(text)
    out.append(text[pos:])
    return "".join(out)


_Rule = tuple[Callable[[str], bool], Callable[[str], str]]

# (cheap trigger test, rule), in order: quoted pairs first, so a quoted value is masked whole
# before a free-text rule can cut it.
_TEXT_RULES: tuple[_Rule, ...] = (
    (lambda s: "-----BEGIN" in s, lambda s: _PEM.sub(MASK, s)),
    (lambda s: ":" in s and ('"' in s or "'" in s), _pairs(_JSON_PAIR, _json_pair)),
    (lambda s: "-" in s and "," in s, _pairs(_QUOTED_FLAG_PAIR, _named(_is_secret_flag))),
    (lambda s: "://" in s, lambda s: _USERINFO.sub(rf"\g<pre>{MASK}@", s)),
    (lambda s: "=" in s, _pairs(_QUERY, _query_replace)),
    (lambda s: ":" in s, _headers_in_text),
    (lambda s: "-" in s, _pairs(_FLAG, _flag_replace)),
    (lambda s: "=" in s, _pairs(_ENV, _env_pair)),
    (lambda s: "B" in s or "Tok" in s, _pairs(_SCHEME_CRED, _cred_replace)),
    (lambda s: True, lambda s: _TOKEN_SHAPES.sub(MASK, s)),
)
_URL_QUERY_RULE = _pairs(_QUERY_URL, _query_replace)

_NOT_JSON = object()


def _json_document(text: str) -> object:
    """``text`` parsed when it is one JSON object or array, else ``_NOT_JSON``."""
    if text.lstrip()[:1] not in ("{", "["):
        return _NOT_JSON
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return _NOT_JSON


def _as_str(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "backslashreplace")
    try:
        return str(value)
    except Exception:  # a broken __str__ must not break redaction
        return f"<unprintable {type(value).__name__}>"


def _variants(secret: str) -> set[str]:
    out = {secret, secret.strip()}
    for v in list(out):
        out.update((quote(v), quote(v, safe=""), quote_plus(v, safe="")))
        out.update((json.dumps(v)[1:-1], json.dumps(v, ensure_ascii=False)[1:-1]))
    return out


_MAX_DEPTH = 100


class Redactor:
    """Masks secrets in anything modelswap shows: exports, listings, errors, logs."""

    __slots__ = ("_known_re", "_min_length", "_secrets")

    def __init__(self, secrets: Iterable[str] = (), *, min_length: int = 4) -> None:
        self._min_length = min_length
        self._secrets: tuple[str, ...] = tuple(_as_str(s) for s in secrets)
        values: set[str] = set()
        for s in self._secrets:
            values.update(
                v for v in _variants(s) if len(v) >= min_length and v and not _is_plain_data(v)
            )
        self._known_re: re.Pattern[str] | None = None
        if values:
            ordered = sorted(values, key=lambda v: (-len(v), v))
            # Case-insensitive: a secret must stay masked when a backend (or a progress
            # label) prints it lowercased or uppercased.
            self._known_re = re.compile("|".join(re.escape(v) for v in ordered), re.IGNORECASE)

    def __repr__(self) -> str:  # never the values themselves
        return f"Redactor(<{len(self._secrets)} known secrets>, min_length={self._min_length})"

    def with_secrets(self, more: Iterable[str]) -> Redactor:
        """A new Redactor knowing this one's secrets and ``more``."""
        return Redactor((*self._secrets, *more), min_length=self._min_length)

    # -- strings ------------------------------------------------------------------------------

    def _known(self, s: str) -> str:
        return self._known_re.sub(MASK, s) if self._known_re is not None else s

    def text(self, text: str) -> str:
        """Known secrets, then every shape rule (module docstring); JSON stays JSON."""
        raw = _as_str(text)
        s = self._known(raw)
        if not s:
            return s
        for applies, rule in _TEXT_RULES:
            if applies(s):
                s = rule(s)
        return s if s == raw else self._still_json(raw, s)

    def _still_json(self, raw: str, masked: str) -> str:
        """``masked``, where each JSON document of ``raw`` (the whole text, or a line, with or
        without an event stream's ``data:``) that the rules broke is redacted structurally."""
        document = _json_document(raw)
        if document is not _NOT_JSON:
            if _json_document(masked) is _NOT_JSON:
                return self._serialized(document)
            return masked
        raw_lines, lines = raw.split("\n"), masked.split("\n")
        if len(raw_lines) != len(lines):
            return masked
        for i, (before, after) in enumerate(zip(raw_lines, lines, strict=True)):
            if before == after:
                continue
            head = _EVENT_PREFIX.match(before)
            prefix = head[0] if head is not None else ""
            document = _json_document(before[len(prefix) :])
            if document is _NOT_JSON:
                continue
            if after.startswith(prefix) and _json_document(after[len(prefix) :]) is not _NOT_JSON:
                continue
            end = "\r" if before.endswith("\r") else ""
            lines[i] = f"{prefix}{self._serialized(document)}{end}"
        return "\n".join(lines)

    def _serialized(self, document: object) -> str:
        return json.dumps(self.data(document), ensure_ascii=False)

    def url(self, url: str) -> str:
        """A URL with its userinfo, secret query parameters and known secrets masked."""
        s = self._known(_as_str(url))
        if "://" in s:
            s = _USERINFO_URL.sub(rf"\g<pre>{MASK}@", s)
        if "=" in s:
            s = _URL_QUERY_RULE(s)
        return _TOKEN_SHAPES.sub(MASK, s)

    def argv(self, argv: Sequence[str]) -> list[str]:
        """A command line, element by element: the element after a secret flag is masked whole."""
        out: list[str] = []
        mask_next = False
        for item in argv:
            arg = _as_str(item)
            if mask_next:
                out.append(MASK)
                mask_next = False
                continue
            m = _ARG_FLAG.fullmatch(arg)
            if m is not None and _is_secret_flag(m["name"]):
                if m["value"] is None:
                    out.append(self._known(arg))
                    mask_next = True
                else:
                    out.append(f"{self._known(m['name'])}={MASK}")
                continue
            m = _ARG_ENV.fullmatch(arg)
            if m is not None and is_secret_name(m["name"]):
                out.append(f"{self._known(m['name'])}={MASK}")
                continue
            out.append(self.text(arg))
        return out

    def headers(
        self, headers: Mapping[str, str] | Iterable[tuple[str, str]]
    ) -> list[tuple[str, str]]:
        """``(name, value)`` pairs; credentials and secret-looking headers get MASK."""
        items: Iterable[object] = headers.items() if isinstance(headers, Mapping) else headers
        out: list[tuple[str, str]] = []
        for item in items:
            if not isinstance(item, tuple | list) or len(item) != 2:
                continue
            raw_name, raw_value = item
            name = _as_str(raw_name)
            if name.strip().lower() in _SECRET_HEADERS or is_secret_name(name):
                out.append((self._known(name), MASK))
            else:
                out.append((self._known(name), self.text(_as_str(raw_value))))
        return out

    # -- structures ---------------------------------------------------------------------------

    def data(self, value: object) -> object:
        """Recursive over dict/list/tuple/set/str (sequences come back as lists).

        Strings under secret-looking keys are masked by the value rule (module docstring);
        other strings go through :meth:`text`; numbers, booleans and ``None`` are never
        masked. Dict keys are kept, with known secrets masked in them.
        """
        return self._data(value, _NOT, set(), 0)

    def _data(self, value: object, kind: int, active: set[int], depth: int) -> object:
        if value is None or isinstance(value, bool | int | float):
            return value
        if isinstance(value, str):
            return MASK if _string_secret(kind, value) else self.text(value)
        if depth >= _MAX_DEPTH or id(value) in active:
            return MASK
        if isinstance(value, Mapping):
            active.add(id(value))
            try:
                return self._mapping(value, kind, active, depth + 1)
            finally:
                active.discard(id(value))
        if isinstance(value, list | tuple | set | frozenset):
            active.add(id(value))
            try:
                return [self._data(v, kind, active, depth + 1) for v in value]
            finally:
                active.discard(id(value))
        return MASK if kind != _NOT else value

    def _mapping(
        self, value: Mapping[object, object], kind: int, active: set[int], depth: int
    ) -> dict[object, object]:
        try:
            logprobs = "logprob" in value
        except Exception:
            logprobs = False
        out: dict[object, object] = {}
        for k, v in value.items():
            if isinstance(k, str):
                own = _name_kind(k)
                if own != _NOT and not (logprobs and k == "token"):
                    child = max(own, kind)
                elif kind != _NOT and not _is_descriptive(k):
                    child = kind
                else:
                    child = _NOT
                out[self._known(k)] = self._data(v, child, active, depth)
            else:
                out[k] = self._data(v, kind, active, depth)
        return out
