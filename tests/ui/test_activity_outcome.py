"""Issue 32 #1 in the browser: a streamed chat whose cold start fails after the loading comments
got a 200 event stream and then an error event. The Activity page shows it red, counts it among
the errors and keeps it under the errors filter, by the gateway's ``outcome`` (not the status).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from tests.e2e.conftest import HANG, REPO, Gateway, chat, fake_cmd

StartGateway = Callable[..., Gateway]
GUARD_LOG = REPO / "tests" / "data" / "startup-logs" / "vllm-new-utilization-guard.log"

ui = pytest.mark.ui


def failing_stream(gw: Gateway, model: str) -> openai.APIError:
    """Stream a chat with the openai SDK; the error event it raises."""

    def consume() -> None:
        with openai.OpenAI(
            base_url=gw.url("/v1"), api_key="unused", max_retries=0, timeout=HANG
        ) as client:
            stream = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}], stream=True
            )
            with stream:
                for _ in stream:
                    pass

    with pytest.raises(openai.APIError) as info:
        consume()
    return info.value


@ui
def test_a_failed_streamed_cold_start_is_red_counted_and_filtered_as_an_error(
    gateway: StartGateway, page: Any
) -> None:
    guard = fake_cmd(
        "--load-delay", "2.0", "--flavor", "vllm", "--print-log", str(GUARD_LOG), "--fail-start"
    )
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n  guard:\n    cmd: {guard}\n")
    assert chat(gw, "tiny").status == 200
    error = failing_stream(gw, "guard")
    assert not isinstance(error, openai.APIStatusError)  # a 200 stream's error event
    gw.wait_for(lambda: len(gw.get_json("/api/activity")["data"]) == 2)  # type: ignore[arg-type]

    page.goto(gw.url("/ui/#/activity"))
    rows = page.locator("#activity-table tbody tr")
    rows.nth(1).wait_for()
    failed = page.locator('#activity-table tbody tr[data-outcome="error"]')
    assert failed.count() == 1
    assert failed.get_attribute("data-status") == "200"
    status = failed.locator("td.status-bad")  # red, though a 200: its outcome, the 200 in its title
    assert status.locator("span").first.text_content() == "utilization_guard (mid-stream)"
    # Under it, why (issue 41): the start's own message, as the stream's last event said it.
    assert "failed to start" in (status.locator('[data-role="why"]').text_content() or "")
    assert "HTTP 200" in (status.get_attribute("title") or "")
    assert "utilization_guard" in (failed.text_content() or "")
    stat = lambda name: page.locator(f'[data-stat="{name}"] .stat-value').text_content()  # noqa: E731
    assert stat("errors") == "1"

    page.locator("#activity-outcome").select_option("error")
    page.locator('[data-stat="requests"] .stat-value', has_text="1").wait_for()
    assert rows.count() == 1
    assert rows.first.get_attribute("data-outcome") == "error"
    assert stat("errors") == "1"
    page.locator("#activity-outcome").select_option("ok")
    page.locator('[data-stat="errors"] .stat-value', has_text="0").wait_for()
    assert rows.count() == 1
    assert rows.first.get_attribute("data-outcome") == "ok"
    assert "tiny" in (rows.first.text_content() or "")
