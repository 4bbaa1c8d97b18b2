"""Choosing the containment mechanism (supervisor/cgroups.py, containment.py) and the keeper's
wire format (supervisor/keeper_program.py). The texts are what /proc/self/mountinfo and
/proc/self/cgroup say on real machines; the directories are real ones under tmp_path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from modelswap.supervisor import cgroups, keeper_program
from modelswap.supervisor.containment import CGROUP, Containment, subreaper_only

V1_ONLY = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
"""
HYBRID = V1_ONLY + "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
UNIFIED = "29 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
# A container whose cgroup namespace is rooted at the payload's scope.
NAMESPACED = "612 600 0:26 /system.slice/box.scope /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n"
ESCAPED = r"50 23 0:40 / /mnt/my\040cgroups rw - cgroup2 none rw" + "\n"

USER_SCOPE = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/modelswap.scope\n"
V1_LINES = "9:name=systemd:/\n4:memory:/process_api/14bf\n"


def test_cgroup2_mounts_are_found_among_v1_ones() -> None:
    assert cgroups.cgroup2_mounts(V1_ONLY) == []
    assert cgroups.cgroup2_mounts(HYBRID) == [cgroups.Mount(Path("/sys/fs/cgroup/unified"), "/")]
    assert cgroups.cgroup2_mounts(UNIFIED) == [cgroups.Mount(Path("/sys/fs/cgroup"), "/")]
    assert cgroups.cgroup2_mounts(ESCAPED) == [cgroups.Mount(Path("/mnt/my cgroups"), "/")]


def test_own_cgroup_is_the_v2_line() -> None:
    assert cgroups.own_cgroup(V1_LINES + "0::/\n") == "/"
    assert cgroups.own_cgroup(USER_SCOPE) == USER_SCOPE[3:].strip()
    assert cgroups.own_cgroup(V1_LINES) is None  # a pure v1 kernel has no 0:: line


def test_candidates_place_our_cgroup_in_each_mount() -> None:
    own = "/user.slice/user-1000.slice/user@1000.service/app.slice/modelswap.scope"
    (mount,) = cgroups.cgroup2_mounts(UNIFIED)
    assert cgroups.candidates([mount], own) == [Path("/sys/fs/cgroup" + own)]
    (namespaced,) = cgroups.cgroup2_mounts(NAMESPACED)
    inside = "/system.slice/box.scope/payload"
    assert cgroups.candidates([namespaced], inside) == [Path("/sys/fs/cgroup/payload")]
    assert cgroups.candidates([namespaced], "/system.slice/other.scope") == []


@pytest.mark.parametrize(
    ("mountinfo", "proc_cgroup", "reason"),
    [
        pytest.param(V1_ONLY, V1_LINES + "0::/\n", "cgroup v1 only", id="v1-only"),
        pytest.param(UNIFIED, V1_LINES, "no cgroup v2 path", id="no-v2-line"),
        pytest.param(NAMESPACED, "0::/elsewhere\n", "outside every cgroup2 mount", id="outside"),
    ],
)
def test_find_base_says_why_there_is_no_cgroup(
    mountinfo: str, proc_cgroup: str, reason: str
) -> None:
    base, why = cgroups.find_base(mountinfo, proc_cgroup)
    assert base is None
    assert reason in why


def test_a_directory_that_is_not_a_cgroup_is_refused(tmp_path: Path) -> None:
    reason = cgroups.check_base(tmp_path)
    assert reason is not None
    assert "not a cgroup v2 directory" in reason


def test_a_cgroup_without_cgroup_kill_is_refused(tmp_path: Path) -> None:
    """A kernel before 5.14 has cgroup.procs but no cgroup.kill in a new child cgroup (a plain
    directory stands for it: mkdir there makes no cgroup files at all)."""
    (tmp_path / "cgroup.procs").write_text("")
    reason = cgroups.check_base(tmp_path)
    assert reason is not None
    assert "cgroup.kill" in reason
    assert list(tmp_path.iterdir()) == [tmp_path / "cgroup.procs"]  # the probe is removed


def test_a_mount_that_is_no_cgroup_falls_back_with_every_reason(tmp_path: Path) -> None:
    mountinfo = f"50 23 0:40 / {tmp_path} rw - cgroup2 none rw\n"
    base, why = cgroups.find_base(mountinfo, "0::/\n")
    assert base is None
    assert str(tmp_path) in why


def test_stale_cgroups_of_dead_gateways_are_swept_and_nothing_else(tmp_path: Path) -> None:
    dead = tmp_path / f"{cgroups.PREFIX}4194305-1-alpha"  # above pid_max: never alive
    mine = tmp_path / f"{cgroups.PREFIX}{os.getpid()}-1-beta"
    other = tmp_path / "not-ours"
    for directory in (dead, mine, other):
        directory.mkdir()
    assert cgroups.sweep_stale(tmp_path) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name])


def test_a_backend_cgroup_name_is_safe_and_unique(tmp_path: Path) -> None:
    first = cgroups.make(tmp_path, "org/model:7b q4")
    second = cgroups.make(tmp_path, "org/model:7b q4")
    assert first.parent == tmp_path
    assert first != second
    assert first.name.endswith("-org_model_7b_q4")


def test_the_report_names_mechanism_and_detail() -> None:
    found = subreaper_only("no cgroup2 file system is mounted (cgroup v1 only)")
    assert found.mechanism == "subreaper"  # Linux: PR_GET_CHILD_SUBREAPER works
    assert found.as_dict() == {"mechanism": "subreaper", "detail": found.detail}
    assert "cgroup v1 only" in found.detail
    assert found.new_cgroup("m") is None


def test_a_cgroup_containment_makes_one_cgroup_per_start(tmp_path: Path) -> None:
    found = Containment(CGROUP, "test", tmp_path)
    made = found.new_cgroup("m")
    assert made is not None
    assert made.parent == tmp_path
    assert Containment(CGROUP, "test", tmp_path / "missing").new_cgroup("m") is None


@pytest.mark.parametrize(
    "argv",
    [["llama-server"], ["sh", "-c", "echo 'a b'\nexit 3"], ["python", "--name=é", ""]],
)
@pytest.mark.parametrize("env", [None, {}, {"A": "1", "B": "x=y", "C": ""}])
def test_the_keeper_spec_round_trips(argv: list[str], env: dict[str, str] | None) -> None:
    spec = keeper_program.Spec(argv, 2.5, "/sys/fs/cgroup/modelswap-1-1-m", env)
    header, _, payload = keeper_program.encode_spec(spec).partition(b"\n")
    assert int(header) == len(payload)
    back = keeper_program.decode_spec(payload)
    assert (back.argv, back.grace, back.cgroup, back.env) == (argv, 2.5, spec.cgroup, env)
    plain = keeper_program.decode_spec(
        keeper_program.encode_spec(keeper_program.Spec(argv)).partition(b"\n")[2]
    )
    assert plain.cgroup is None
    assert plain.env is None


def test_a_spec_without_a_command_is_refused() -> None:
    with pytest.raises(ValueError, match="no command"):
        keeper_program.decode_spec(b"1.0\0\0-1")
