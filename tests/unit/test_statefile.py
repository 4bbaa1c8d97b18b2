"""stateDir's files (issue 38): private to their user (folders 0700, files 0600, read back
from the file system), a loose tree tightened, a corrupt file moved aside and kept, a failed
write (a real full disk: a small tmpfs) counted and retried until space returns."""

from __future__ import annotations

import asyncio
import calendar
import json
import logging
import os
import stat
import time
from pathlib import Path

import pytest
from tests.full_disk import fill, free, small_disk

from modelswap import statefile
from modelswap.statefile import (
    StateFile,
    aside_name,
    loose,
    make_private_dir,
    move_aside,
    tighten,
    write_json,
)

HANG = 30.0


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_make_private_dir_makes_each_missing_folder_0700(tmp_path: Path) -> None:
    target = tmp_path / "home" / ".local" / "state" / "modelswap"
    make_private_dir(target)
    for folder in (tmp_path / "home", target.parent.parent, target.parent, target):
        assert mode(folder) == 0o700, folder
    make_private_dir(target)  # there already: nothing changes, nothing raised
    assert mode(target) == 0o700


def test_make_private_dir_leaves_a_folder_that_exists_alone(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir(mode=0o755)
    os.chmod(tmp_path / "shared", 0o755)
    make_private_dir(tmp_path / "shared" / "mine")
    assert mode(tmp_path / "shared") == 0o755  # not ours to change: only what is made
    assert mode(tmp_path / "shared" / "mine") == 0o700


def test_write_json_writes_a_0600_file_in_a_0700_folder_whatever_the_umask(
    tmp_path: Path,
) -> None:
    old = os.umask(0o000)  # the loosest: nothing may come from the umask
    try:
        path = tmp_path / "state" / "stats.json"
        write_json(path, {"a": 1}, prefix=".stats-")
    finally:
        os.umask(old)
    assert json.loads(path.read_text()) == {"a": 1}
    assert (mode(path.parent), mode(path)) == (0o700, 0o600)
    assert [p.name for p in path.parent.iterdir()] == ["stats.json"]  # no temporary left


def test_tighten_takes_others_bits_off_what_modelswap_keeps_and_names_it(tmp_path: Path) -> None:
    root = tmp_path / "state"
    (root / "prompt-cache").mkdir(parents=True)
    (root / "backends").mkdir()
    files = {
        "stats.json": 0o644,
        "activity.sqlite3-wal": 0o644,
        "prompt-cache/modelswap-x-slot0.bin": 0o664,
        "prompt-cache/index.json": 0o600,
        "backends/gateway-1.json": 0o640,
        "run.sh": 0o755,
    }
    for name, bits in files.items():
        (root / name).write_text("x")
        os.chmod(root / name, bits)
    for folder, bits in ((root, 0o755), (root / "prompt-cache", 0o775), (root / "backends", 0o700)):
        os.chmod(folder, bits)
    outside = tmp_path / "elsewhere.txt"
    outside.write_text("not ours to change")
    os.chmod(outside, 0o644)
    (root / "prompt-cache" / "link").symlink_to(outside)

    ours = [
        ".",
        "activity.sqlite3-wal",
        "backends/gateway-1.json",
        "prompt-cache",
        "prompt-cache/modelswap-x-slot0.bin",
        "stats.json",
    ]
    assert loose(root) == ours
    assert tighten(root) == ours
    assert mode(root) == mode(root / "prompt-cache") == mode(root / "backends") == 0o700
    assert mode(root / "stats.json") == mode(root / "prompt-cache/modelswap-x-slot0.bin") == 0o600
    assert mode(root / "run.sh") == 0o755  # not modelswap's: a shared stateDir keeps it
    assert mode(outside) == 0o644  # a link is never followed
    assert loose(root) == []
    assert tighten(root) == []  # said once: nothing left to change


def test_move_aside_keeps_the_file_and_its_companions_named_with_the_time(
    tmp_path: Path,
) -> None:
    db = tmp_path / "activity.sqlite3"
    for suffix, text in (("", "garbage"), ("-wal", "wal"), ("-shm", "shm")):
        Path(f"{db}{suffix}").write_text(text)
    at = calendar.timegm((2026, 12, 7, 22, 30, 0, 0, 0, 0))
    kept = move_aside(db, companions=("-wal", "-shm"), now=at)
    assert kept.name == "activity.sqlite3.corrupt-20261207T223000Z"
    assert kept.read_text() == "garbage"
    assert Path(f"{kept}-wal").read_text() == "wal"
    assert Path(f"{kept}-shm").read_text() == "shm"
    assert not db.exists()
    db.write_text("again")
    assert aside_name(db, at).name == "activity.sqlite3.corrupt-20261207T223000Z-2"


def _models(data: object) -> dict[str, object]:
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise ValueError("not a state file")
    return data["models"]


@pytest.mark.parametrize("content", [b"", b"\xff\xfe garbage", b"{", b"[]", b'{"models": 3}'])
def test_a_corrupt_file_is_moved_aside_once_and_the_next_write_starts_afresh(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "stats.json"
    path.write_bytes(content)
    file = StateFile(path, prefix=".stats-", what="stats")
    with caplog.at_level(logging.WARNING):
        assert file.read(_models) is None
    [kept] = tmp_path.glob("stats.json.corrupt-*")
    assert kept.read_bytes() == content
    assert file.moved_aside == 1
    assert caplog.text.count("is corrupt") == 1
    assert file.write({"models": {"m": 1}}, lambda: None)
    assert file.read(_models) == {"m": 1}
    assert mode(path) == 0o600


def test_an_unreadable_file_is_left_where_it_is(tmp_path: Path) -> None:
    path = tmp_path / "stats.json"
    path.mkdir()  # a folder where the file should be: reading fails, nothing is corrupt
    file = StateFile(path, prefix=".stats-", what="stats")
    assert file.read(_models) is None
    assert path.is_dir()
    assert file.moved_aside == 0


async def test_a_write_on_a_full_disk_is_counted_and_retried_until_space_returns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(statefile, "RETRY_FIRST", 0.05)  # the backoff's start, not the fault
    with small_disk(tmp_path / "disk") as disk:
        path = disk / "state" / "stats.json"
        file = StateFile(path, prefix=".stats-", what="stats")
        filler = fill(disk)
        saves = 0

        def save() -> None:
            nonlocal saves
            saves += 1
            file.write({"models": {"saves": saves}}, save)

        with caplog.at_level(logging.WARNING):
            save()
            deadline = time.monotonic() + HANG
            while file.write_failures < 3:  # tried again by itself, each time failing
                assert time.monotonic() < deadline, "no retry"
                await asyncio.sleep(0.01)
            assert not path.exists()
            free(filler)
            while not path.exists():
                assert time.monotonic() < deadline, "not written once space returned"
                await asyncio.sleep(0.01)
        assert _models(json.loads(path.read_text()))["saves"] == saves
        assert mode(path) == 0o600
        assert caplog.text.count("cannot save") == 1  # said once, not at every retry
        assert "saved again" in caplog.text
        assert not file.retry_pending  # none left running once a write succeeded
