"""Backend trees recorded in the state directory: a further line of defence against orphans.

The orphan watchdog (:mod:`modelswap.supervisor.reaper`) ends a dead gateway's backends. If it
could not — it was killed too, or the machine went down between the gateway's death and its
scan — the next gateway on the same state directory finds what is left here and ends it.

Each gateway keeps one file, ``<stateDir>/backends/gateway-<pid>.json``, naming itself and each
backend it runs as ``(pid, create_time)`` pairs (a pid alone may have been recycled), with the
backend's process tree as last seen (the pid recorded is the backend's keeper, the tree's root)
and the tag in the backend's environment (:func:`tree.new_tag`), which finds a helper that
daemonised after the last look.
:meth:`BackendRecord.reap_leftovers`, at start, ends the recorded processes of every gateway
that is no longer alive — only those whose pid *and* creation time still match — and deletes
their files. A live gateway's file is never touched.

Writes are small, atomic (write + rename) and happen when a backend starts, stops, or its tree
changes. A state directory that cannot be written is logged once and then ignored: recording is
a safety net, never a reason to refuse serving.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import time
from pathlib import Path

import psutil

from modelswap.statefile import write_json
from modelswap.supervisor import tree

log = logging.getLogger(__name__)

GRACE_SECONDS = 1.5
_PREFIX = "gateway-"
_TMP_PREFIX = ".gateway-"  # a write under way (never matched by the glob of records)


def _key(pid: int) -> tree.ProcKey | None:
    try:
        return (pid, psutil.Process(pid).create_time())
    except psutil.Error:
        return None


class BackendRecord:
    """This gateway's record of its running backends (``directory=None``: records nothing).

    ``add`` / ``update`` / ``remove`` are called by :class:`ManagedProcess` as a backend starts,
    its tree changes and it is gone; they never raise."""

    def __init__(self, directory: Path | None) -> None:
        self._dir = directory
        self._me = _key(os.getpid())
        self._backends: dict[int, dict[str, object]] = {}
        self._trees: dict[int, frozenset[tree.ProcKey]] = {}
        self._warned = False

    @property
    def path(self) -> Path | None:
        return self._dir / f"{_PREFIX}{os.getpid()}.json" if self._dir is not None else None

    def add(self, model: str, pid: int, *, tag: str = "") -> None:
        key = _key(pid)
        if key is None:
            return  # already gone: nothing to record
        self._backends[pid] = {"model": model, "pid": pid, "create_time": key[1], "tag": tag}
        self._trees[pid] = frozenset({key})
        self._write()

    def update(self, pid: int, keys: set[tree.ProcKey]) -> None:
        """The backend's tree as last seen; written only when it changed."""
        if pid not in self._backends:
            return
        new = frozenset(keys) | self._trees.get(pid, frozenset())
        new = frozenset(tree.alive(set(new)))
        if new != self._trees.get(pid):
            self._trees[pid] = new
            self._write()

    def remove(self, pid: int) -> None:
        if self._backends.pop(pid, None) is None:
            return
        self._trees.pop(pid, None)
        self._write()

    def _write(self) -> None:
        path = self.path
        if path is None or self._me is None:
            return
        try:
            if not self._backends:
                path.unlink(missing_ok=True)
                return
            backends = [
                {**entry, "tree": sorted([list(k) for k in self._trees.get(pid, frozenset())])}
                for pid, entry in self._backends.items()
            ]
            data = {"gateway": {"pid": self._me[0], "create_time": self._me[1]}}
            # 0700 folder, 0600 file (issue 38): written whole, then renamed over the old one.
            write_json(path, {**data, "backends": backends}, prefix=_TMP_PREFIX)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "cannot record backend processes in %s (%s): if modelswap is killed and its "
                    "watchdog with it, the next start cannot end what they left",
                    path.parent,
                    exc.strerror or exc,
                )

    def reap_leftovers(self) -> list[str]:
        """End what dead gateways recorded here; one line per ended backend. Blocks up to
        :data:`GRACE_SECONDS` when something must be killed; call it off the event loop."""
        if self._dir is None or not self._dir.is_dir():
            return []
        ended: list[str] = []
        for path in sorted(self._dir.glob(f"{_PREFIX}*.json")):
            if path == self.path:
                continue  # a recycled pid of ours: overwritten on our first start
            try:
                data = json.loads(path.read_text())
                owner = data["gateway"]
                owner_key = (int(owner["pid"]), float(owner["create_time"]))
                backends = list(data["backends"])
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning("ignoring unreadable backend record %s: %s", path, exc)
                continue
            if tree.alive({owner_key}):
                continue  # that gateway still runs: its backends are its own
            ended += _end(backends, owner_key[0])
            with contextlib.suppress(OSError):
                path.unlink()
        return ended


def _parse(entry: object) -> tuple[tree.ProcKey, set[tree.ProcKey], str, str] | None:
    """One recorded backend: its (pid, create_time), its tree, its model, its tag ('' for
    none); None if malformed."""
    if not isinstance(entry, dict):
        return None
    try:
        root = (int(entry["pid"]), float(entry["create_time"]))
        keys = {(int(pid), float(created)) for pid, created in entry.get("tree") or []}
    except (KeyError, TypeError, ValueError):
        return None
    tag = entry.get("tag")
    return root, keys, str(entry.get("model")), tag if isinstance(tag, str) else ""


def _end(backends: list[object], gateway_pid: int) -> list[str]:
    """SIGTERM, then SIGKILL after a grace, every recorded process still alive as recorded."""
    keys: set[tree.ProcKey] = set()
    roots: list[tuple[int, str]] = []
    tags: list[str] = []
    for entry in backends:
        parsed = _parse(entry)
        if parsed is None:
            continue
        root, recorded, model, tag = parsed
        keys |= recorded | {root}
        if tag:
            tags.append(tag)
            keys |= {key for pid in tree.tagged(tag) if (key := _key(pid)) is not None}
        if tree.alive({root}):
            keys |= tree.snapshot(root[0])  # what the backend started since it was recorded
            roots.append((root[0], model))
    left = tree.alive(keys)
    if not left:
        return []
    for pid, _ in roots:
        tree.signal_group(pid, signal.SIGTERM)  # the backend's own session: pgid == pid
    tree.signal_all(left, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while tree.alive(left) and time.monotonic() < deadline:
        time.sleep(0.05)
    tree.signal_all(left, signal.SIGKILL)
    for tag in tags:  # forked since the scan above
        tree.end_tagged(tag)
    models = ", ".join(f"{model} (pid {pid})" for pid, model in roots) or "helpers only"
    line = (
        f"ended {len(left)} leftover processes of modelswap pid {gateway_pid}, which died "
        f"without stopping them: {models}"
    )
    log.warning("%s", line)
    return [line]
