from __future__ import annotations

import signal

import pytest

from modelswap.backends.diagnose import (
    GenericDiagnoser,
    diagnose_ceiling,
    diagnose_exit,
    diagnose_port_taken,
    diagnose_silence,
    diagnose_spawn_error,
    diagnose_text,
    diagnose_timeout,
    fit_notices,
    missing_tool_flags,
    tool_choice_hint,
)
from modelswap.reported import Progress


def test_diagnose_llamacpp_model_load_error_names_the_line() -> None:
    lines = [
        "srv    load_model: loading model '/m/x.gguf'",
        "llama_model_load: error loading model: tensor 'blk.0' data is not within file bounds",
        "main: exiting due to model loading error",
    ]
    d = diagnose_exit(lines, 1, during="startup")
    assert d.code == "model_load_error"
    # The root cause, not the wrapper line printed after it.
    assert d.evidence == lines[1]
    assert "exited with code 1 during startup" in d.summary
    assert d.fix
    assert d.numbers == {"returncode": 1.0}


def test_diagnose_port_in_use_wins_over_a_later_generic_error() -> None:
    lines = [
        "couldn't bind HTTP server socket, hostname: 127.0.0.1, port: 5800",
        "RuntimeError: Failed to init server",
    ]
    assert diagnose_exit(lines, 1, during="startup").code == "port_in_use"


def test_diagnose_unknown_cause_skips_the_vllm_wrapper_line() -> None:
    lines = [
        "ValueError: something specific went wrong",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
    d = diagnose_exit(lines, 1, during="startup")
    assert d.code == "exited"
    assert d.evidence == "ValueError: something specific went wrong"


def test_diagnose_killed_by_signal_and_silent_exit() -> None:
    d = diagnose_exit([], -signal.SIGKILL, during="serving")
    assert d.code == "exited"
    assert "killed by SIGKILL during serving" in d.summary
    assert "printed nothing" in d.summary


def test_diagnose_spawn_errors() -> None:
    missing = diagnose_spawn_error("llama-server", FileNotFoundError(2, "No such file"))
    assert missing.code == "executable_not_found"
    assert "`llama-server`" in missing.summary
    denied = diagnose_spawn_error("/x", PermissionError(13, "Permission denied"))
    assert denied.code == "spawn_failed"
    assert "Permission denied" in denied.summary


def test_diagnose_timeout_and_port_taken_carry_numbers() -> None:
    t = diagnose_timeout(["still loading"], 2.5)
    assert t.code == "start_timeout"
    assert t.numbers == {"timeout_seconds": 2.5}
    assert "still loading" in t.summary
    p = diagnose_port_taken("127.0.0.1", 5800)
    assert p.code == "port_in_use"
    assert p.numbers == {"port": 5800.0}


# --- the two start clocks ---------------------------------------------------------------


def test_silence_names_what_it_was_doing_last() -> None:
    lines = [
        "(EngineCore_DP0 pid=79) INFO 12-25 04:53:54 [kernel_warmup.py:71] Using FlashInfer "
        "autotune cache file: /c/autotune_configs.json",
        "[AutoTuner]: Tuning fp4_gemm:  44%|████▍     | 7/16 [03:14<04:10, 27.85s/profile]",
    ]
    d = diagnose_silence(lines, 120, None)
    assert d.code == "silent_timeout"
    assert "no sign of life for 120 s; it was last autotuning 7/16" in d.summary
    assert d.fix is not None
    assert "silenceTimeout" in d.fix
    assert d.numbers == {"timeout_seconds": 120.0, "progress_done": 7.0, "progress_total": 16.0}
    assert d.evidence == lines[1]


def test_silence_prefers_the_progress_it_is_given() -> None:
    d = diagnose_silence(["Route: /health, Methods: GET"], 90.5, Progress("compiling"))
    assert "for 90.5 s; it was last compiling." in d.summary
    assert d.numbers == {"timeout_seconds": 90.5}


def test_silence_without_any_progress() -> None:
    d = diagnose_silence([], 60, None)
    assert d.code == "silent_timeout"
    assert "showed no recognisable progress" in d.summary
    assert d.evidence is None


def test_ceiling_names_the_phase_and_the_start_timeout() -> None:
    lines = ["Capturing CUDA graphs (decode, FULL):  45%|████▌     | 23/51 [00:03<00:04]"]
    d = diagnose_ceiling(lines, 1800, None)
    assert d.code == "ceiling_timeout"
    assert "did not become ready within 1800 s; it was still capturing graphs 23/51" in d.summary
    assert d.fix is not None
    assert "startTimeout" in d.fix


def test_a_timeout_with_a_known_cause_in_the_log_reports_it() -> None:
    lines = [
        "(EngineCore_DP0 pid=79) ValueError: max_num_seqs (1024) exceeds available Mamba cache "
        "blocks (856). Each decode sequence requires one Mamba cache block.",
        "(APIServer pid=1) INFO 12-25 04:56:00 [launcher.py:45] waiting",
    ]
    d = diagnose_ceiling(lines, 600, None)
    assert d.code == "ceiling_timeout"
    assert "856 Mamba cache blocks" in d.summary
    assert d.evidence == lines[0]
    assert d.fix is not None
    assert "--max-num-seqs 856" in d.fix
    assert d.numbers["blocks"] == 856.0


def test_generic_diagnoser_has_both_clocks() -> None:
    diagnoser = GenericDiagnoser()
    assert diagnoser.silence([], 5, None).code == "silent_timeout"
    assert diagnoser.ceiling([], 5, None).code == "ceiling_timeout"
    assert diagnoser.timeout([], 5).code == "start_timeout"


# --- unknown causes ---------------------------------------------------------------------


def test_unknown_cause_skips_every_wrapper_and_traceback_frame() -> None:
    lines = [
        "(Worker_TP0 pid=2) RuntimeError: CUDA error: an illegal memory access was encountered",
        "(EngineCore_DP0 pid=1) Exception: WorkerProc initialization failed due to an exception in "
        "a background process. See stack trace for root cause.",
        "(EngineCore_DP0 pid=1) RuntimeError: Worker failed with error 'CUDA error: an illegal "
        "memory access was encountered', please check the stack trace above for the root cause",
        "(APIServer pid=1) Traceback (most recent call last):",
        "(APIServer pid=1)     raise RuntimeError(",
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {}",
    ]
    d = diagnose_exit(lines, 1, during="startup")
    assert d.code == "exited"
    assert d.evidence == lines[0]
    assert diagnose_text("\n".join(lines)) is None


def test_diagnose_text_without_a_known_cause_is_none() -> None:
    assert diagnose_text("") is None
    assert diagnose_text("INFO: Application startup complete.\n") is None


def test_root_cause_order_beats_position() -> None:
    # The guard fired first; a later, generic OOM line must not win over it.
    lines = [
        "ValueError: Free memory on device cuda:0 (7.34/15.49 GiB) on startup is less than "
        "desired GPU memory utilization (0.8, 12.39 GiB). Decrease GPU memory utilization.",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.",
    ]
    assert diagnose_exit(lines, 1, during="startup").code == "utilization_guard"


def test_utilization_guard_with_no_room_at_all_only_says_free_the_gpu() -> None:
    d = diagnose_text(
        "ValueError: Free memory on device cuda:1 (0.10/79.19 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 71.27 GiB)."
    )
    assert d is not None
    assert d.code == "utilization_guard"
    assert d.fix is not None
    assert "--gpu-memory-utilization" not in d.fix
    assert "cuda:1" in d.summary


# --- hints ------------------------------------------------------------------------------

AUTO = '\\"auto\\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'


@pytest.mark.parametrize(
    "body",
    [
        ('{"error":{"message":"' + AUTO + '","type":"BadRequestError","param":null,"code":400}}'),
        ('{"object":"error","message":"' + AUTO + '","type":"BadRequestError","code":400}'),
        '{"error":{"message":"tool_choice=\\"required\\" requires --tool-call-parser to be set"}}',
        '{"error":{"message":"tool_choice=function \\"get_weather\\" requires --tool-call-parser '
        'to be set"}}',
    ],
)
def test_tool_choice_hint(body: str) -> None:
    hint = tool_choice_hint(400, body.encode())
    assert hint is not None
    assert "--enable-auto-tool-choice --tool-call-parser" in hint
    assert "hermes" in hint
    assert "qwen3_coder" in hint


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (400, b'{"error":{"message":"max_tokens must be at least 1"}}'),
        (500, ('{"error":{"message":"' + AUTO + '"}}').encode()),
        (400, b"not json at all"),
        (400, b'{"error": "tool"}'),
    ],
)
def test_no_tool_choice_hint(status: int, body: bytes) -> None:
    assert tool_choice_hint(status, body) is None


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["vllm", "serve", "Qwen/Qwen3.6-27B-FP8"], "qwen3_coder"),
        (["/opt/venv/bin/vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"], "hermes"),
        (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "hermes suits"),
        (
            ["vllm", "serve", "Qwen/Qwen3-Coder-30B-A3B", "--tool-call-parser=qwen3_coder"],
            "without --enable-auto-tool-choice,",
        ),
    ],
)
def test_missing_tool_flags(argv: list[str], expect: str) -> None:
    info = missing_tool_flags(argv)
    assert info is not None
    assert expect in info


@pytest.mark.parametrize(
    "argv",
    [
        ["vllm", "serve", "m", "--enable-auto-tool-choice", "--tool-call-parser", "hermes"],
        ["llama-server", "-m", "/m/x.gguf"],
        [],
    ],
)
def test_no_missing_tool_flags(argv: list[str]) -> None:
    assert missing_tool_flags(argv) is None


def test_fit_notices() -> None:
    notices = fit_notices(
        [
            "common_params_fit_impl: context size reduced from 262144 to 65536",
            "llama_params_fit_impl: context size reduced from 32,768 to 4096 → need 7252 MiB less",
            "llama_params_fit: failed: n_gpu_layers already set by user to 999, abort",
            "llama_context: n_ctx         = 4096",
        ]
    )
    assert notices == [
        "llama.cpp's --fit reduced the context from 262144 to 65536 tokens to fit in free device "
        "memory; set -c explicitly (or -fit off) to keep the context you asked for.",
        "llama.cpp's --fit reduced the context from 32768 to 4096 tokens to fit in free device "
        "memory, saving 7252 MiB; set -c explicitly (or -fit off) to keep the context you asked "
        "for.",
        "llama.cpp's --fit could not fit the model in free device memory: n_gpu_layers already "
        "set by user to 999, abort.",
    ]
    assert fit_notices(["main: model loaded"]) == []
