"""A model's last stop in words (issue 32 #2): an eviction names the start it made room for and,
once known, how that start went."""

from __future__ import annotations

import time
from dataclasses import replace

from modelswap.supervisor.stops import IDLE, StopRecord, evicted


def test_an_eviction_says_its_target_then_how_the_start_went() -> None:
    record = evicted("b")
    hhmm = time.strftime("%H:%M", time.localtime(record.at))
    assert record.summary() == f"evicted to start b at {hhmm} (b starting)"
    failed = replace(record, outcome="failed", code="utilization_guard")
    assert failed.summary() == f"evicted to start b at {hhmm} (b then failed: utilization_guard)"
    started = replace(record, outcome="started")
    assert started.summary() == f"evicted to start b at {hhmm} (b then started)"
    row = failed.as_dict()
    assert {k: row[k] for k in ("reason", "detail", "target", "outcome", "code")} == {
        "reason": "evicted",
        "detail": "evicted to start b",
        "target": "b",
        "outcome": "failed",
        "code": "utilization_guard",
    }
    assert "code" not in started.as_dict()


def test_a_stop_without_a_target_is_its_reason_and_time() -> None:
    record = StopRecord(IDLE, 0.0, "idle for its ttl (60 s)")
    hhmm = time.strftime("%H:%M", time.localtime(0.0))
    assert record.summary() == f"idle for its ttl (60 s) at {hhmm}"
    assert set(record.as_dict()) == {"reason", "at", "detail", "summary"}
