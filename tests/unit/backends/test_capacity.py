from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from modelswap.backends.capacity import parse_capacity
from modelswap.backends.logtext import split_segments
from modelswap.reported import CapacityReceipt

LOGS = Path(__file__).resolve().parents[2] / "data" / "startup-logs"


def _receipts() -> list[tuple[Path, dict[str, Any] | None]]:
    cases: list[tuple[Path, dict[str, Any] | None]] = []
    for log in sorted(LOGS.glob("*.log")):
        want = json.loads(log.with_suffix(".expected.json").read_text())
        cases.append((log, want.get("receipt")))
    return cases


RECEIPTS = _receipts()


def test_every_success_log_declares_a_receipt() -> None:
    for log, receipt in RECEIPTS:
        want = json.loads(log.with_suffix(".expected.json").read_text())
        if want["code"] is None:
            assert receipt, log.name
    assert sum(1 for _, receipt in RECEIPTS if receipt) >= 8


@pytest.mark.parametrize(("log", "receipt"), RECEIPTS, ids=[p.stem for p, _ in RECEIPTS])
def test_parse_capacity_on_the_corpus(log: Path, receipt: dict[str, Any] | None) -> None:
    # As the supervisor hands it over: split on \r and \n, ANSI codes and prefixes intact.
    lines = split_segments(log.read_bytes().decode("utf-8"))
    got = parse_capacity(lines)
    if receipt is None:
        assert got is None
    else:
        assert got == CapacityReceipt(**receipt)


def test_physical_lines_with_redraws_parse_the_same() -> None:
    log = LOGS / "vllm-new-success.log"
    physical = log.read_bytes().decode("utf-8").split("\n")
    assert parse_capacity(physical) == parse_capacity(split_segments("\n".join(physical)))


def test_vllm_two_line_form_with_thousands_separators() -> None:
    got = parse_capacity(
        [
            "INFO 12-25 04:55:00 [gpu_worker.py:375] Available KV cache memory: 19.40 GiB",
            "INFO 12-25 04:55:00 [kv_cache_utils.py:1087] GPU KV cache size: 211,936 tokens",
            "INFO 12-25 04:55:00 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens "
            "per request: 25.87x",
        ]
    )
    assert got == CapacityReceipt(
        kv_cache_tokens=211936,
        max_concurrency=25.87,
        concurrency_tokens_per_request=8192,
        kv_cache_gib=19.40,
    )


def test_older_model_loading_form() -> None:
    got = parse_capacity(
        ["INFO 01-01 00:00:00 [r.py:1] Model loading took 4.4 GiB and 1.2 seconds"]
    )
    assert got == CapacityReceipt(weights_gib=4.4)


def test_the_last_occurrence_wins() -> None:
    got = parse_capacity(
        [
            "GPU KV cache size: 1,000 tokens, Maximum concurrency for 1,000 tokens per request: "
            "1.00x",
            "GPU KV cache size: 2,000 tokens, Maximum concurrency for 4,000 tokens per request: "
            "0.50x",
            "llama_context: n_ctx         = 8192",
            "llama_context: n_ctx         = 4096",
        ]
    )
    assert got == CapacityReceipt(
        kv_cache_tokens=2000,
        max_concurrency=0.5,
        concurrency_tokens_per_request=4000,
        n_ctx=4096,
    )


def test_the_n_ctx_seq_warning_is_not_the_n_ctx_assignment() -> None:
    got = parse_capacity(
        [
            "llama_context: n_ctx         = 524288",
            "llama_context: n_ctx_seq     = 131072",
            "llama_context: n_ctx_seq (131072) < n_ctx_train (262144) -- the full capacity of the "
            "model will not be utilized",
            "llama_context: n_ctx_seq (131072) > n_ctx_train (65536) -- possible training context "
            "overflow",
            "print_info: n_ctx_train      = 262144",
            "slot         init: id  0 | task -1 | new slot, n_ctx = 131072",
        ]
    )
    assert got == CapacityReceipt(n_ctx=524288, n_ctx_seq=131072)


def test_recurrent_state_and_kv_size_fields_are_not_the_kv_cache() -> None:
    got = parse_capacity(
        [
            "llama_kv_cache_init: kv_size = 16384, offload = 1, type_k = 'f16', type_v = 'f16'",
            "llama_kv_cache: size = 4352.00 MiB (131072 cells,  16 layers,  4/1 seqs), "
            "K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB",
            "llama_memory_recurrent: size =  598.50 MiB (     4 cells,  64 layers,  4 seqs), "
            "R (f32):   22.50 MiB, S (f32):  576.00 MiB",
        ]
    )
    assert got == CapacityReceipt(kv_cache_mib=4352.0, kv_cells=131072)


def test_nothing_recognised_is_none() -> None:
    assert parse_capacity([]) is None
    assert parse_capacity(["main: model loaded", "Route: /health, Methods: GET"]) is None


def test_vllm_cpu_build_receipt_gives_the_kv_token_count() -> None:
    lines = [
        "INFO 11-30 10:00:00 [kv_cache_utils.py:1087] CPU KV cache size: 46,592 tokens",
        "INFO 11-30 10:00:00 [kv_cache_utils.py:1091] Maximum concurrency for 1,536 tokens "
        "per request: 30.33x",
    ]
    receipt = parse_capacity(lines)
    assert receipt == CapacityReceipt(
        kv_cache_tokens=46592, max_concurrency=30.33, concurrency_tokens_per_request=1536
    )


def test_vllm_cpu_build_single_line_receipt_gives_tokens_and_concurrency() -> None:
    """vllm-cpu 0.32 prints both on one line (issue 18), the GPU builds on two."""
    line = (
        "INFO 11-30 10:00:00 [kv_cache_utils.py:1087] CPU KV cache size: 46,592 tokens, "
        "Maximum concurrency for 1,536 tokens per request: 30.33x"
    )
    assert parse_capacity([line]) == CapacityReceipt(
        kv_cache_tokens=46592, max_concurrency=30.33, concurrency_tokens_per_request=1536
    )


@pytest.mark.parametrize(
    ("line", "gib"),
    [
        # VLLM_CPU_KVCACHE_SPACE (or --kv-cache-memory-bytes) given: cpu_worker.py
        (
            "INFO 12-01 22:47:00 [cpu_worker.py:260] Explicitly set (1.0/10.46) GiB for KV cache "
            "on node 0.",
            1.0,
        ),
        # not given: the worker sizes it from its requested memory
        (
            "INFO 12-01 22:47:00 [cpu_worker.py:250] Auto set (6.25/15.51) GiB for KV cache "
            "on node 1, with 8.00 GiB requested memory for the worker. "
            "1.75 GiB memory was consumed by non-kv usages.",
            6.25,
        ),
    ],
)
def test_vllm_cpu_build_states_the_kv_cache_gib_it_set(line: str, gib: float) -> None:
    assert parse_capacity([line]) == CapacityReceipt(kv_cache_gib=gib)


@pytest.mark.parametrize("device", ["GPU", "XPU", "TPU", "HPU", "GPU + host"])
def test_every_device_name_vllm_prints_gives_the_kv_token_count(device: str) -> None:
    """kv_cache_utils.py names the pool by device type (upper-cased), "+ host" with a host tier."""
    line = f"INFO [kv_cache_utils.py:2327] {device} KV cache size: 1,024 tokens, "
    line += "Maximum concurrency for 512 tokens per request: 2.00x"
    receipt = parse_capacity([line])
    assert receipt is not None
    assert receipt.kv_cache_tokens == 1024


@pytest.mark.parametrize(
    "line",
    [
        "GPU KV cache size: 0 tokens",
        "GPU KV cache size: 99,999,999,999,999 tokens",
        "Maximum concurrency for 0 tokens per request: 0.00x",
        "Available KV cache memory: 99999999999.0 GiB",
        "llama_context: n_ctx = 0",
        "llama_context: n_ctx = 4294967296",
        "llama_kv_cache: size = 0.00 MiB ( 0 cells, 30 layers, 1/1 seqs)",
    ],
)
def test_implausible_receipt_numbers_are_ignored(line: str) -> None:
    assert parse_capacity([line]) is None


def test_an_implausible_number_does_not_hide_the_plausible_ones() -> None:
    receipt = parse_capacity(
        ["llama_context: n_ctx = 0", "llama_kv_cache: size = 48.00 MiB ( 2048 cells, ...)"]
    )
    assert receipt == CapacityReceipt(kv_cache_mib=48.0, kv_cells=2048)


@pytest.mark.parametrize(
    "line",
    [
        "Available KV cache memory: -2.86 GiB",
        "Available KV cache memory: -3.5 GiB",
        "the rest of the memory reserved for KV Cache is -1.20 GiB",
        "Model loading took -0.5 GiB",
        "llama_kv_cache: size = -48.00 MiB ( 2048 cells, ...)",
    ],
)
def test_a_negative_size_is_never_a_receipt(line: str, caplog: pytest.LogCaptureFixture) -> None:
    """A negative size is dropped, with a debug line, as the probe drops implausible values."""
    with caplog.at_level(logging.DEBUG, logger="modelswap.backends.capacity"):
        receipt = parse_capacity([line])
    assert receipt is None or all(
        value is None or value > 0 for value in dataclasses.asdict(receipt).values()
    )
    assert "implausible" in caplog.text
