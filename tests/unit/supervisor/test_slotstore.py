"""The saved slots' index (issue 30): names keyed by model and command, what makes a file
unfit to restore, the disk budget, and what the index forgets."""

from __future__ import annotations

import re
from pathlib import Path

from modelswap.supervisor.slotstore import (
    PENDING,
    SavedSlot,
    SlotStore,
    digest,
    file_name,
    over_budget,
    part_name,
    problem_with,
)


def entry(
    folder: Path, model: str = "a", key: str = "k1", slot: int = 0, **kw: object
) -> SavedSlot:
    values: dict[str, object] = {
        "name": file_name(model, key, slot),
        "folder": str(folder),
        "model": model,
        "key": key,
        "slot": slot,
        "tokens": 10,
        "bytes": 100,
        "digest": "sha256:x",
        "saved_at": 1.0,
        "used_at": 1.0,
    }
    values.update(kw)
    return SavedSlot(**values)  # type: ignore[arg-type]


def test_names_differ_by_model_command_and_slot_and_are_plain() -> None:
    names = {file_name(m, k, s) for m in ("a", "b") for k in ("k1", "k2") for s in (0, 1)}
    assert len(names) == 8
    for name in names:  # what llama-server accepts as a file name: no path, no leading dot
        assert re.fullmatch(r"modelswap-[0-9a-f]{24}-slot[01]\.bin", name)
    assert file_name("a", "k1", 0) == file_name("a", "k1", 0)
    part = part_name(file_name("a", "k1", 0), "beef")
    assert part.startswith("modelswap-")
    assert part.endswith(".bin")
    assert "/" not in part


def test_a_file_is_fit_only_for_its_model_and_command_at_its_size(tmp_path: Path) -> None:
    e = entry(tmp_path)
    assert problem_with(e, "a", "k1", 100) is None
    assert "model a" in (problem_with(e, "b", "k1", 100) or "")
    assert "another command" in (problem_with(e, "a", "k2", 100) or "")
    assert "missing" in (problem_with(e, "a", "k1", None) or "")
    assert "truncated" in (problem_with(e, "a", "k1", 99) or "")
    renamed = entry(tmp_path, name=file_name("a", "k2", 0))  # the index says k1, the name k2
    assert "another command" in (problem_with(renamed, "a", "k1", 100) or "")


def test_the_budget_drops_the_least_recently_used_first(tmp_path: Path) -> None:
    old = entry(tmp_path, slot=0, used_at=1.0, bytes=40)
    mid = entry(tmp_path, slot=1, used_at=2.0, bytes=40)
    new = entry(tmp_path, slot=2, used_at=3.0, bytes=40)
    assert over_budget([new, old, mid], 120) == []
    assert over_budget([new, old, mid], 119) == [old]
    assert over_budget([new, old, mid], 40) == [old, mid]
    assert over_budget([new, old, mid], 39) == [old, mid, new]  # none fits: all go


def test_the_index_survives_a_restart_and_unindexed_files_go(tmp_path: Path) -> None:
    root = tmp_path / "prompt-cache"
    root.mkdir()
    store = SlotStore(root)
    kept = root / file_name("a", "k1", 0)
    kept.write_bytes(b"x" * 100)
    stray = root / part_name(file_name("a", "k1", 1), "dead")  # a save nobody checked
    stray.write_bytes(b"partial")
    foreign = root / "someone-elses.bin"
    foreign.write_bytes(b"not ours")
    store.record(entry(root, digest=digest(kept)))
    store.record(entry(root, slot=3))  # its file was deleted by hand
    store.save()
    again = SlotStore(root)
    assert [e.name for e in again.entries("a")] == [kept.name]
    assert again.entries("a")[0].digest == digest(kept)
    assert not stray.exists()
    assert foreign.exists()  # never anyone else's file


def test_a_changed_command_or_a_cache_turned_off_drops_the_files(tmp_path: Path) -> None:
    root = tmp_path / "prompt-cache"
    root.mkdir()
    store = SlotStore(root)
    for model, key in (("a", "k1"), ("b", "k1"), ("c", "k1")):
        path = root / file_name(model, key, 0)
        path.write_bytes(b"x" * 100)
        store.record(entry(root, model=model, key=key))
    store.forget_changed({"a": "k1", "b": "k2"})  # b's command changed; c is off or gone
    assert [e.model for e in store.entries()] == ["a"]
    assert sorted(p.name for p in root.glob("modelswap-*")) == [file_name("a", "k1", 0)]


def test_keep_budget_deletes_the_oldest_files(tmp_path: Path) -> None:
    root = tmp_path / "prompt-cache"
    root.mkdir()
    store = SlotStore(root)
    for slot, used in ((0, 5.0), (1, 1.0)):
        (root / file_name("a", "k1", slot)).write_bytes(b"x" * 100)
        store.record(entry(root, slot=slot, used_at=used))
    dropped = store.keep_budget(150)
    assert [e.slot for e in dropped] == [1]
    assert not (root / file_name("a", "k1", 1)).exists()
    assert store.total_bytes() == 100


def test_a_file_saved_while_its_digest_was_taken_is_not_trusted_after_a_restart(
    tmp_path: Path,
) -> None:
    root = tmp_path / "prompt-cache"
    root.mkdir()
    store = SlotStore(root)
    path = root / file_name("a", "k1", 0)
    path.write_bytes(b"x" * 100)
    store.record(entry(root, digest=PENDING))  # the gateway stopped before the digest came
    store.save()
    assert SlotStore(root).entries() == []
    assert not path.exists()
