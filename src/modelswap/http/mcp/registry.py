"""Tools: what one is, who may call it, and the one way every result leaves (redacted, bounded).

A tool's handler returns text or JSON-ready data. The registry turns that into the text an agent
reads: data through the :class:`~modelswap.redact.Redactor` first, the whole text through it
again, then cut at :data:`MAX_RESULT_BYTES` with a line saying it was cut. A handler that cannot
answer raises :class:`ToolError` (or any domain error): the agent gets ``isError: true`` with
the reason, never a protocol error or an HTTP 500.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from modelswap.config.resolved import ApiKey
from modelswap.errors import ModelswapError
from modelswap.reload import ReloadReport
from modelswap.runtime import Runtime

log = logging.getLogger(__name__)

# A tool's result goes into a model's context window, often 8-32k tokens for a local one.
MAX_RESULT_BYTES = 16 * 1024
READ, ADMIN = "read", "admin"

Reload = Callable[[], ReloadReport | None]
_WHOLE = re.compile(r"-?[0-9]{1,18}")


class ToolError(Exception):
    """The tool ran and cannot answer: the message tells the agent what to do instead."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls: the runtime, the key (None without configured keys) and the config reload,
    where the gateway has a file to reload."""

    runtime: Runtime
    key: ApiKey | None
    reload: Reload | None = None

    def has_scope(self, scope: str) -> bool:
        if self.key is None:  # no apiKeys: every route is open (loopback only)
            return not self.runtime.config.api_keys
        return scope in self.key.scopes


class Args:
    """A call's ``arguments``, read leniently (a small model sends ``"5"`` for 5), each problem
    an error naming the argument."""

    def __init__(self, raw: object) -> None:
        if raw is None:
            raw = {}
        if not isinstance(raw, dict):
            raise ToolError("`arguments` must be an object.")
        self._raw: dict[str, object] = raw

    def string(self, name: str, default: str | None = None, *, limit: int = 1024) -> str | None:
        value = self._raw.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ToolError(f"`{name}` must be a string.")
        text = str(value).strip()
        if len(text) > limit:
            raise ToolError(f"`{name}` is longer than {limit} characters.")
        return text

    def required(self, name: str, hint: str) -> str:
        value = self.string(name)
        if value is None:
            raise ToolError(f"`{name}` is required. {hint}")
        return value

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        value = self._raw.get(name)
        if value is None or value == "":
            return default
        number: int | None = None
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, float) and value.is_integer():
            number = int(value)
        elif isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
            number = int(value.strip())
        if number is None:
            raise ToolError(f"`{name}` must be a whole number.")
        return max(low, min(high, number))


Handler = Callable[[Caller, Args], Awaitable[object]]


@dataclass(frozen=True, slots=True)
class Tool:
    """One tool. ``scope``: what the caller's key needs beyond the endpoint's ``read``;
    ``hint``: how to ask for less when its answer was cut."""

    name: str
    title: str
    description: str
    handler: Handler
    properties: dict[str, Any] = field(default_factory=dict)
    required: tuple[str, ...] = ()
    scope: str = READ
    read_only: bool = True
    idempotent: bool = True
    hint: str = "Ask for less (a narrower query, a smaller limit)."

    def listing(self) -> dict[str, Any]:
        """The ``tools/list`` entry."""
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = list(self.required)
        scope_note = f" Needs a key with the `{self.scope}` scope." if self.scope != READ else ""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description + scope_note,
            "inputSchema": schema,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                "idempotentHint": self.idempotent,
                "destructiveHint": not self.read_only,
                "openWorldHint": False,
            },
        }


@dataclass(frozen=True, slots=True)
class Outcome:
    """A tool's answer as the agent reads it."""

    text: str
    is_error: bool = False

    def result(self) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": self.text}], "isError": self.is_error}


def cap(text: str, limit: int = MAX_RESULT_BYTES, hint: str = "") -> tuple[str, bool]:
    """``text`` cut to at most ``limit`` UTF-8 bytes (at a line end where one is near), with a
    last line saying it was cut and how to ask for less; and whether it was."""
    raw = text.encode()
    if len(raw) <= limit:
        return text, False
    tail = f" of {len(raw)} bytes shown. {hint}".rstrip() + "]"
    room = max(0, limit - len(tail.encode()) - 40)  # 40: the newline, "[truncated: ", a count
    head = raw[:room].decode(errors="ignore")
    line_end = head.rfind("\n")
    if line_end > room // 2:
        head = head[:line_end]
    return f"{head}\n[truncated: {len(head.encode())}{tail}", True


class Registry:
    """The tools by name, in the order they were added (``tools/list`` keeps it)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"two tools named {tool.name}")
        self._tools[tool.name] = tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def names(self) -> list[str]:
        return list(self._tools)

    def listing(self) -> list[dict[str, Any]]:
        return [tool.listing() for tool in self._tools.values()]

    async def call(self, caller: Caller, name: str, arguments: object) -> Outcome:
        """Run ``name`` (known: the protocol checked) for ``caller``. Never raises for what the
        tool met: a refused scope, bad arguments, a domain error or a bug all come back as an
        error outcome, redacted like any answer."""
        tool = self._tools[name]
        redactor = caller.runtime.redactor
        if not caller.has_scope(tool.scope):
            who = caller.key.name if caller.key is not None else "this client"
            text = (
                f"{tool.name} needs a key with the `{tool.scope}` scope; the key in use "
                f"({who}) does not have it. Ask for a key with scopes [read, {tool.scope}]."
            )
            return Outcome(text, is_error=True)
        try:
            answer = await tool.handler(caller, Args(arguments))
        except (ToolError, ModelswapError) as exc:
            return Outcome(redactor.text(str(exc) or type(exc).__name__), is_error=True)
        except Exception as exc:  # a bug must not become a 500: the agent reads what failed
            log.exception("MCP tool %s failed", tool.name)
            return Outcome(f"{tool.name} failed inside modelswap ({type(exc).__name__}).", True)
        if isinstance(answer, str):
            text = answer
        else:
            text = json.dumps(redactor.data(answer), indent=1, ensure_ascii=False, default=str)
        return Outcome(cap(redactor.text(text), hint=tool.hint)[0])
