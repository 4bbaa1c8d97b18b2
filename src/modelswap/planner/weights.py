"""The weight files a configured command line will read: what a swap may prefetch.

The model is found as the planner finds it (:func:`~modelswap.planner.from_config.find_model_path`);
this adds the files around it that the backend loads too: every shard of a split GGUF
(``name-00001-of-00003.gguf``), llama.cpp's ``--mmproj`` and draft model, and a folder's
``*.safetensors`` (else ``*.bin``) files. Only files that exist are returned; nothing is read.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from modelswap.backends.configured import flag_values
from modelswap.planner.from_config import find_model_path

_EXTRA_FLAGS = {
    "--mmproj": "mmproj",
    "-mm": "mmproj",
    "--model-draft": "draft",
    "-md": "draft",
}
_SPLIT = re.compile(r"^(?P<stem>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)


def weight_files(argv: Sequence[str]) -> tuple[Path, ...]:
    """Every local weight file ``argv`` will load, in the order a backend reads them (the main
    model first); empty when the command names no local model (a Hugging Face id, a remote)."""
    model = find_model_path(argv)
    found: list[Path] = []
    if model is not None:
        found.extend(_folder_weights(model) if model.is_dir() else _gguf_shards(model))
    for text in flag_values(argv, _EXTRA_FLAGS).values():
        path = Path(os.path.expanduser(text))
        if path.is_file():
            found.append(path)
    unique: dict[Path, None] = {}
    for path in found:
        unique.setdefault(path, None)
    return tuple(unique)


def _gguf_shards(path: Path) -> list[Path]:
    """A split GGUF's shards (llama.cpp is given the first and opens the rest), else ``path``."""
    match = _SPLIT.match(path.name)
    if match is None:
        return [path]
    count = int(match["count"])
    shards = [
        path.with_name(f"{match['stem']}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)
    ]
    return [shard for shard in shards if shard.is_file()] or [path]


def _folder_weights(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))


def prefetch_summary(argv: Sequence[str], enabled: bool) -> dict[str, object]:
    """Whether a swap to the model ``argv`` serves reads its weights ahead (beside the drain
    and the stop of what it evicts), and how much: for the load dry run."""
    if not enabled:
        return {"will": False, "why": "prefetch: false"}
    files = weight_files(argv)
    if not files:
        return {"will": False, "why": "the command names no local weight files"}
    size = 0
    for path in files:
        with contextlib.suppress(OSError):
            size += path.stat().st_size
    return {"will": True, "files": len(files), "bytes": size}
