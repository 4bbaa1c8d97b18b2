"""Which kernel mechanism keeps a backend's whole process tree within reach
(docs/architecture.md, "Process lifecycle").

Every backend runs under a keeper (:mod:`modelswap.supervisor.keeper_program`), a child subreaper:
orphans of the backend's tree reparent to it, and it ends them all before it exits. Where a
writable cgroup v2 subtree exists (:mod:`modelswap.supervisor.cgroups`) each backend also gets
its own cgroup, ended with ``cgroup.kill``, so no fork can outrun the kill. ``/api/security``
reports which one is active.

Processes a container daemon (Docker, Podman) owns are in neither: stopping those is the job of
the model's ``cmdStop``.
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from pathlib import Path

from modelswap.supervisor import cgroups, keeper_program

log = logging.getLogger(__name__)

SUBREAPER = "subreaper"
CGROUP = "cgroup"
NONE = "none"


def subreaper_supported() -> bool:
    """Whether prctl(PR_GET_CHILD_SUBREAPER) works here (asks only; changes nothing)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_int(0)
        option = ctypes.c_ulong(keeper_program.PR_GET_CHILD_SUBREAPER)
        zero = ctypes.c_ulong(0)
        return int(libc.prctl(option, ctypes.byref(value), zero, zero, zero)) == 0
    except (OSError, AttributeError):
        return False


@dataclass(frozen=True)
class Containment:
    """The mechanism in force; ``cgroup_base`` is where backends' cgroups go (cgroup only)."""

    mechanism: str
    detail: str
    cgroup_base: Path | None = None

    def as_dict(self) -> dict[str, object]:
        return {"mechanism": self.mechanism, "detail": self.detail}

    def new_cgroup(self, model: str) -> Path | None:
        """A fresh cgroup for one start of ``model``; None (the subreaper alone) if none can be
        made now."""
        if self.cgroup_base is None:
            return None
        try:
            return cgroups.make(self.cgroup_base, model)
        except OSError as exc:
            log.warning("model %s runs without its own cgroup: %s", model, exc)
            return None


def subreaper_only(why: str = "") -> Containment:
    if not subreaper_supported():
        return Containment(
            NONE,
            "prctl(PR_SET_CHILD_SUBREAPER) is not available here: a helper that leaves the "
            "backend's process tree is found only by the tree snapshots",
        )
    detail = (
        "each backend runs under a keeper that is a child subreaper "
        "(PR_SET_CHILD_SUBREAPER): orphaned helpers reparent to it and end with the backend"
    )
    return Containment(SUBREAPER, f"{detail}; no cgroup: {why}" if why else detail)


def detect() -> Containment:
    """A cgroup per backend if a cgroup v2 subtree is writable, else the subreaper alone."""
    base, why = cgroups.find_base(*cgroups.read_self())
    if base is None:
        return subreaper_only(why)
    swept = cgroups.sweep_stale(base)
    if swept:
        log.info("removed %d empty cgroups left by gateways no longer running", swept)
    return Containment(CGROUP, f"{why}; the keeper is also a child subreaper", base)
