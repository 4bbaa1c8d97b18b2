"""What a model's command line promises (``configured``), parsed from the resolved argv."""

from __future__ import annotations

import shlex

import pytest

from modelswap.backends.configured import ConfiguredLimits, parse_configured


def parse(command: str) -> ConfiguredLimits:
    return parse_configured(shlex.split(command))


def test_llamacpp_ctx_divided_among_slots() -> None:
    got = parse("llama-server -m m.gguf -c 4096 -np 2 --port 8081")
    assert got == ConfiguredLimits(ctx_size=4096, parallel=2)
    assert got.context == 2048
    assert got.as_dict() == {"ctx_size": 4096, "parallel": 2, "context": 2048}


def test_llamacpp_ctx_without_parallel_is_the_whole_context() -> None:
    got = parse("llama-server -m m.gguf -c 2048")
    assert got.context == 2048
    assert got.as_dict() == {"ctx_size": 2048, "context": 2048}


def test_llamacpp_long_flags() -> None:
    got = parse("llama-server --ctx-size 8192 --parallel 4")
    assert got == ConfiguredLimits(ctx_size=8192, parallel=4)
    assert got.context == 2048


def test_vllm_max_model_len() -> None:
    got = parse("vllm serve org/model --max-model-len 200001 --max-num-seqs 8")
    assert got == ConfiguredLimits(max_model_len=200001, max_num_seqs=8)
    assert got.context == 200001
    assert got.as_dict() == {"max_model_len": 200001, "max_num_seqs": 8, "context": 200001}


def test_equals_form() -> None:
    got = parse("vllm serve m --max-model-len=8192 --max-num-seqs=4")
    assert got == ConfiguredLimits(max_model_len=8192, max_num_seqs=4)
    assert parse("llama-server --ctx-size=4096 --parallel=2").context == 2048


def test_sglang_context_length() -> None:
    assert parse("python -m sglang.launch_server --context-length 32768").context == 32768


def test_last_flag_wins() -> None:
    assert parse("x --max-model-len 4096 --max-model-len 8192").max_model_len == 8192
    assert parse("x -c 1024 --ctx-size 4096").ctx_size == 4096
    assert parse("x --ctx-size=4096 -c 1024").ctx_size == 1024
    # As the e2e llama.cpp command line does: "-np 1 ... -np 2".
    got = parse("x -c 4096 -np 1 -t 2 -np 2")
    assert got.parallel == 2
    assert got.context == 2048


def test_max_model_len_is_the_context_even_with_llamacpp_flags() -> None:
    got = parse("x -c 4096 -np 4 --max-model-len 1000")
    assert got.context == 1000


@pytest.mark.parametrize(
    "command",
    [
        "x -c abc",
        "x -c",  # value missing at the end
        "x --max-model-len",
        "x -c 0",
        "x -c -5",
        "x -c 2048.0",
        "x -c 1e4",
        "x --max-model-len=",
        "x --max-model-len= 4096",
        f"x --max-model-len {2**31 + 1}",
        "x -c4096",  # not a form llama-server's own parser splits either
        "x --max-model-length 4096",  # not our flag
        "x --ctx 4096",
        "x -C 4096",
    ],
)
def test_junk_is_ignored(command: str) -> None:
    got = parse(command)
    assert got == ConfiguredLimits()
    assert got.context is None
    assert got.as_dict() == {}


def test_junk_does_not_erase_an_earlier_valid_value() -> None:
    assert parse("x -c 4096 -c nope").ctx_size == 4096


def test_a_missing_value_does_not_swallow_the_next_flag() -> None:
    got = parse("x -c --max-model-len 9000")
    assert got == ConfiguredLimits(max_model_len=9000)


def test_no_flags_at_all() -> None:
    got = parse_configured([])
    assert got == ConfiguredLimits()
    assert got.context is None
    assert got.as_dict() == {}


def test_parallel_alone_promises_no_context() -> None:
    got = parse("x -np 2 --max-num-seqs 3")
    assert got.context is None
    assert got.as_dict() == {"parallel": 2, "max_num_seqs": 3}


def test_flag_text_inside_another_argument_is_not_a_flag() -> None:
    # A quoted argument that merely contains the flag text is one argv element.
    got = parse_configured(["sh", "-c", "exec vllm serve m --max-model-len 4096"])
    assert got.max_model_len is None
