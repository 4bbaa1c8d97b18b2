"""Scenario 2: a backend crashes in the middle of a stream.

The client gets the bytes already produced, then a final error event, and the stream ends (no
hang); the gateway marks the model failed with a diagnosis; the next request starts it again;
a stream from another model running beside it is not disturbed.
"""

from __future__ import annotations

import json
import threading
import time

import pytest
from tests.e2e.conftest import HANG, chat, fake_cmd, open_stream, stream_tokens
from tests.reliability.conftest import LaunchFn, Report, log_problems

pytestmark = pytest.mark.reliability

MODELS = (
    f"  crashy:\n    cmd: {fake_cmd('--crash-after', '2', '--tokens', '20', '--tps', '40')}\n"
    f"  steady:\n    cmd: {fake_cmd('--tokens', '40', '--tps', '20')}\n"
)
GROUPS = "groups:\n  pair:\n    members: [crashy, steady]\n    swap: false\n"


def test_crash_mid_stream_ends_the_stream_with_an_error_and_restarts(
    launch: LaunchFn, report: Report
) -> None:
    gw = launch(MODELS, extra_top=GROUPS)
    for model in ("crashy", "steady"):
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    first_pid = chat(gw, "crashy").headers["X-Fake-Pid"]  # request 1 of this process

    neighbour: dict[str, object] = {}

    def steady_stream() -> None:
        with open_stream(gw, "steady") as resp:
            neighbour["status"] = resp.status
            neighbour["tokens"], neighbour["events"] = stream_tokens(resp)

    beside = threading.Thread(target=steady_stream)
    beside.start()
    started = time.monotonic()
    with open_stream(gw, "crashy") as resp:  # request 2: crashes after 10 tokens
        assert resp.status == 200
        tokens, events = stream_tokens(resp)
    ended_after = time.monotonic() - started
    assert tokens == [f"tok{i} " for i in range(10)], "the bytes already produced arrive"
    assert events[-1] != "[DONE]"
    error = json.loads(events[-1])["error"]
    assert error["code"] == "upstream_error"
    assert "crashy" in error["message"]

    def failed() -> bool:
        row = gw.running().get("crashy")
        return row is not None and row["state"] == "failed"

    gw.wait_for(failed)
    diagnosis = gw.running()["crashy"]["last_failure"]
    assert isinstance(diagnosis, dict)
    assert diagnosis["code"] == "exited"
    assert "3" in str(diagnosis["summary"]), diagnosis  # the exit code
    assert "simulated crash" in str(diagnosis.get("evidence")), diagnosis

    again = chat(gw, "crashy")
    assert again.status == 200, again.body
    assert again.headers["X-Fake-Pid"] != first_pid, "a new backend process serves it"
    assert gw.running()["crashy"]["state"] == "ready"

    beside.join(timeout=HANG)
    assert neighbour["status"] == 200
    assert neighbour["tokens"] == [f"tok{i} " for i in range(40)], "the neighbour was disturbed"
    assert neighbour["events"][-1] == "[DONE]"  # type: ignore[index]
    assert gw.running()["steady"]["state"] == "ready"
    assert gw.running()["steady"]["in_flight"] == 0
    assert not log_problems(gw.log()), log_problems(gw.log())
    report(
        tokens_before_crash=len(tokens),
        stream_ended_after_s=round(ended_after, 2),
        diagnosis=diagnosis["code"],
        neighbour_tokens=len(neighbour["tokens"]),  # type: ignore[arg-type]
    )
