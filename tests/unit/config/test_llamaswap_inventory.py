"""The llama-swap key inventory stays true (issue 29): every key of llama-swap's config structs
(tests/data/llamaswap-struct-keys.yaml, written from its newest internal/config/*.go) has a row
in docs/llamaswap-keys.md, no row names a key llama-swap does not have, and each row's status
is what modelswap does with a config holding that key: ``same`` and ``different`` load without
a warning about it, ``warned`` loads with one, ``refused`` does not load."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from modelswap.config import load_config_text
from modelswap.errors import ConfigError

REPO = Path(__file__).resolve().parents[3]
KEYS = yaml.safe_load((REPO / "tests" / "data" / "llamaswap-struct-keys.yaml").read_text())
DOC = REPO / "docs" / "llamaswap-keys.md"
STATUSES = ("same", "different", "warned", "refused")
ROW_RE = re.compile(r"^\| `([^`]+)` \| (\w+) \| (.*) \|$")
# The id standing for `*` in each map, and what such an entry needs to exist at all.
IDS = {"models": "m", "peers": "p", "selectors": "s", "profiles": "d", "groups": "g"}
NEEDS: dict[str, dict[str, Any]] = {
    "models": {"cmd": "srv --port ${PORT}"},
    "peers": {"proxy": "http://127.0.0.1:9", "models": ["far"]},
    "selectors": {"targets": ["m"]},
    "profiles": {"pins": {"x": "m"}},
    "groups": {"members": ["m"]},
}


def rows() -> dict[str, tuple[str, str]]:
    """The doc's table: key -> (status, what modelswap does)."""
    found: dict[str, tuple[str, str]] = {}
    for line in DOC.read_text().splitlines():
        match = ROW_RE.match(line)
        if match:
            assert match.group(1) not in found, f"{match.group(1)} has two rows"
            found[match.group(1)] = (match.group(2), match.group(3).strip())
    return found


def merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


def config_with(name: str) -> tuple[str, dict[str, Any]]:
    """The key of entry ``name`` and a config holding it (with what it needs)."""
    entry = KEYS[name]
    key = entry.get("key", name)
    data: dict[str, Any] = {"models": {"m": dict(NEEDS["models"])}}
    parts = key.split(".")
    if parts[0] in IDS and len(parts) > 1 and parts[1] == "*":
        parts[1] = IDS[parts[0]]
        data.setdefault(parts[0], {})[parts[1]] = copy.deepcopy(NEEDS[parts[0]])
    merge(data, entry.get("with", {}))
    node = data
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = copy.deepcopy(entry["value"])
    return key, data


def generic(path: str) -> str:
    """``models.m.timeouts.x`` -> ``models.*.timeouts.x`` (list indexes dropped)."""
    parts = re.sub(r"\[\d+\]", "", path).split(".")
    if len(parts) > 1 and parts[0] in IDS and parts[1] == IDS[parts[0]]:
        parts[1] = "*"
    return ".".join(parts)


def outcome(name: str) -> str:
    key, data = config_with(name)
    try:
        config = load_config_text(yaml.safe_dump(data, sort_keys=False), environ={})
    except ConfigError:
        return "refused"
    warned = {generic(m.source) for m in config.compat if m.warning}
    related = [w for w in warned if w == key or w.startswith(f"{key}.") or key.startswith(f"{w}.")]
    return "warned" if related else "loaded"


def test_every_struct_key_has_a_row_and_every_row_a_struct_key() -> None:
    table = rows()
    assert sorted(set(KEYS) - set(table)) == [], "keys of llama-swap's structs with no row"
    assert sorted(set(table) - set(KEYS)) == [], "rows for keys llama-swap does not have"


@pytest.mark.parametrize("name", list(KEYS))
def test_each_row_says_what_modelswap_does(name: str) -> None:
    status, text = rows()[name]
    assert status in STATUSES, status
    assert text, f"{name}: say what modelswap does"
    expected = {"same": "loaded", "different": "loaded"}.get(status, status)
    assert outcome(name) == expected, f"{name}: the table says {status}"
