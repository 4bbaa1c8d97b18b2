"""The keeper's own decisions, pinned without a real process (supervisor/keeper_program.py,
tree.py): how a backend's wait status becomes the keeper's own end, when the tree counts as gone
(wait results and cgroup.events injected), how the descendants are read from /proc (a fake /proc
under tmp_path), and how a tagged process is found. The real-process tests in
tests/integration/test_containment.py show the same rules at work; these fail on a one-line
bug in them (tools/mutate.py)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from modelswap.supervisor import keeper_program, tree

BACKEND = 4242
ORPHAN = 4343
CORE_DUMPED = 0x80


def exited(code: int) -> int:
    return code << 8


def killed(sig: int, *, core: bool = False) -> int:
    return sig | (CORE_DUMPED if core else 0)


# ---- the exit status -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "plan"),
    [
        (None, (1, 0)),  # never reaped: a failure, not a success
        (exited(0), (0, 0)),
        (exited(3), (3, 0)),
        (exited(255), (255, 0)),
        (killed(signal.SIGTERM), (128 + signal.SIGTERM, signal.SIGTERM)),
        (killed(signal.SIGKILL), (128 + signal.SIGKILL, signal.SIGKILL)),
        (killed(signal.SIGSEGV, core=True), (128 + signal.SIGSEGV, signal.SIGSEGV)),
        (killed(signal.SIGRTMIN + 2), (128 + signal.SIGRTMIN + 2, signal.SIGRTMIN + 2)),
    ],
)
def test_the_keeper_ends_as_the_backend_did(status: int | None, plan: tuple[int, int]) -> None:
    assert keeper_program.exit_plan(status) == plan


def test_every_exit_code_passes_through_unchanged() -> None:
    assert [keeper_program.exit_plan(exited(code)) for code in range(256)] == [
        (code, 0) for code in range(256)
    ]


# ---- the tree is gone when no child is left and the cgroup is empty ------------------------


def waits(
    *results: tuple[int, int] | type[ChildProcessError],
) -> Callable[[int, int], tuple[int, int]]:
    """A waitpid(-1, WNOHANG) that answers ``results`` in turn (a class: raised)."""
    queue = list(results)

    def waitpid(pid: int, options: int) -> tuple[int, int]:
        assert (pid, options) == (-1, os.WNOHANG)
        result = queue.pop(0)
        if isinstance(result, type):
            raise result()
        return result

    return waitpid


def test_a_child_still_running_means_the_tree_is_not_gone() -> None:
    assert keeper_program.reap_children(BACKEND, waits((0, 0))) == (None, False)


def test_the_backends_status_is_taken_and_no_child_left_means_gone() -> None:
    waitpid = waits((ORPHAN, exited(0)), (BACKEND, exited(7)), ChildProcessError)
    assert keeper_program.reap_children(BACKEND, waitpid) == (exited(7), True)


def test_an_orphans_exit_is_not_taken_for_the_backends() -> None:
    waitpid = waits((ORPHAN, killed(signal.SIGKILL)), (0, 0))
    assert keeper_program.reap_children(BACKEND, waitpid) == (None, False)


def test_the_backend_reaped_while_an_orphan_runs_is_not_gone() -> None:
    waitpid = waits((BACKEND, exited(0)), (0, 0))
    assert keeper_program.reap_children(BACKEND, waitpid) == (exited(0), False)


def cgroup(tmp_path: Path, populated: int) -> str:
    path = tmp_path / "modelswap-1-1-m"
    path.mkdir()
    (path / "cgroup.events").write_text(f"populated {populated}\nfrozen 0\n")
    return str(path)


def test_no_children_and_no_cgroup_is_gone() -> None:
    assert keeper_program.tree_gone(True, None)


def test_children_left_is_never_gone(tmp_path: Path) -> None:
    assert not keeper_program.tree_gone(False, None)
    assert not keeper_program.tree_gone(False, cgroup(tmp_path, 0))


def test_a_populated_cgroup_is_not_gone_even_with_no_child_left(tmp_path: Path) -> None:
    """A helper that left the keeper's tree (no subreaper) is still in the backend's cgroup."""
    assert not keeper_program.tree_gone(True, cgroup(tmp_path, 1))


def test_an_empty_or_removed_cgroup_is_gone(tmp_path: Path) -> None:
    assert keeper_program.tree_gone(True, cgroup(tmp_path, 0))
    assert keeper_program.tree_gone(True, str(tmp_path / "removed"))


# ---- descendants from a fake /proc -----------------------------------------------------------


def fake_proc(root: Path, children: dict[int, list[int]], *, children_files: bool) -> str:
    """A /proc with a task directory per process (one thread each) and its stat line; the
    ``children`` files only where the kernel has them."""
    parents = {kid: pid for pid, kids in children.items() for kid in kids}
    for pid in {*children, *parents}:
        task = root / str(pid) / "task" / str(pid)
        task.mkdir(parents=True)
        if children_files:
            (task / "children").write_text(" ".join(map(str, children.get(pid, []))) + " ")
        stat = f"{pid} (a (b) c) S {parents.get(pid, 1)} {pid} {pid} 0 -1"
        (root / str(pid) / "stat").write_text(stat)
    (root / "self").mkdir()
    return str(root)


TREE = {100: [101, 102], 101: [103], 103: [104, 105], 200: [201]}


@pytest.mark.parametrize("children_files", [True, False], ids=["children-files", "stat-scan"])
def test_descendants_are_every_generation_below_the_root(
    tmp_path: Path, children_files: bool
) -> None:
    proc = fake_proc(tmp_path, TREE, children_files=children_files)
    assert keeper_program.descendants(100, proc) == {101, 102, 103, 104, 105}
    assert keeper_program.descendants(103, proc) == {104, 105}
    assert keeper_program.descendants(105, proc) == set()


# ---- tags --------------------------------------------------------------------------------------


def environ(proc: Path, pid: int, *entries: str) -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "environ").write_bytes(b"".join(e.encode() + b"\0" for e in entries))


def test_only_the_exact_tag_is_found(tmp_path: Path) -> None:
    tag = tree.new_tag()
    environ(tmp_path, 10, "PATH=/bin", f"{tree.TAG_ENV}={tag}", "HOME=/")
    environ(tmp_path, 11, f"{tree.TAG_ENV}={tag}")  # the only entry
    environ(tmp_path, 12, f"{tree.TAG_ENV}={tag}.1")  # a longer tag: another backend's
    environ(tmp_path, 13, f"X{tree.TAG_ENV}={tag}")  # another variable's name
    environ(tmp_path, 14, f"A={tree.TAG_ENV}={tag}")  # inside another variable's value
    environ(tmp_path, 15)  # a zombie: its environment reads empty
    environ(tmp_path, os.getpid(), f"{tree.TAG_ENV}={tag}")  # never the gateway itself
    (tmp_path / "self").mkdir()
    assert tree.tagged(tag, str(tmp_path)) == {10, 11}


def stat(proc: Path, pid: int, state: str = "S", flags: int = 0x400000) -> None:
    """A ``/proc/PID/stat`` line: the name in parentheses, then state, ppid, …, flags."""
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    line = f"{pid} (a (b) c) {state} 1 {pid} {pid} 0 -1 {flags} 0 0 0 0 1 2 0 0 20 0 1 0 5\n"
    (proc / str(pid) / "stat").write_text(line)


def test_an_environment_read_in_the_middle_of_exec_is_read_again(tmp_path: Path) -> None:
    """Between two programs a live process's environment reads empty; once the new one is in
    place it holds the tag."""
    tag = tree.new_tag()
    environ(tmp_path, 20)  # mid-exec: empty for now
    stat(tmp_path, 20)
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:  # the exec completes after two looks
            environ(tmp_path, 20, "PATH=/bin", f"{tree.TAG_ENV}={tag}")

    assert tree.tagged(tag, str(tmp_path), sleep=sleep) == {20}
    assert len(waits) == 2


def test_empty_environments_that_stay_empty_cost_bounded_rereads(tmp_path: Path) -> None:
    tag = tree.new_tag()
    environ(tmp_path, 30)  # a kernel thread: never re-read
    stat(tmp_path, 30, flags=tree.PF_KTHREAD | 0x40)
    environ(tmp_path, 31)  # a zombie: never re-read
    stat(tmp_path, 31, state="Z")
    waits: list[float] = []
    assert tree.tagged(tag, str(tmp_path), sleep=waits.append) == set()
    assert waits == []
    environ(tmp_path, 32)  # a live process that cleared its environment: re-read, bounded
    stat(tmp_path, 32)
    assert tree.tagged(tag, str(tmp_path), sleep=waits.append) == set()
    assert len(waits) == tree.EXEC_REREADS


def test_tags_are_unique() -> None:
    tags = {tree.new_tag() for _ in range(1000)}
    assert len(tags) == 1000
    assert all(tag.startswith(f"{os.getpid()}.") for tag in tags)
