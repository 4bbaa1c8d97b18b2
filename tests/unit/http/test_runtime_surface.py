"""http/ reads the runtime through its surface (docs/architecture.md, "Layers"): a model's
ModelStatus and the Runtime's commands, never the router's processes or another collaborator
the runtime builds. Attribute access is beyond import-linter, so this reads the source."""

from __future__ import annotations

import re
from pathlib import Path

import modelswap.http

HTTP = Path(modelswap.http.__file__).parent
# What the runtime builds and http/ must not reach into (the runtime's methods stand for them).
COLLABORATORS = (
    "router",
    "swaps",
    "plans",
    "capability_memory",
    "configured",
    "observer",
    "events",
    "performance",
    "launcher",
    "containment",
    "stats",
    "slot_store",
    "backend_record",
)
REACH = re.compile(
    r"\.processes\b|\brouter\.processes\b|\bruntime\.(?:" + "|".join(COLLABORATORS) + r")\b"
)


def test_http_never_reaches_into_the_runtimes_collaborators() -> None:
    found = [
        f"{path.relative_to(HTTP)}:{number}: {line.strip()}"
        for path in sorted(HTTP.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if REACH.search(line)
    ]
    assert not found, "\n".join(found)
