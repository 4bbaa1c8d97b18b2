"""What modelswap keeps in ``stateDir``: private to its user, and never off after a fault.

* **Private** (issue 38): every folder made here is 0700 and every file 0600
  (:func:`make_private_dir`, :func:`write_json`); :func:`tighten` takes the group's and others'
  permissions off what an older modelswap (or a backend) left looser.
* **Written whole or not at all**: a JSON file goes to a temporary file beside it, then is
  renamed over it, so a reader (or a gateway killed mid-write) never sees half a file.
* **Never off**: :class:`StateFile` moves a corrupt file aside (kept, named with the time:
  :func:`move_aside`) and starts afresh, counts a failed write and tries again later, with a
  backoff, until one succeeds.

A leaf: standard library only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

log = logging.getLogger(__name__)

FOLDER_MODE = 0o700
FILE_MODE = 0o600
_OTHERS = 0o077  # the group's and everyone else's bits
RETRY_FIRST = 1.0  # seconds before a failed write is tried again, doubled each time ...
RETRY_MAX = 60.0  # ... up to this
CORRUPT = ".corrupt-"

T = TypeVar("T")


def make_private_dir(path: Path) -> None:
    """Make ``path`` and each missing folder above it, each 0700 (``mkdir(parents=True)``
    gives the parents the umask's mode, 0755 by default). Raises OSError."""
    missing: list[Path] = []
    here = path
    while not here.is_dir() and here.parent != here:
        missing.append(here)
        here = here.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile: by another gateway
            folder.mkdir(mode=FOLDER_MODE)


def write_json(path: Path, data: object, *, prefix: str) -> None:
    """Write ``data`` as JSON to ``path`` atomically, 0600 (``mkstemp``'s mode), its folder
    made 0700 if missing. Raises OSError; the temporary file (named ``prefix``…) is removed
    whatever happens."""
    make_private_dir(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def tighten_path(path: Path) -> bool:
    """Take the group's and others' permissions off ``path`` (a folder keeps 0700, a file
    its owner's bits) when this user owns it; links are left alone. True when it changed.
    Raises OSError (FileNotFoundError when it is gone)."""
    found = os.lstat(path)
    mode = stat.S_IMODE(found.st_mode)
    if not mode & _OTHERS or found.st_uid != os.geteuid():
        return False
    if stat.S_ISDIR(found.st_mode):
        os.chmod(path, FOLDER_MODE)
    elif stat.S_ISREG(found.st_mode):
        os.chmod(path, mode & 0o700)
    else:
        return False  # a link, a socket: not ours to change
    return True


KEPT = (
    "activity.sqlite3",  # and its -wal, -shm, and what was moved aside (.corrupt-…)
    "stats.json",
    "capabilities.json",
    "backends",
    "prompt-cache",
    ".stats-",  # a write under way
    ".capabilities-",
)
"""What modelswap keeps in ``stateDir`` (each a name's start): :func:`tighten` and :func:`loose`
look at these only, so a ``stateDir`` shared with other things (a home folder) keeps theirs."""


def _walk(root: Path) -> Iterable[Path]:
    """``root``, what of :data:`KEPT` is in it and everything under that, links not followed;
    nothing when ``root`` is no folder."""
    if not root.is_dir():
        return
    yield root
    for name in sorted(os.listdir(root)):
        if not name.startswith(KEPT):
            continue
        path = root / name
        yield path
        if path.is_dir() and not path.is_symlink():
            for folder, folders, files in os.walk(path):
                for inner in (*folders, *files):
                    yield Path(folder, inner)


def _relative(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path != root else "."


def tighten(root: Path) -> list[str]:
    """:func:`tighten_path` on ``root`` and what modelswap keeps in it (:data:`KEPT`, links not
    followed); the paths it changed, relative to ``root`` (``.`` for itself). What cannot be
    changed (gone meanwhile, a read-only file system) is skipped."""
    changed: list[str] = []
    for path in _walk(root):
        with contextlib.suppress(OSError):
            if tighten_path(path):
                changed.append(_relative(path, root))
    return sorted(changed)


def loose(root: Path) -> list[str]:
    """What of ``root`` and what modelswap keeps in it (:data:`KEPT`, links not followed) the
    group or others may read, write or enter, relative to ``root``; for ``modelswap audit``."""
    found: list[str] = []
    for path in _walk(root):
        with contextlib.suppress(OSError):
            info = os.lstat(path)
            if not stat.S_ISLNK(info.st_mode) and stat.S_IMODE(info.st_mode) & _OTHERS:
                found.append(_relative(path, root))
    return sorted(found)


def named_briefly(paths: Iterable[str], most: int = 6) -> str:
    """``a, b, c and 4 more``: a log line's list."""
    items = list(paths)
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def aside_name(path: Path, now: float | None = None) -> Path:
    """Where a corrupt ``path`` is kept: ``<name>.corrupt-<UTC time>`` beside it (a number
    added when that name is taken)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    target = path.with_name(f"{path.name}{CORRUPT}{stamp}")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}{CORRUPT}{stamp}-{number}")
    return target


def move_aside(path: Path, *, companions: Iterable[str] = (), now: float | None = None) -> Path:
    """Rename the corrupt ``path`` to :func:`aside_name` (kept for whoever wants to look),
    with each of its ``companions`` that exists (suffixes: SQLite's ``-wal``, ``-shm``) renamed
    to the same name with its suffix. Returns the new path; raises OSError."""
    target = aside_name(path, now)
    os.rename(path, target)
    for suffix in companions:
        with contextlib.suppress(FileNotFoundError):
            os.rename(f"{path}{suffix}", f"{target}{suffix}")
    return target


class StateFile:
    """One JSON file of ``stateDir`` that never turns its feature off (issue 38).

    :meth:`read` moves a file that cannot be parsed (or is not the shape ``check`` wants)
    aside and returns None, said once; :meth:`write` counts a failure (a full disk, a folder
    made read-only), says it once until a write succeeds, and asks the owner to save again
    after a backoff (:data:`RETRY_FIRST` doubling to :data:`RETRY_MAX`) while an event loop
    runs. What the owner keeps in memory stays served meanwhile."""

    def __init__(self, path: Path, *, prefix: str, what: str) -> None:
        self.path = path
        self.prefix = prefix
        self.what = what  # the metric's label: stats, capabilities, prompt-cache-index
        self.write_failures = 0
        self.moved_aside = 0
        self._failing = False
        self._retry: asyncio.TimerHandle | None = None
        self._backoff = RETRY_FIRST

    def read(self, check: Callable[[object], T]) -> T | None:
        """The file parsed and checked by ``check`` (which raises ValueError, TypeError,
        KeyError or AttributeError when the shape is wrong); None when it is missing,
        unreadable or corrupt (then moved aside)."""
        try:
            text = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:  # a permission, not a corrupt file: left where it is
            log.warning("cannot read %s (starting without it): %s", self.path, exc)
            return None
        try:
            return check(json.loads(text))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self._set_aside(exc)
            return None

    def _set_aside(self, why: Exception) -> None:
        try:
            kept = move_aside(self.path)
        except OSError as exc:
            log.warning("%s is corrupt (%s) and cannot be moved aside: %s", self.path, why, exc)
            return
        self.moved_aside += 1
        log.warning("%s is corrupt (%s): moved aside to %s; starting afresh", self.path, why, kept)

    def write(self, data: object, again: Callable[[], None]) -> bool:
        """Write ``data`` (:func:`write_json`); on failure count it and call ``again`` after a
        backoff (the owner saves what it holds then). True when written."""
        try:
            write_json(self.path, data, prefix=self.prefix)
        except OSError as exc:
            self.write_failures += 1
            if not self._failing:
                log.warning(
                    "cannot save %s (kept in memory; tried again until it can): %s",
                    self.path,
                    exc,
                )
            self._failing = True
            self._schedule(again)
            return False
        if self._failing:
            log.warning("%s saved again (%d failed writes before)", self.path, self.write_failures)
        self._failing = False
        self._backoff = RETRY_FIRST
        self.cancel()
        return True

    def _schedule(self, again: Callable[[], None]) -> None:
        if self._retry is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a CLI, a test): the next save tries again
        delay, self._backoff = self._backoff, min(self._backoff * 2, RETRY_MAX)

        def fire() -> None:
            self._retry = None
            again()

        self._retry = loop.call_later(delay, fire)

    @property
    def retry_pending(self) -> bool:
        return self._retry is not None

    def cancel(self) -> None:
        """Drop a pending retry (the owner closes, or a write just succeeded)."""
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
