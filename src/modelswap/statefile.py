"""A JSON file in ``stateDir`` written whole or not at all: to a temporary file beside it, then
renamed over it, so a reader (or a gateway killed mid-write) never sees half a file.

A leaf: standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path


def write_json(path: Path, data: object, *, prefix: str) -> None:
    """Write ``data`` as JSON to ``path`` atomically (its folder made if missing). Raises
    OSError; the temporary file (named ``prefix``…) is removed whatever happens."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
