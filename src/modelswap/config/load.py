"""Loading: file -> YAML -> llama-swap spellings rewritten (``compat``) -> shape validation
(pydantic) -> semantic checks -> :class:`Config`.

Every stage collects all the problems it finds and raises one :class:`ConfigError` naming each
by its dotted key path (``models.qwen.ttl``, ``models.qwen.aliases[2]``). A later stage runs
only when the earlier ones found nothing, because it needs their output.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Hashable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from modelswap.config.checks import build_config, parse_listen
from modelswap.config.compat import log_warnings, translate
from modelswap.config.macros import did_you_mean
from modelswap.config.paths import key_path
from modelswap.config.resolved import Config
from modelswap.config.schema import SHAPE_ERROR, RawConfig, RawModel, RawTimeouts, type_name
from modelswap.config.tree_macros import expand_tree
from modelswap.errors import ConfigError


def load_config(
    path: str | os.PathLike[str],
    *,
    environ: Mapping[str, str] | None = None,
    ports: Mapping[str, int] | None = None,
) -> Config:
    """Read and load the configuration file at ``path``. Raises :class:`ConfigError`.
    ``ports``: model id → port to keep (a reload keeps each model's ${PORT})."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([("", f"config file {os.fspath(path)} does not exist")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            [("", f"config file {os.fspath(path)} is not UTF-8 text: {exc.reason}")]
        ) from None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError([("", f"cannot read config file {os.fspath(path)}: {reason}")]) from None
    return load_config_text(text, source=os.fspath(path), environ=environ, ports=ports)


def load_config_text(
    text: str,
    *,
    source: str = "<string>",
    environ: Mapping[str, str] | None = None,
    extra_macros: Mapping[str, str] | None = None,
    ports: Mapping[str, int] | None = None,
) -> Config:
    """Load a configuration from YAML text. Raises :class:`ConfigError` listing every problem.

    ``environ`` is what ``${env.NAME}`` reads (default: ``os.environ``, read now).
    ``extra_macros`` are additional top-level macros; the file's own macros override them.
    llama-swap's spellings are read first (:mod:`modelswap.config.compat`); each of its keys that
    modelswap does not implement is logged once, as a warning, when the load succeeds.
    """
    env = dict(os.environ if environ is None else environ)
    data, anchor_keys = _parse_yaml(text)
    secrets = expand_tree(data, env)
    translation = translate(data, anchor_keys=anchor_keys)
    if translation.problems:
        raise ConfigError(list(translation.problems))
    raw = _validate(translation.data)
    config = build_config(
        raw,
        source=source,
        environ=env,
        extra_macros=dict(extra_macros or {}),
        compat=translation.mappings,
        ports=ports,
        secrets=secrets,
    )
    log_warnings(config.compat)
    return config


class _Loader(yaml.SafeLoader):
    """A safe loader that rejects duplicate keys (plain PyYAML keeps the last one silently)
    and remembers which nodes define an anchor (``&name``)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.anchored: set[int] = set()

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        anchor = None if isinstance(event, yaml.AliasEvent) else getattr(event, "anchor", None)
        node = super().compose_node(parent, index)
        if anchor is not None and node is not None:
            self.anchored.add(id(node))
        return node


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Hashable] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node)
        if isinstance(key, Hashable):
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _anchor_keys(loader: _Loader, root: yaml.Node | None) -> frozenset[str]:
    """Top-level keys whose value only holds YAML anchors for the rest of the file: it is
    anchored itself (``defaults: &defaults {...}``), or each of its entries is (``defs:
    {cmd: &cmd ...}``). llama-swap ignores such keys; they are read here only via ``*name``."""
    found: set[str] = set()
    if not isinstance(root, yaml.MappingNode):
        return frozenset()
    for key, value in root.value:
        if not isinstance(key, yaml.ScalarNode):
            continue
        if isinstance(value, yaml.MappingNode):
            items = [v for _, v in value.value]
        elif isinstance(value, yaml.SequenceNode):
            items = list(value.value)
        else:
            items = []
        if id(value) in loader.anchored or (
            items and all(id(item) in loader.anchored for item in items)
        ):
            found.add(str(key.value))
    return frozenset(found)


def _unreadable(text: str, exc: yaml.reader.ReaderError) -> str:
    """A character YAML does not allow, with its line and column (not a traceback)."""
    before = text[: exc.position]
    line, column = before.count("\n") + 1, exc.position - (before.rfind("\n") + 1) + 1
    return (
        f"invalid YAML at line {line}, column {column}: character U+{exc.character:04X} is not "
        "allowed (a control character; write it as an escape such as \\x01 in a "
        "double-quoted string, or remove it)"
    )


def _parse_yaml(text: str) -> tuple[dict[Any, Any], frozenset[str]]:
    """The YAML mapping, and its top-level keys that only hold anchors (``_anchor_keys``)."""
    try:
        loader = _Loader(text)  # it checks every character at once: a control one fails here
    except yaml.reader.ReaderError as exc:
        raise ConfigError([("", _unreadable(text, exc))]) from None
    try:
        root = loader.get_single_node()
        data = None if root is None else loader.construct_document(root)
        anchor_keys = _anchor_keys(loader, root)
    except yaml.reader.ReaderError as exc:
        raise ConfigError([("", _unreadable(text, exc))]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = exc.problem or exc.context or "syntax error"
        raise ConfigError([("", f"invalid YAML{where}: {problem}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([("", f"invalid YAML: {exc}")]) from None
    finally:
        loader.dispose()
    if data is None:
        raise ConfigError([("", "the configuration is empty; it needs `models` or `peers`")])
    if not isinstance(data, dict):
        raise ConfigError(
            [
                (
                    "",
                    f"the top level must be a mapping of keys (models, listen, ...), "
                    f"got {type_name(data)}",
                )
            ]
        )
    return data, anchor_keys


def _validate(data: dict[Any, Any]) -> RawConfig:
    try:
        return RawConfig.model_validate(data)
    except ValidationError as exc:
        errors = [e for e in (_untag(data, error) for error in exc.errors()) if e is not None]
        raise ConfigError(list(dict.fromkeys(_problem(error) for error in errors))) from None


_SCALAR_TAGS = frozenset({"str", "int", "float", "bool"})


def _untag(data: Any, error: ErrorDetails) -> ErrorDetails | None:
    """Errors under a ``str | Model`` union come once per member, with the member's name in the
    path (``apiKeys[0].str``, ``apiKeys[0].RawApiKey.scopes[0]``). Keep the member that matches
    what was written (a mapping: the model; anything else: the scalar), without its name."""
    loc = list(error["loc"])
    value = data
    for index, part in enumerate(loc):
        is_tag = isinstance(part, str) and (part in _SCALAR_TAGS or part.startswith("Raw"))
        if is_tag and not (isinstance(value, dict) and part in value):
            if (part in _SCALAR_TAGS) == isinstance(value, dict):
                return None  # the other member's complaint
            return {**error, "loc": tuple(loc[:index] + loc[index + 1 :])}
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return error
    return error


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "list_type": "a list",
    "dict_type": "a mapping",
    "model_type": "a mapping",
}


def _problem(error: ErrorDetails) -> tuple[str, str]:
    """One pydantic error as ``(dotted path, message)``."""
    loc = list(error["loc"])
    kind = error["type"]
    value = error.get("input")
    ctx = error.get("ctx") or {}
    if kind == SHAPE_ERROR:
        return key_path(*loc, *ctx.get("sub", ())), error["msg"]
    if loc and loc[-1] == "[key]":
        return key_path(*loc[:-1]), f"keys must be strings, got {type_name(value)}"
    if kind == "extra_forbidden":
        suggestion = did_you_mean(str(loc[-1]), _known_keys(tuple(loc[:-1])))
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        return key_path(*loc), f"unknown key{hint}"
    if kind == "missing":
        return key_path(*loc), "required key is missing"
    if kind in _EXPECTED:
        return key_path(*loc), f"expected {_EXPECTED[kind]}, got {type_name(value)}"
    if kind == "too_short" and loc == ["models"]:
        return "models", "at least one model is required"
    message = error["msg"].replace("Input should be", "must be", 1)
    return key_path(*loc), message


def _known_keys(loc: tuple[str | int, ...]) -> list[str]:
    """The YAML keys allowed in the mapping at ``loc``."""
    cls: type[BaseModel] | None = None
    if loc == ():
        cls = RawConfig
    elif len(loc) == 2 and loc[0] == "models":
        cls = RawModel
    elif len(loc) == 3 and loc[0] == "models" and loc[2] == "timeouts":
        cls = RawTimeouts
    if cls is None:
        return []
    return [info.alias or name for name, info in cls.model_fields.items()]


def override_listen(config: Config, listen: str) -> Config:
    """``config`` listening on ``listen`` instead (the ``--listen`` flag)."""
    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        raise ConfigError([("--listen", str(exc))]) from exc
    return dataclasses.replace(config, listen_host=host, listen_port=port, listen_given=True)
