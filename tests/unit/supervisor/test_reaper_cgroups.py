"""Which cgroup paths the orphan watchdog takes from a ``+PID<TAB>CGROUP`` line
(supervisor/reaper.py, ``allowed_cgroup``): only a cgroup the gateway made, written plainly. The
directories are real ones under tmp_path; the watchdog's own end-to-end behaviour is in
tests/integration/test_reaper.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from modelswap.supervisor import cgroups
from modelswap.supervisor.reaper import allowed_cgroup

GATEWAY = 4242


def fake_cgroup(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "cgroup.procs").write_text("")
    return path


@pytest.fixture
def base(tmp_path: Path) -> Path:
    return fake_cgroup(tmp_path / "base")


def test_a_cgroup_the_gateway_made_is_taken(base: Path) -> None:
    ours = fake_cgroup(base / f"modelswap-{GATEWAY}-3-llama")
    assert allowed_cgroup(str(ours), [base], GATEWAY) == ours
    assert allowed_cgroup(str(ours), [base.parent / "other", base], GATEWAY) == ours


@pytest.mark.parametrize(
    "name",
    [
        "modelswap-4243-1-m",  # another gateway's
        "modelswap-x-1-m",
        "modelswap-4242",
        "other-4242-1-m",
        "system.slice",
    ],
)
def test_a_name_not_of_this_gateway_is_refused(base: Path, name: str) -> None:
    assert allowed_cgroup(str(fake_cgroup(base / name)), [base], GATEWAY) is None


def test_a_path_not_written_plainly_is_refused(base: Path, tmp_path: Path) -> None:
    ours = fake_cgroup(base / f"modelswap-{GATEWAY}-1-m")
    nested = fake_cgroup(ours / f"modelswap-{GATEWAY}-2-m")
    for text in [
        f"modelswap-{GATEWAY}-1-m",  # relative
        f"{base}/x/../modelswap-{GATEWAY}-1-m",
        f"{base}/modelswap-{GATEWAY}-1-m/..",
        f"{base}//modelswap-{GATEWAY}-1-m",
        f"{base}/./modelswap-{GATEWAY}-1-m",
        f"{ours}/",
        str(nested),  # not a direct child of the base
        "",
        "/",
    ]:
        assert allowed_cgroup(text, [base], GATEWAY) is None, text


def test_a_symlink_or_a_plain_directory_is_refused(base: Path, tmp_path: Path) -> None:
    elsewhere = fake_cgroup(tmp_path / "elsewhere")
    link = base / f"modelswap-{GATEWAY}-1-m"
    link.symlink_to(elsewhere, target_is_directory=True)
    assert allowed_cgroup(str(link), [base], GATEWAY) is None
    plain = base / f"modelswap-{GATEWAY}-2-m"
    plain.mkdir()  # no cgroup.procs: not a cgroup
    assert allowed_cgroup(str(plain), [base], GATEWAY) is None
    missing = base / f"modelswap-{GATEWAY}-3-m"
    assert allowed_cgroup(str(missing), [base], GATEWAY) is None


def test_no_base_no_cgroup(base: Path) -> None:
    ours = fake_cgroup(base / f"modelswap-{GATEWAY}-1-m")
    assert allowed_cgroup(str(ours), [], GATEWAY) is None


def test_owner_reads_the_gateway_pid_from_a_name() -> None:
    assert cgroups.owner("modelswap-17-2-qwen") == 17
    assert cgroups.owner("modelswap-17-2-spare") == 17
    assert cgroups.owner("modelswap-17-probe") is None
    assert cgroups.owner("user.slice") is None
