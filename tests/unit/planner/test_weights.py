"""weight_files: the files a configured command line will load (what a swap prefetches)."""

from __future__ import annotations

from pathlib import Path

from modelswap.planner.weights import weight_files


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF")
    return path


def test_a_gguf_its_mmproj_and_its_draft_model(tmp_path: Path) -> None:
    model = _touch(tmp_path / "m.gguf")
    mmproj = _touch(tmp_path / "mmproj.gguf")
    draft = _touch(tmp_path / "draft.gguf")
    argv = ["llama-server", "-m", str(model), "--mmproj", str(mmproj), "-md", str(draft)]
    assert weight_files(argv) == (model, mmproj, draft)


def test_every_shard_of_a_split_gguf(tmp_path: Path) -> None:
    shards = [_touch(tmp_path / f"big-{i:05d}-of-00003.gguf") for i in (1, 2, 3)]
    assert weight_files(["llama-server", "-m", str(shards[0])]) == tuple(shards)


def test_a_folders_safetensors_else_its_bin_files(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    _touch(folder / "config.json")
    parts = [_touch(folder / f"model-0000{i}-of-00002.safetensors") for i in (1, 2)]
    assert weight_files(["vllm", "serve", str(folder)]) == tuple(parts)
    old = tmp_path / "old"
    _touch(old / "config.json")
    binary = _touch(old / "pytorch_model.bin")
    assert weight_files(["vllm", "serve", str(old)]) == (binary,)


def test_no_local_model_no_files(tmp_path: Path) -> None:
    assert weight_files(["vllm", "serve", "Qwen/Qwen3-8B"]) == ()
    assert weight_files(["llama-server", "-m", str(tmp_path / "missing.gguf")]) == ()
