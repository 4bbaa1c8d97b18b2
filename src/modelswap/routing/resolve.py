"""Name resolution helpers shared by the router and the HTTP edge."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from modelswap.errors import MAX_MODEL_NAME_BYTES


def close_names(name: str, known: Iterable[str], limit: int = 3) -> list[str]:
    """Known names that look like ``name`` (for "did you mean" in a 404). A name longer than
    any model name may be gets none: difflib's cost grows with the product of the lengths."""
    if len(name) > MAX_MODEL_NAME_BYTES:
        return []
    known = [k for k in known if len(k) <= MAX_MODEL_NAME_BYTES]
    lowered = {k.lower(): k for k in known}
    close = difflib.get_close_matches(name.lower(), list(lowered), n=limit, cutoff=0.6)
    found = [lowered[c] for c in close]
    for k in known:  # a prefix or substring match is a strong hint too
        if len(found) >= limit:
            break
        if k not in found and (name.lower() in k.lower() or k.lower() in name.lower()):
            found.append(k)
    return found
