"""The one redaction layer: masks secrets in everything modelswap shows.

Every surface that shows text or data to a person or writes it to a log -- config export,
``/running`` command lines, the activity log, captured requests and headers, error messages,
gateway logs, diagnostics -- passes it through a :class:`Redactor` first. This module is a leaf:
it imports nothing from modelswap, only the standard library.

Two kinds of masking, applied together:

1. **Known values.** The caller hands the redactor every secret value it knows (API keys, values
   that came from ``${env.…}``, ``keyEnv``/``keyFile`` contents, upstream keys). Each occurrence
   is replaced by :data:`MASK`, longest secret first so a secret containing another is masked
   whole. Common encodings of each value are masked too: the whitespace-stripped value, its
   URL-quoted forms and its JSON-escaped form. Values shorter than ``min_length`` are not used as
   known values (masking ``"0"`` everywhere would destroy every text), but the shape rules below
   still apply to them.

2. **Shapes.** Whatever the value, these are masked:

   * URL userinfo: ``scheme://user:pass@host`` -> ``scheme://***@host`` (the whole userinfo,
     with or without a password);
   * query (or fragment) parameters with a secret-looking name, and ``sig``/``signature``:
     ``?api_key=X`` -> ``?api_key=***``;
   * header lines ``Authorization:``, ``Proxy-Authorization:``, ``x-api-key:``, ``api-key:``,
     ``Cookie:``, ``Set-Cookie:`` and any hyphenated header name that looks secret
     (``X-Auth-Token:``): the value up to the end of the line;
   * JSON / Python-repr pairs whose key looks secret: ``"api_key": "X"``, ``'token': 'X'``;
   * command-line flags whose name looks secret, ``--api-key X`` and ``--api-key=X`` (also
     ``-hft``, llama.cpp's short ``--hf-token``; single-letter flags are never considered, and
     ``--no-…``/``--enable-…``/``--disable-…`` switches take no value);
   * env-style pairs whose name looks secret: ``HF_TOKEN=X``, ``OPENAI_API_KEY=X``;
   * ``Bearer``/``Basic``/``Token`` credentials in prose, well-known token formats (``sk-…``,
     ``hf_…``, ``ghp_…``, ``github_pat_…``, ``xox?-…``, ``AKIA…``, ``AIza…``), and PEM private keys.

**Secret-looking names** (:func:`is_secret_name`). The name is split into words (camelCase,
``-``, ``_``, ``.`` and spaces separate words; case is ignored). It looks secret when the words,
joined, contain ``key``, ``token``, ``secret``, ``password``, ``passwd``, ``credential``,
``cookie`` or ``auth`` (``authorization`` included), or when the whole name is ``pass``, ``pwd``
or ``pw``. Words that merely mention a marker are dropped before that check, because what they
name is not a secret: ``tokens`` (token *counts*: ``max_tokens``, ``prompt_tokens``,
``kv_cache_tokens``, ``tokens_per_second``), any word containing ``tokeniz`` (``tokenizer``,
``tokenizer_path``), ``author(s)``, ``keyword(s)``, and the pairs ``key path``, ``key file``,
``key env`` (a path or an env var *name*; the contents are passed as known values) and
``token count/counts/id/ids/usage/limit/budget``. In :meth:`Redactor.data`, a ``token`` key
next to a ``logprob`` key (an OpenAI logprobs entry: generated text) is not a secret either.

**Structured input is masked by structure.** :meth:`Redactor.argv` masks the whole element after
a secret flag and everything after ``=`` in ``--flag=X`` / ``NAME=X`` elements;
:meth:`Redactor.headers` masks whole values; :meth:`Redactor.data` masks whole values under
secret-looking keys, whatever their type -- except ``None`` and booleans (they cannot carry a
secret, and ``allowUnauthenticatedNetwork: true`` is exactly what a security report must show).
A dict under a secret-looking key is walked rather than flattened, so ``apiKeys`` entries keep
their ``name``/``scopes``/``models``: inside it, only descriptive keys (see ``_DESCRIPTIVE``) are
shown, every other scalar is masked.

**Limits of free text.** In :meth:`Redactor.text` an unquoted flag/env/query value ends at
whitespace or a quote, so a secret with spaces is only fully masked when it is known, quoted, or
given structurally (argv element, header, data). Header lines are masked to the end of the line.
Masking is for display only: never feed redacted output back into a request.
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

_MARKERS = ("key", "token", "secret", "password", "passwd", "credential", "cookie", "auth")
_EXACT_SECRET = frozenset({"pass", "pwd", "pw"})
_HARMLESS_WORDS = frozenset({"tokens", "author", "authors", "keyword", "keywords"})
_HARMLESS_PAIRS = frozenset(
    {
        ("key", "path"),
        ("key", "file"),
        ("key", "env"),
        *(
            ("token", w)
            for w in ("count", "counts", "id", "ids", "usage", "limit", "budget", "logprob")
        ),
    }
)
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
_SWITCH_PREFIXES = frozenset({"no", "enable", "disable"})
_QUERY_EXTRA = frozenset({"sig", "signature"})
_BARE_KEEP = frozenset({"true", "false", "null", "none", "True", "False", "None"})

_CAMEL_ACRONYM = re.compile(r"([A-Z]+)([A-Z][a-z])")
_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NON_WORD = re.compile(r"[^a-z0-9]+")


def _words(name: str) -> list[str]:
    s = _CAMEL.sub(r"\1_\2", _CAMEL_ACRONYM.sub(r"\1_\2", name))
    return [w for w in _NON_WORD.split(s.lower()) if w]


@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    """Whether a key/flag/header/parameter name looks like it holds a secret (module docstring)."""
    words = _words(name)
    if "".join(words) in _EXACT_SECRET:
        return True
    kept: list[str] = []
    i = 0
    while i < len(words):
        if i + 1 < len(words) and (words[i], words[i + 1]) in _HARMLESS_PAIRS:
            i += 2
            continue
        w = words[i]
        if w not in _HARMLESS_WORDS and "tokeniz" not in w:
            kept.append(w)
        i += 1
    joined = "".join(kept)
    return any(m in joined for m in _MARKERS)


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
# Shape rules (compiled once)
# --------------------------------------------------------------------------------------------

_DQ = r'"(?:[^"\\\r\n]|\\.)*"'
_SQ = r"'(?:[^'\\\r\n]|\\.)*'"
_VALUE = rf"(?:{_DQ}|{_SQ}|[^\s\"']+)"

_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*\Z)",
    re.DOTALL,
)
_JSON_PAIR = re.compile(
    r"(?P<pre>(?P<q>[\"'])(?P<name>[^\"'\\\r\n]{1,100})(?P=q)[ \t]*:[ \t]*)"
    rf"(?P<value>[bru]?{_DQ}|[bru]?{_SQ}|[^\s,;}}\]\"'][^\s,;}}\]\"']*)"
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
    rf"(?P<pre>(?<![\w-])(?P<name>-{{1,2}}[A-Za-z][\w.-]*)(?:=|[ \t]+))(?P<value>{_VALUE})"
)
_ENV = re.compile(rf"(?P<pre>(?<![\w\-?&#])(?P<name>[A-Za-z_][A-Za-z0-9_.]*)=)(?P<value>{_VALUE})")
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

_Match = re.Match[str]


def _mask_value(value: str) -> str:
    """MASK, keeping the quotes (and a ``b``/``r``/``u`` prefix) of a quoted value."""
    body = value.lstrip("bru") if value[:1] in "bru" and value[1:2] in "\"'" else value
    if len(body) >= 2 and body[0] in "\"'" and body[-1] == body[0]:
        prefix = value[: len(value) - len(body)]
        return f"{prefix}{body[0]}{MASK}{body[0]}"
    return MASK


def _json_secret(m: _Match) -> bool:
    return m["value"] not in _BARE_KEEP and is_secret_name(m["name"])


def _flag_secret(m: _Match) -> bool:
    return _is_secret_flag(m["name"])


def _env_secret(m: _Match) -> bool:
    return is_secret_name(m["name"])


def _query_secret(m: _Match) -> bool:
    return bool(m["value"]) and _is_secret_query(m["name"])


def _cred_secret(m: _Match) -> bool:
    value = m["value"]
    return not (value.isalpha() and len(value) < 20)  # prose: "Bearer authentication"


def _pairs(regex: re.Pattern[str], secret: Callable[[_Match], bool]) -> Callable[[str], str]:
    """A rule masking group ``value`` where ``secret(match)``.

    A match that is not secret consumes only up to the end of its ``name``, so whatever its
    value pattern swallowed (``--verbose --api-key X``) is still examined.
    """

    def rule(s: str) -> str:
        out: list[str] = []
        pos = 0
        while (m := regex.search(s, pos)) is not None:
            if secret(m):
                out.append(s[pos : m.start("value")])
                out.append(_mask_value(m["value"]))
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
    (lambda s: ":" in s and ('"' in s or "'" in s), _pairs(_JSON_PAIR, _json_secret)),
    (lambda s: "-" in s and "," in s, _pairs(_QUOTED_FLAG_PAIR, _flag_secret)),
    (lambda s: "://" in s, lambda s: _USERINFO.sub(rf"\g<pre>{MASK}@", s)),
    (lambda s: "=" in s, _pairs(_QUERY, _query_secret)),
    (lambda s: ":" in s, _headers_in_text),
    (lambda s: "-" in s, _pairs(_FLAG, _flag_secret)),
    (lambda s: "=" in s, _pairs(_ENV, _env_secret)),
    (lambda s: "B" in s or "Tok" in s, _pairs(_SCHEME_CRED, _cred_secret)),
    (lambda s: True, lambda s: _TOKEN_SHAPES.sub(MASK, s)),
)
_URL_QUERY_RULE = _pairs(_QUERY_URL, _query_secret)


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
            values.update(v for v in _variants(s) if len(v) >= min_length and v)
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
        """Known secrets, then every shape rule (module docstring)."""
        s = self._known(_as_str(text))
        if not s:
            return s
        for applies, rule in _TEXT_RULES:
            if applies(s):
                s = rule(s)
        return s

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

        Values under secret-looking keys are masked whatever their type, except ``None`` and
        booleans; other strings go through :meth:`text`; other scalars are unchanged. Dict keys
        are kept, with known secrets masked in them.
        """
        return self._data(value, False, set(), 0)

    def _data(self, value: object, secret: bool, active: set[int], depth: int) -> object:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return MASK if secret else self.text(value)
        if isinstance(value, int | float):
            return MASK if secret else value
        if depth >= _MAX_DEPTH or id(value) in active:
            return MASK
        if isinstance(value, Mapping):
            active.add(id(value))
            try:
                return self._mapping(value, secret, active, depth + 1)
            finally:
                active.discard(id(value))
        if isinstance(value, list | tuple | set | frozenset):
            active.add(id(value))
            try:
                return [self._data(v, secret, active, depth + 1) for v in value]
            finally:
                active.discard(id(value))
        return MASK if secret else value

    def _mapping(
        self, value: Mapping[object, object], secret: bool, active: set[int], depth: int
    ) -> dict[object, object]:
        try:
            logprobs = "logprob" in value
        except Exception:
            logprobs = False
        out: dict[object, object] = {}
        for k, v in value.items():
            if isinstance(k, str):
                if is_secret_name(k) and not (logprobs and k == "token"):
                    child_secret = True
                elif secret:
                    child_secret = not _is_descriptive(k)
                else:
                    child_secret = False
                out[self._known(k)] = self._data(v, child_secret, active, depth)
            else:
                out[k] = self._data(v, secret, active, depth)
        return out
