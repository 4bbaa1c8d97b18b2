"""Key paths in config error messages, and the problem list every check appends to."""

from __future__ import annotations

import json
import re

Problems = list[tuple[str, str]]

_PLAIN_KEY_RE = re.compile(r"[^\s.\[\]\"']+")


def key_path(*parts: str | int) -> str:
    """Render a key path: ``key_path("models", "qwen", "aliases", 2) == "models.qwen.aliases[2]"``.

    Keys that would be ambiguous in dotted form (dots, spaces, brackets, empty) are quoted:
    ``models["qwen2.5"].cmd``.
    """
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY_RE.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out
