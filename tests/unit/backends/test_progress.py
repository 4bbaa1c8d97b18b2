from __future__ import annotations

import pytest

from modelswap.backends.logtext import logical_lines, message, split_segments, text_lines
from modelswap.backends.progress import last_progress, recognise_progress
from modelswap.reported import Progress

ESC = "\x1b"
VLLM = "(EngineCore_DP0 pid=79) INFO 12-25 04:53:54 [gpu_model_runner.py:2602] "
COLOURED = f"{ESC}[1;36m(EngineCore_DP0 pid=79){ESC}[0;0m "

POSITIVE: list[tuple[str, str, int | None, int | None]] = [
    # vLLM weight loading
    (VLLM + "Starting to load model Qwen/Qwen3-8B...", "loading weights", None, None),
    (
        "Loading safetensors checkpoint shards:  50% Completed | 2/4 [00:01<00:01,  1.50it/s]",
        "loading weights",
        2,
        4,
    ),
    (VLLM + "Loading weights took 182.98 seconds", "loading weights", None, None),
    (
        VLLM + "Model loading took 58.2299 GiB memory and 199.672085 seconds",
        "loading weights",
        None,
        None,
    ),
    # llama.cpp
    ("load_tensors: offloaded 65/65 layers to GPU", "loading tensors", None, None),
    (
        "llama_model_loader: - kv   0:     general.architecture str  = qwen35",
        "loading tensors",
        None,
        None,
    ),
    # torch.compile
    (VLLM + "Dynamo bytecode transform time: 6.62 s", "compiling", None, None),
    (VLLM + "Compiling a graph for compile range (1, 8192) takes 29.61 s", "compiling", None, None),
    (VLLM + "Compiling a graph for dynamic shape takes 29.61 s", "compiling", None, None),
    (VLLM + "torch.compile takes 36.23 s in total", "compiling", None, None),
    (
        VLLM + "Using cache directory: /root/.cache/vllm/torch_compile_cache/x for vLLM's "
        "torch.compile",
        "compiling",
        None,
        None,
    ),
    # CUDA graphs
    (
        "(EngineCore_DP0 pid=79) Capturing CUDA graphs (mixed prefill-decode, PIECEWISE):  45%"
        "|████▌     | 23/51 [00:03<00:04,  6.10it/s]",
        "capturing graphs",
        23,
        51,
    ),
    (
        "Capturing CUDA graph shapes:  29%|██▊       | 10/35 [00:03<00:08,  2.93it/s]",
        "capturing graphs",
        10,
        35,
    ),
    (VLLM + "Graph capturing finished in 9 secs, took 0.66 GiB", "capturing graphs", None, None),
    # FlashInfer autotuner
    (
        "2025-12-25 04:53:55,211 - INFO - autotuner.py:256 - flashinfer.jit: [Autotuner]: "
        "Autotuning process starts ...",
        "autotuning",
        None,
        None,
    ),
    (
        "[AutoTuner]: Tuning fp4_gemm:  50%|█████     | 7/14 [00:00<00:00, 64.91profile/s]",
        "autotuning",
        7,
        14,
    ),
    # warm-up
    (
        "DeepGEMM warmup:  47%|████▋     | 594/1261 [03:10<02:52,  3.31it/s]",
        "warming up",
        594,
        1261,
    ),
    (VLLM + "Running kernel warmup for FlashInfer", "warming up", None, None),
    # profiling
    (VLLM + "Profiling CUDA graph memory: PIECEWISE=51 (largest=512)", "profiling", None, None),
    (VLLM + "Memory profiling takes 5.12 seconds", "profiling", None, None),
    # busy
    (
        "(EngineCore_DP0 pid=79) WARNING 12-25 04:55:01 [shm_broadcast.py:466] No available shared "
        "memory broadcast block found in 60 seconds. This typically happens when some processes "
        "are hanging.",
        "busy",
        None,
        None,
    ),
    # KV cache
    (VLLM + "GPU KV cache size: 211,936 tokens", "initializing KV cache", None, None),
    (VLLM + "Available KV cache memory: 19.40 GiB", "initializing KV cache", None, None),
    (
        "llama_kv_cache: size = 4352.00 MiB (131072 cells,  16 layers,  4/1 seqs)",
        "initializing KV cache",
        None,
        None,
    ),
    # server start
    (
        "(APIServer pid=1) INFO 12-25 04:56:00 [api_server.py:1647] Starting vLLM API server 0 on "
        "http://0.0.0.0:8000",
        "starting server",
        None,
        None,
    ),
    ("(APIServer pid=1) INFO:     Application startup complete.", "starting server", None, None),
    ("main: server is listening on http://127.0.0.1:8080", "starting server", None, None),
    ("main: model loaded", "starting server", None, None),
    (
        VLLM + "init engine (profile, create kv cache, warmup model) took 107.64 seconds",
        "starting server",
        None,
        None,
    ),
    # a generic tqdm bar
    (
        "Processing MoE weights:  45%|████▌     | 23/51 [00:03<00:04]",
        "processing moe weights",
        23,
        51,
    ),
    # ANSI colours around the prefix and the bar
    (
        f"{COLOURED}Capturing CUDA graphs (decode, FULL):  {ESC}[32m60%{ESC}[0m|██████    | 3/5",
        "capturing graphs",
        3,
        5,
    ),
    # \r redraws still in the line: the last one counts
    (
        "DeepGEMM warmup:   0%|          | 0/1261\rDeepGEMM warmup:  10%|█         | 126/1261\r",
        "warming up",
        126,
        1261,
    ),
]

NEGATIVE = [
    "(APIServer pid=1) INFO 12-25 04:56:00 [launcher.py:45] Route: /health, Methods: GET",
    VLLM + "Resolved architecture: Qwen3ForCausalLM",
    VLLM + "Using max model len 32768",
    '(APIServer pid=1) INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK',
    "srv  update_slots: all slots are idle",
    "print_info: file size   = 15.66 GiB (4.99 BPW)",
    VLLM + "GPU memory utilization is 90% of total",
    "",
    "\r\r",
    f"{ESC}[0m",
]


@pytest.mark.parametrize(("line", "phase", "done", "total"), POSITIVE)
def test_recognise_progress(line: str, phase: str, done: int | None, total: int | None) -> None:
    assert recognise_progress(line) == Progress(phase, done, total)


@pytest.mark.parametrize("line", NEGATIVE)
def test_ordinary_lines_are_not_progress(line: str) -> None:
    assert recognise_progress(line) is None


def test_tqdm_redraws_in_one_physical_line_become_lines() -> None:
    physical = (
        f"{COLOURED}Capturing CUDA graphs (decode, FULL):   0%|          | 0/51 [00:00<?, ?it/s]\r"
        f"{COLOURED}Capturing CUDA graphs (decode, FULL):  45%|████▌     | 23/51 [00:03<00:04]\r"
        f"{COLOURED}Capturing CUDA graphs (decode, FULL):  90%|█████████ | 46/51 [00:07<00:01]"
    )
    lines = list(logical_lines([physical]))
    assert len(lines) == 3
    assert all(line.startswith("(EngineCore_DP0 pid=79) Capturing") for line in lines)
    assert [recognise_progress(line) for line in lines] == [
        Progress("capturing graphs", 0, 51),
        Progress("capturing graphs", 23, 51),
        Progress("capturing graphs", 46, 51),
    ]
    assert last_progress(split_segments(physical)) == Progress("capturing graphs", 46, 51)


def test_a_log_line_glued_to_a_bar_is_cut_at_its_prefix() -> None:
    glued = (
        "(EngineCore_DP0 pid=79) Capturing CUDA graphs (decode, FULL):  45%|████▌     | 23/51 "
        "[00:03<00:04,  6.01it/s](EngineCore_DP0 pid=79) ERROR 12-25 07:04:59 [core.py:708] "
        "EngineCore failed to start."
    )
    first, second = text_lines(glued)
    assert first.endswith("6.01it/s]")
    assert (
        second
        == "(EngineCore_DP0 pid=79) ERROR 12-25 07:04:59 [core.py:708] EngineCore failed to start."
    )
    assert message(second) == "EngineCore failed to start."


@pytest.mark.parametrize(
    ("line", "text"),
    [
        (VLLM + "Starting to load model x...", "Starting to load model x..."),
        ("(APIServer pid=1) (EngineCore pid=2) hello", "hello"),
        ("(VllmWorker rank=0 pid=1186) INFO 05-14 22:40:25 [x.py:1] hi", "hi"),
        (
            "INFO 07-24 15:09:41 llm_engine.py:176] Initializing an LLM engine",
            "Initializing an LLM engine",
        ),
        (
            "2025-12-25 04:53:55,211 - INFO - autotuner.py:256 - flashinfer.jit: [Autotuner]: x",
            "flashinfer.jit: [Autotuner]: x",
        ),
        (
            "0.00.035.060 I llama_context: n_ctx         = 4096",
            "llama_context: n_ctx         = 4096",
        ),
        (f"{COLOURED}{ESC}[0;31mERROR{ESC}[0;0m 12-25 04:52:20 [core.py:708] boom", "boom"),
        ("ValueError: no prefix at all", "ValueError: no prefix at all"),
    ],
)
def test_message_strips_prefixes_and_headers(line: str, text: str) -> None:
    assert message(line) == text


def test_last_progress_scans_backwards() -> None:
    lines = [
        VLLM + "Starting to load model x...",
        "[AutoTuner]: Tuning fp4_gemm:  50%|█████     | 7/16 [00:00<00:00]",
        "(APIServer pid=1) INFO 12-25 04:56:00 [launcher.py:45] Route: /health, Methods: GET",
    ]
    assert last_progress(lines) == Progress("autotuning", 7, 16)
    assert last_progress(lines[2:]) is None
