"""A real full disk for the tests of issue 38: a small tmpfs mounted for the test (root only;
elsewhere the test is skipped, saying why), filled to the last page by one file, and space
given back by deleting it. No fake: SQLite, ``write_json`` and llama.cpp meet ENOSPC from the
kernel itself."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

SIZE = "2m"
FILLER = ".filler"


def _mount(where: Path) -> str | None:
    """Mount a tmpfs of :data:`SIZE` at ``where``; None when done, else why not."""
    if os.geteuid() != 0:
        return "mounting a small tmpfs (a real full disk) needs root"
    if shutil.which("mount") is None:
        return "no mount(8) here"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE},mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    return None if done.returncode == 0 else f"cannot mount a tmpfs: {done.stderr.strip()}"


@contextlib.contextmanager
def small_disk(where: Path) -> Iterator[Path]:
    """A tmpfs of :data:`SIZE` at ``where`` for the block (skipped where one cannot be made)."""
    where.mkdir(parents=True, exist_ok=True)
    why = _mount(where)
    if why is not None:
        pytest.skip(why)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False, capture_output=True)


def fill(disk: Path) -> Path:
    """Take every free byte of ``disk`` with one file (its path returned): the next write that
    needs a page fails with ENOSPC."""
    filler = disk / FILLER
    chunk = b"\0" * (64 * 1024)
    with filler.open("ab", buffering=0) as out:
        for size in (len(chunk), 4096, 1):
            while True:
                try:
                    out.write(chunk[:size])
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    return filler


def free(filler: Path) -> None:
    """Give the space back."""
    filler.unlink()
