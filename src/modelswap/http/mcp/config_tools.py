"""The running configuration and its schema as tools (llama-swap's ``config__get_config`` and
``docs__get_config_schema``).

``config__get_config`` answers what ``GET /api/config`` answers (``config/export.py``, secrets
masked by the redactor), the whole of it or the part a dotted ``path`` names
(``models.qwen.cmd``; an id with dots in it is found whole). llama-swap takes a jq ``query``
there: its path forms (``.models["qwen-7b"].ttl``, ``.models | keys``) are read the same way;
other jq is refused with the equivalent path form. It needs the ``admin`` scope, as
``/api/config`` does.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from modelswap.config import config_json_schema
from modelswap.config.export import export_config
from modelswap.http.mcp.registry import ADMIN, Args, Caller, Tool, ToolError

MAX_SEGMENTS = 32
SHOWN_KEYS = 40  # keys named in a "not found" answer
_TOKEN = re.compile(r"""\.?\[\s*(?:"((?:[^"\\]|\\.)*)"|'([^']*)'|(-?\d+))\s*\]|\.?([^.\[\]]+)""")


def parse_path(text: str) -> tuple[list[str | int], bool]:
    """A dotted path or a jq path expression → its segments (dotted parts may still need
    joining: :func:`walk` joins them), and whether ``| keys`` followed."""
    text = text.strip()
    keys = False
    if (bar := text.rfind("|")) != -1:
        if text[bar + 1 :].strip() != "keys":
            raise ToolError(
                'Only paths are read here (`models.NAME.cmd`, `.models["a-b"]`, '
                "`.models | keys`), not other jq filters."
            )
        keys, text = True, text[:bar].strip()
    if text in ("", "."):
        return [], keys
    segments: list[str | int] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            raise ToolError(f"Cannot read the path at {text[pos : pos + 20]!r}.")
        quoted, single, index, bare = match.groups()
        if index is not None:
            segments.append(int(index))
        else:
            value = quoted if quoted is not None else single if single is not None else bare
            assert value is not None
            segments.append(value.replace('\\"', '"').strip())
        pos = match.end()
        if len(segments) > MAX_SEGMENTS:
            raise ToolError(f"A path has at most {MAX_SEGMENTS} parts.")
    return segments, keys


def walk(document: object, segments: list[str | int]) -> object:
    """The value at ``segments``; a name that is not a key is tried joined with the next ones
    (``qwen2`` + ``5-7b`` → ``qwen2.5-7b``), so model ids with dots need no quoting."""
    here, done, i = document, "", 0
    while i < len(segments):
        part = segments[i]
        if (
            isinstance(here, list)
            and isinstance(part, int | str)
            and str(part).lstrip("-").isdigit()
        ):
            index = int(part)
            if not -len(here) <= index < len(here):
                raise ToolError(f"{done or '.'} has {len(here)} items; there is no [{index}].")
            here, done, i = here[index], f"{done}[{index}]", i + 1
            continue
        if not isinstance(here, dict):
            raise ToolError(f"{done or '.'} is a value, not a section: nothing below it.")
        for j in range(len(segments), i, -1):
            name = ".".join(str(s) for s in segments[i:j])
            if name in here:
                here, done, i = here[name], f"{done}.{name}", j
                break
        else:
            known = ", ".join(list(here)[:SHOWN_KEYS]) or "none"
            raise ToolError(
                f"No key {str(part)[:64]!r} at {done or 'the top'}. Keys there: {known}."
            )
    return here


def _keys(value: object) -> object:
    if isinstance(value, dict):
        return list(value)
    if isinstance(value, list):
        return list(range(len(value)))
    raise ToolError("`| keys` needs a section or a list, not a single value.")


async def get_config(caller: Caller, args: Args) -> object:
    runtime = caller.runtime
    where = args.string("path") or args.string("query") or "."
    segments, keys = parse_path(where)
    document = export_config(runtime.config, runtime.redactor)
    value = walk(document, segments)
    return {"path": where, "value": _keys(value) if keys else value}


@functools.cache
def _schema() -> dict[str, Any]:
    return config_json_schema()


def _resolve(node: object, schema: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its ``$ref`` (and a one-entry ``allOf``/``anyOf`` wrapper) followed."""
    for _ in range(16):
        if not isinstance(node, dict):
            return {}
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            node = {
                **schema.get("$defs", {}).get(ref.split("/")[-1], {}),
                **{k: v for k, v in node.items() if k != "$ref"},
            }
            continue
        variants = [v for v in node.get("anyOf", []) if v.get("type") != "null"]
        if "properties" not in node and len(variants) == 1:
            node = {**variants[0], **{k: v for k, v in node.items() if k != "anyOf"}}
            continue
        return node
    return {}


def _child(node: dict[str, Any], part: str, schema: dict[str, Any]) -> dict[str, Any] | None:
    props = node.get("properties", {})
    if part in props:
        return _resolve(props[part], schema)
    extra = node.get("additionalProperties")
    if part == "*" and isinstance(extra, dict):
        return _resolve(extra, schema)
    return None


async def get_config_schema(caller: Caller, args: Args) -> object:
    schema = _schema()
    path = args.string("path") or ""
    node = _resolve(schema, schema)
    done: list[str] = []
    for part in [p for p in path.strip(".").split(".") if p]:
        child = _child(node, part, schema)
        if child is None:
            keys = ", ".join(node.get("properties", {})) or "none"
            star = " ('*' for one entry of the map)" if "additionalProperties" in node else ""
            raise ToolError(
                f"No key {part[:64]!r} at {'.'.join(done) or 'the top'}. Keys there: {keys}{star}."
            )
        node, done = child, [*done, part]
    out: dict[str, Any] = {"path": ".".join(done) or "(top level)"}
    for field in ("type", "description", "default", "enum", "required"):
        if field in node:
            out[field] = node[field]
    if isinstance(node.get("additionalProperties"), dict):
        out["entries"] = f"user-named; path '{'.'.join([*done, '*'])}' describes one"
    props = node.get("properties", {})
    if props:
        out["keys"] = {
            name: (_resolve(sub, schema).get("description") or "")[:160]
            for name, sub in props.items()
        }
    return out


GET_CONFIG = Tool(
    "config__get_config",
    "Read the running configuration",
    "The configuration modelswap runs now, resolved, with every secret masked — the whole "
    "of it or the part `path` names: `models` (a section), `models.NAME.cmd`, "
    "`.models | keys` (the model ids). llama-swap's jq `query` is read the same way for "
    "paths.",
    get_config,
    properties={
        "path": {"type": "string", "description": "Dotted path, e.g. 'models.qwen.ttl'."},
        "query": {"type": "string", "description": "llama-swap's form: '.models | keys'."},
    },
    scope=ADMIN,
    hint="Ask for one part: path 'models.NAME', or '.models | keys' for the ids.",
)
GET_SCHEMA = Tool(
    "docs__get_config_schema",
    "Look up a configuration key",
    "What a configuration key accepts: its type, description, default and the keys below "
    "it. `path` is dotted, '*' for one entry of a map (e.g. 'models.*.ttl'); empty for "
    "the top level. An unknown key is an error: that key does not exist.",
    get_config_schema,
    properties={"path": {"type": "string", "description": "e.g. 'models.*.ttl'."}},
    hint="Look up a deeper path.",
)
