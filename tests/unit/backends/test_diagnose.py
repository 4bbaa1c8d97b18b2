from __future__ import annotations

import signal

from modelswap.backends.diagnose import (
    diagnose_exit,
    diagnose_port_taken,
    diagnose_spawn_error,
    diagnose_timeout,
)


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
