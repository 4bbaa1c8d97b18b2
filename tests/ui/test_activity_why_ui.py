"""Issue 41 (the recording side) in the browser: an activity row says why — the policy's
program and line that denied it, the limit and its value that refused it, the origin a
preflight came from — on screen at 1400 px and at 390 px; the request's dialog shows the rule
in full; a client's own stop is its own outcome (not red, its tokens counted) and a preflight
is counted apart. The rows are written by the gateway's own store (a real ActivityLog in the
state directory) before ``python -m modelswap serve`` opens it."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, fake_cmd
from tests.ui.conftest import screenshot
from tests.ui.test_webui_round3 import PHONE, fits, name, view

from modelswap.observe.activity import ActivityLog
from modelswap.observe.records import RequestRecord

StartGateway = Callable[..., Gateway]
ui = pytest.mark.ui

WIDE = {"width": 1400, "height": 900}
VIEWS = [(WIDE, "light"), (PHONE, "dark")]
CHAT = "/v1/chat/completions"
RULE = (
    'deny 400 "messages is required" when messages is missing\n'
    'and request.path in ["/v1/chat/completions", "/v1/messages"]'
)


def row(at: float, **fields: Any) -> RequestRecord:
    base: dict[str, Any] = {
        "at": at,
        "key_name": None,
        "model": None,
        "route": CHAT,
        "status": 200,
        "streamed": False,
        "prompt_tokens": None,
        "completion_tokens": None,
        "ttft": None,
        "duration": 0.01,
        "bytes_in": 120,
        "bytes_out": 200,
        "error_code": None,
        "method": "POST",
    }
    return RequestRecord(**{**base, **fields})


def seed(state: Path) -> None:
    """Five rows, oldest first, through the store's own API."""
    now = time.time()
    store = ActivityLog(state / "activity.sqlite3")
    for record in (
        row(now - 50, model="tiny", prompt_tokens=9, completion_tokens=20, ttft=0.05),
        row(
            now - 40,
            requested="tiny",
            status=400,
            error_code="policy_denied",
            error_message="messages is required",
            rule={"kind": "policy", "program": "hooks.on_request", "line": 2, "rule": RULE},
        ),
        row(
            now - 30,
            requested="tiny",
            status=429,
            error_code="concurrency_limit",
            error_message="Too many requests: 2 are being served already "
            "(globalConcurrencyLimit); retry later.",
            rule={"kind": "limit", "name": "globalConcurrencyLimit", "value": 2, "in_flight": 2},
        ),
        row(
            now - 20,
            method="OPTIONS",
            status=403,
            bytes_in=0,
            rule={"kind": "cors", "origin": "https://evil.example", "allowed": False},
        ),
        row(
            now - 10,
            model="tiny",
            status=499,
            streamed=True,
            prompt_tokens=9,
            completion_tokens=7,
            ttft=0.05,
            duration=1.5,
        ),
    ):
        store.record(record)
    assert store.flush_now() == 5
    store.close_now()


def within(tab: Any, locator: Any, size: dict[str, int]) -> None:
    """On screen: shown, and inside the window's width (not off to the side)."""
    assert locator.is_visible()
    box = locator.bounding_box()
    assert box is not None
    assert box["x"] >= 0
    assert box["x"] + box["width"] <= size["width"], (box, size)


@ui
def test_each_row_says_why_at_1400_and_390_px_and_the_dialog_shows_the_rule(
    gateway: StartGateway, browser: Any, tmp_path: Path
) -> None:
    seed(tmp_path / "state")  # the fixture's stateDir
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n")
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/activity"))
            table = tab.locator("#activity-table tbody")
            table.locator("tr").nth(4).wait_for()

            denied = table.locator('tr[data-status="400"]')
            assert denied.get_attribute("data-outcome") == "error"
            why = denied.locator('[data-role="status"] [data-role="why"]')
            assert why.inner_text() == "denied by hooks.on_request line 2: messages is required"
            within(tab, why, size)

            limited = table.locator('tr[data-status="429"] [data-role="why"]')
            assert limited.inner_text() == "globalConcurrencyLimit 2 reached (2 in flight)"
            within(tab, limited, size)

            preflight = table.locator('tr[data-outcome="preflight"]')
            status = preflight.locator('[data-role="status"]')
            assert "status-bad" not in (status.get_attribute("class") or "")  # no error
            assert status.locator("span").first.inner_text() == "403 preflight"
            origin = status.locator('[data-role="why"]')
            assert origin.inner_text() == "origin https://evil.example not allowed"
            within(tab, origin, size)

            stopped = table.locator('tr[data-outcome="stopped"]')
            status = stopped.locator('[data-role="status"]')
            assert "status-stopped" in (status.get_attribute("class") or "").split()
            assert "status-bad" not in (status.get_attribute("class") or "")
            bad = table.locator('tr[data-status="400"] [data-role="status"]')
            colour = "(e) => getComputedStyle(e).color"
            assert status.evaluate(colour) != bad.evaluate(colour)  # not red
            assert status.locator("span").first.inner_text() == "499 stopped by the client"
            assert status.locator('[data-role="why"]').inner_text() == "7 tokens received"
            within(tab, status, size)

            # The cards: two errors (no stop, no preflight), four requests, one preflight.
            def stat(role: str) -> str:
                return str(tab.locator(f'[data-stat="{role}"] .stat-value').inner_text())

            assert (stat("requests"), stat("errors"), stat("preflights")) == ("4", "2", "1")
            tab.locator("#activity-outcome").select_option("stopped")
            assert table.locator("tr").count() == 1
            assert table.locator("tr").get_attribute("data-outcome") == "stopped"
            tab.locator("#activity-outcome").select_option("")
            fits(tab, size)
            screenshot(tab, f"explain-why-activity{name(size, scheme)}")

            # The dialog: the rule in full, where it is written.
            table.locator('tr[data-status="400"] button.row-open').click()
            box = tab.locator('dialog#capture [data-role="why-box"]')
            box.wait_for()
            assert box.locator('[data-role="why-program"]').inner_text() == (
                "hooks.on_request, line 2"
            )
            assert box.locator('[data-role="why-message"]').inner_text() == ("messages is required")
            assert box.locator('[data-role="why-rule"]').inner_text() == RULE
            fits(tab, size)
            screenshot(tab, f"explain-why-dialog{name(size, scheme)}")
            tab.get_by_role("button", name="Close request details").click()

            table.locator('tr[data-status="429"] button.row-open').click()
            limit = tab.locator('dialog#capture [data-role="why-limit"]')
            limit.wait_for()
            assert limit.inner_text() == "globalConcurrencyLimit: 2 (2 in flight when it came)"
            tab.get_by_role("button", name="Close request details").click()
