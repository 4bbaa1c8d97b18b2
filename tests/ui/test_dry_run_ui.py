"""The web UI's Load asks the dry run first (issue 39): a load that would stop another model
lists what it evicts and why, and waits for a confirmation — Cancel leaves everything as it
was; a load that stops nothing goes ahead at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, fake_cmd
from tests.ui.conftest import screenshot
from tests.ui.test_webui_honest import badge_is, card

StartGateway = Callable[..., Gateway]
ui = pytest.mark.ui


@ui
def test_load_shows_what_it_will_evict_before_it_does(gateway: StartGateway, page: Any) -> None:
    gw = gateway(f"  first:\n    cmd: {fake_cmd()}\n  second:\n    cmd: {fake_cmd()}\n")
    page.goto(gw.url("/ui/#/models"))
    page.locator("#events-status", has_text="live").wait_for()

    # Nothing runs: nothing to evict, so Load loads at once.
    with page.expect_response(lambda r: "/api/models/load/first" in r.url):
        card(page, "first").get_by_role("button", name="Load first", exact=True).click()
    badge_is(page, "first", "ready")
    assert card(page, "first").locator('[data-role="confirm"]').is_hidden()

    # first runs: loading second would stop it. The card says so, and waits.
    second = card(page, "second")
    with page.expect_response(lambda r: "/api/models/second/dry-run" in r.url):
        second.get_by_role("button", name="Load second", exact=True).click()
    confirm = second.locator('[data-role="confirm"]')
    confirm.wait_for()
    assert "stops 1 model" in confirm.locator('[data-role="confirm-summary"]').inner_text()
    evicted = confirm.locator('[data-role="confirm-evict"] li[data-model="first"]')
    assert "exclusive: one model at a time" in evicted.inner_text()
    screenshot(page, "models-load-confirm")
    confirm.get_by_role("button", name="Cancel").click()
    assert confirm.is_hidden()
    assert gw.running()["first"]["state"] == "ready"  # the dry run stopped nothing
    assert "second" not in gw.running()

    second.get_by_role("button", name="Load second", exact=True).click()
    confirm.wait_for()
    with page.expect_response(lambda r: "/api/models/load/second" in r.url):
        confirm.get_by_role("button", name="Load second anyway", exact=True).click()
    badge_is(page, "second", "ready")
    badge_is(page, "first", "stopped")
    # Its last swap says how the dry run before it compared.
    predicted = second.locator('[data-role="swap-predicted"]')
    predicted.wait_for()
    assert predicted.inner_text().startswith("evicted as predicted · predicted ")
