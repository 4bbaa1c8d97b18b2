"""The web UI's Queue page (issue 40): a request really waiting in the scheduler (its model held
in ``starting`` by a fake backend that starts only when the test says) listed with its place,
what it waits for and its estimate; each key's limits as bars; a key without ``read`` told why
it sees nothing. In Debian's chromium at desktop size and at 390 px, light and dark."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, Reply, chat_body, held_cmd, request
from tests.ui.conftest import screenshot
from tests.ui.test_webui_round3 import DESKTOP, PHONE, fits, name, sign_in, view

StartGateway = Callable[..., Gateway]
pytestmark = pytest.mark.ui

READER = "sk-queue-ui-reader-0123456789"
ANA = "sk-queue-ui-ana-0123456789ab"
AGENT = "sk-queue-ui-agent-0123456789"
KEYS = (
    "apiKeys:\n"
    f"  - {{key: {READER}, name: reader, scopes: [read]}}\n"
    f"  - key: {ANA}\n"
    "    name: ana\n"
    "    scopes: [inference]\n"
    "    quota: {concurrency: 2, requestsPerMinute: 30, tokensPerDay: 100000}\n"
    f"  - {{key: {AGENT}, name: agents, scopes: [inference], priority: batch, weight: 3}}\n"
)


def test_the_queue_page_lists_a_waiting_request_and_each_keys_limits(
    gateway: StartGateway, browser: Any, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    gw = gateway(f"  slow:\n    cmd: {held_cmd(release)}\n", extra_top=KEYS)
    answers: list[Reply] = []
    body = chat_body("slow")
    headers = {"Authorization": f"Bearer {ANA}"}
    sender = threading.Thread(
        target=lambda: answers.append(request(gw, "POST", "/v1/chat/completions", body, headers))
    )
    sender.start()
    try:
        reader = {"Authorization": f"Bearer {READER}"}
        gw.wait_for(
            lambda: bool(request(gw, "GET", "/api/queue", headers=reader).json()["waiting"])
        )
        for size, scheme in [(DESKTOP, "light"), (PHONE, "dark")]:
            with view(browser, size, scheme) as tab:
                tab.goto(gw.url("/ui/#/queue"))
                sign_in(tab, READER)
                row = tab.locator('tr[data-waiter="slow"]')
                row.wait_for()
                cells = row.locator("td").all_inner_texts()
                assert cells[:3] == ["1", "slow", "ana"]  # the waiting request's key's name
                estimate = row.locator('[data-role="estimate"]').inner_text()
                assert estimate == "—" or estimate.startswith("~"), estimate
                assert "queued 1st for slow" in (row.get_attribute("title") or "")
                waits = row.locator('[data-role="waits-for"]')
                if size == DESKTOP:
                    assert waits.inner_text() == "its model's start"
                else:  # the narrow table keeps place, model, key, waited, estimate
                    assert waits.is_hidden()
                assert tab.locator("#queue-count").inner_text() == "· 1"

                ana = tab.locator('[data-key-card="ana"]')
                limits = ana.locator("[data-limit]")
                assert [limits.nth(i).get_attribute("data-limit") for i in range(3)] == [
                    "concurrency",
                    "requests",
                    "tokens-day",
                ]
                meter = ana.locator('[data-limit="requests"] [role="meter"]')
                assert meter.get_attribute("aria-valuemax") == "30"
                # (the requests bucket refills 0.5 a second: its level is not asserted)
                assert "of 30 used" in ana.locator('[data-limit="requests"]').inner_text()
                # the waiting request holds one of ana's two places
                assert "1 of 2 used" in ana.locator('[data-limit="concurrency"]').inner_text()
                agents = tab.locator('[data-key-card="agents"]')
                assert "batch ×3" in agents.inner_text()
                assert agents.locator('[data-role="no-limits"]').is_visible()
                assert ANA not in tab.content()  # names, never keys
                fits(tab, size)
                screenshot(tab, f"queue{name(size, scheme)}")
    finally:
        release.touch()
        sender.join(timeout=120)
    assert [a.status for a in answers] == [200]

    with view(browser, PHONE, "light") as tab:
        tab.goto(gw.url("/ui/#/queue"))
        sign_in(tab, READER)
        tab.locator('[data-role="queue-none"]').wait_for()  # the next refresh: none waits
        tab.goto(gw.url("/ui/#/models"))
        tab.locator("#signout").click()
        sign_in(tab, ANA)  # an inference key: no read scope
        tab.goto(gw.url("/ui/#/queue"))
        note = tab.locator('#queue-waiting [data-role="scope-note"]')
        note.wait_for()
        assert "read" in note.inner_text()
        fits(tab, PHONE)
