"""What ``modelswap serve`` keeps in ``stateDir`` (issue 38), read back from the file system:
every folder 0700 and every file 0600 — the backend record, the activity database with its
-wal and -shm, stats.json, capabilities.json, the prompt-cache index and the slot file the real
llama.cpp server saved — and unreadable to a second, unprivileged user; a stateDir left looser
is tightened at start, in one line, and ``modelswap audit`` flags it before. Never off after a
fault: corrupt files (garbage bytes) are moved aside and started afresh; a disk full at start
(a real one: a 2 MiB tmpfs, root only) drops activity rows with a counter and recording resumes
by itself once space returns."""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import REPO, Gateway, chat, fake_cmd, llamacpp_cmd, request
from tests.full_disk import fill, free, small_disk

pytestmark = pytest.mark.e2e

StartGateway = Callable[..., Gateway]
TIGHTENED = "made private to this user"
GARBAGE = b"\x8f\x00 not a database, not JSON \xff" * 300


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def modes(root: Path) -> dict[str, int]:
    """Every path under ``root`` (itself as ``.``) and its permission bits."""
    found = {".": mode(root)}
    for folder, folders, files in os.walk(root):
        for name in (*folders, *files):
            path = Path(folder, name)
            found[str(path.relative_to(root))] = mode(path)
    return found


def metric(gw: Gateway, name: str, label: str) -> float:
    """A sample of /metrics (0 when absent)."""
    text = request(gw, "GET", "/metrics").body.decode()
    found = re.search(rf"^{re.escape(name)}\{{{re.escape(label)}\}} (\S+)$", text, re.M)
    return float(found[1]) if found else 0.0


def activity(gw: Gateway) -> dict[str, Any]:
    return gw.get_json("/api/activity")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every user may enter (0755) outside pytest's own 0700 one: only the modes of
    what modelswap makes inside stand between it and another user."""
    folder = Path(tempfile.mkdtemp(prefix="modelswap-shared-"))
    os.chmod(folder, 0o755)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


NOBODY_READS = """
import os, sys
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").close()
        print("READ", path)
    except PermissionError:
        print("DENIED", path)
"""


def as_nobody(paths: list[Path]) -> dict[str, str]:
    """What the user ``nobody`` gets opening (or listing) each path: READ or DENIED."""
    done = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-c", NOBODY_READS, *map(str, paths)],
        user="nobody",
        group="nogroup",
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        cwd="/",
    )
    return {
        path: result for result, path in (line.split(" ", 1) for line in done.stdout.splitlines())
    }


SYSTEM_PYTHON = "/usr/bin/python3"  # one nobody may run (the worktree's .venv may not be)


def second_user_skip() -> str | None:
    if os.geteuid() != 0:
        return "switching to a second, unprivileged user (nobody) needs root"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"no {SYSTEM_PYTHON} for the user nobody to run"
    try:
        pwd.getpwnam("nobody")
        grp.getgrnam("nogroup")
    except KeyError:
        return "no user nobody (group nogroup) here"
    return None


def test_every_file_kept_is_its_user_s_alone_the_real_llamacpp_slot_included(
    gateway: StartGateway, shared_dir: Path
) -> None:
    state = shared_dir / "state"
    fresh = "disableKeepAlives: true"  # as tests/e2e/test_llamacpp_prompt_cache.py
    gw = gateway(
        f"  a:\n    promptCache: true\n    {fresh}\n    cmd: {llamacpp_cmd(2048)}\n"
        f"  b:\n    cmd: {fake_cmd()}\n",
        extra_top=f"stateDir: {state}\n",
    )
    story = " ".join(f"On day {i} the sea was calm." for i in range(10))
    assert chat(gw, "a", messages=[{"role": "user", "content": story}], max_tokens=4).status == 200
    assert chat(gw, "b").status == 200  # evicts a: its slot is saved by llama.cpp itself
    (saved,) = gw.running()["b"]["last_swap"]["prompt_cache"]["saved"]  # type: ignore[index]
    assert saved["slots"] == 1
    cache = state / "prompt-cache"
    expected = {
        "activity.sqlite3",
        "activity.sqlite3-wal",
        "activity.sqlite3-shm",
        "stats.json",
        "capabilities.json",
        f"backends/gateway-{gw.proc.pid}.json",
        "prompt-cache/index.json",
    }
    gw.wait_for(lambda: all((state / name).exists() for name in expected))
    gw.wait_for(lambda: any(p.suffix == ".bin" for p in cache.iterdir()))
    [slot] = [p for p in cache.iterdir() if p.suffix == ".bin"]

    found = modes(state)
    assert expected | {str(slot.relative_to(state))} <= set(found)
    folders = {".", "backends", "prompt-cache"}
    assert {name: bits for name, bits in found.items() if name in folders} == dict.fromkeys(
        folders, 0o700
    )
    assert {name: bits for name, bits in found.items() if name not in folders} == dict.fromkeys(
        set(found) - folders, 0o600
    ), found
    logs = request(gw, "GET", "/logs/b").body.decode()
    assert "umask=077" in logs  # what any backend writes is private from the start

    why = second_user_skip()
    if why is not None:
        pytest.skip(f"the modes are read back; {why}")
    paths = [state, *(state / name for name in sorted(found) if name != ".")]
    assert set(as_nobody(paths).values()) == {"DENIED"}
    # Even with every folder opened to others (0711: enter, not list), each file's own 0600
    # keeps it: the slot's tokens, the activity rows, the records.
    for name in folders:
        os.chmod(state / name, 0o711)
    try:
        files = [state / name for name in sorted(found) if name not in folders]
        assert as_nobody(files) == dict.fromkeys(map(str, files), "DENIED")
    finally:
        for name in folders:
            os.chmod(state / name, 0o700)


def audit(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "modelswap", "audit", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def test_a_loose_state_dir_is_flagged_by_audit_and_tightened_at_start_in_one_line(
    gateway: StartGateway, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    (state / "prompt-cache").mkdir(parents=True)
    (state / "stats.json").write_text('{"version": 1, "models": {}}')
    (state / "prompt-cache" / "index.json").write_text('{"version": 1, "files": []}')
    for path, bits in (
        (state, 0o755),
        (state / "prompt-cache", 0o755),
        (state / "stats.json", 0o644),
        (state / "prompt-cache" / "index.json", 0o644),
    ):
        os.chmod(path, bits)
    config = tmp_path / "audited.yaml"
    config.write_text(f"stateDir: {state}\nmodels:\n  m:\n    cmd: {fake_cmd()}\n")
    os.chmod(config, 0o600)

    before = audit(config)
    assert before.returncode == 1, before.stdout + before.stderr
    [line] = [x for x in before.stdout.splitlines() if x.startswith("HIGH") and "state:" in x]
    assert f"stateDir {state}: other local users may read or enter 4 of its paths" in line
    assert f"chmod -R go-rwx {state}" in line

    gw = gateway(f"  m:\n    cmd: {fake_cmd()}\n", extra_top=f"stateDir: {state}\n")
    assert chat(gw, "m").status == 200
    [said] = [x for x in gw.log().splitlines() if TIGHTENED in x]
    assert f"stateDir {state}: others could read or enter 4 of its paths" in said
    assert ".," in said
    assert "prompt-cache/index.json" in said
    assert "stats.json" in said
    found = modes(state)
    assert all(bits & 0o077 == 0 for bits in found.values()), found
    assert found["."] == found["prompt-cache"] == 0o700
    assert found["stats.json"] == found["prompt-cache/index.json"] == 0o600

    after = audit(config)
    assert after.returncode == 0, after.stdout + after.stderr
    assert f"INFO   state: stateDir {state} is private to its user" in after.stdout


def test_corrupt_state_files_are_moved_aside_and_started_afresh(
    gateway: StartGateway, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    (state / "prompt-cache").mkdir(parents=True)
    names = ("activity.sqlite3", "stats.json", "capabilities.json", "prompt-cache/index.json")
    for name in names:
        (state / name).write_bytes(GARBAGE)
    gw = gateway(f"  m:\n    cmd: {fake_cmd()}\n", extra_top=f"stateDir: {state}\n")
    assert chat(gw, "m").status == 200

    gw.wait_for(lambda: [row["model"] for row in activity(gw)["data"]] == ["m"])  # type: ignore[union-attr]
    listed = activity(gw)
    assert (listed["enabled"], listed["state"]) == (True, "recording")
    for name in names:
        [kept] = (state / name).parent.glob(f"{Path(name).name}.corrupt-*")
        assert kept.read_bytes() == GARBAGE, name
        assert re.fullmatch(r".*\.corrupt-\d{8}T\d{6}Z", kept.name)
    gw.wait_for(lambda: (state / "stats.json").is_file())  # a fresh one, saved after READY
    assert "m" in json.loads((state / "stats.json").read_text())["models"]
    assert gw.log().count("is corrupt") == len(names)  # each said once
    for file in ("activity", "stats", "capabilities", "prompt-cache-index"):
        assert metric(gw, "modelswap_state_files_moved_aside_total", f'file="{file}"') == 1


def test_a_disk_full_at_start_drops_counted_rows_and_recording_resumes_when_space_returns(
    gateway: StartGateway, tmp_path: Path
) -> None:
    with small_disk(tmp_path / "disk") as disk:
        filler = fill(disk)
        state = disk / "state"
        gw = gateway(f"  m:\n    cmd: {fake_cmd()}\n", extra_top=f"stateDir: {state}\n")
        assert chat(gw, "m").status == 200  # swaps and answers go on regardless
        listed = activity(gw)
        assert (listed["enabled"], listed["state"], listed["data"]) == (True, "unavailable", [])
        assert "full" in listed["reason"]
        dropped = 'reason="unavailable"'
        gw.wait_for(lambda: metric(gw, "modelswap_activity_rows_dropped_total", dropped) >= 1)
        stats = 'file="stats"'
        gw.wait_for(lambda: metric(gw, "modelswap_state_write_failures_total", stats) >= 1)
        assert not (state / "stats.json").exists()

        free(filler)
        gw.wait_for(lambda: activity(gw)["state"] == "recording")  # by itself: no restart
        assert chat(gw, "m").status == 200
        gw.wait_for(lambda: len(activity(gw)["data"]) == 1)  # type: ignore[arg-type]
        gw.wait_for(lambda: (state / "stats.json").is_file())  # the failed save, retried
        assert mode(state / "activity.sqlite3") == mode(state / "stats.json") == 0o600
        log = gw.log()
        assert log.count("rows are dropped") == 1  # said once, not at every try
        assert "recording again" in log
