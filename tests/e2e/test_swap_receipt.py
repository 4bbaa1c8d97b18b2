"""Every swap has a receipt: where its time went, in the log and as a swap.done event."""

from __future__ import annotations

import re

import pytest
from tests.e2e.conftest import Gateway, chat, fake_cmd

pytestmark = pytest.mark.e2e


def test_a_swap_logs_its_stop_and_the_targets_spawn_listening_and_ready(
    gateway: type[Gateway],
) -> None:
    silent = fake_cmd("--flavor vllm --quiet-loading --silent-bind --load-delay 0.3")
    gw = gateway(f"  a:\n    cmd: {fake_cmd()}\n  b:\n    cmd: {silent}\n")  # type: ignore[call-arg]
    assert chat(gw, "a").status == 200
    assert chat(gw, "b").status == 200  # one model at a time: a is stopped for b
    gw.wait_for(lambda: "swap to b done in" in gw.log(), timeout=30)
    line = next(line for line in gw.log().splitlines() if "swap to b done in" in line)
    found = re.search(
        r"\(stop (\S+) s, start (\S+) s, spawn to listening (\S+) s, listening to ready (\S+) s\)",
        line,
    )
    assert found, line
    stop, start, listening, ready = map(float, found.groups())
    assert stop > 0  # a's whole tree was ended first
    assert 0 < listening <= start
    assert ready >= 0


def test_a_failed_swap_says_so(gateway: type[Gateway]) -> None:
    gw = gateway(f"  broken:\n    cmd: {fake_cmd('--fail-start')}\n")  # type: ignore[call-arg]
    assert chat(gw, "broken").status == 503
    gw.wait_for(lambda: "swap to broken failed in" in gw.log(), timeout=30)
