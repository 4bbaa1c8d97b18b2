"""The prompt cache's verdict on the model's card and page (issue 38): what its restores proved,
and why one does not work with its fix, at desktop size and at 390 px."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, fake_cmd
from tests.e2e.test_prompt_cache import PROMPT, row_of, turn
from tests.ui.conftest import screenshot

StartGateway = Callable[..., Gateway]

ui = pytest.mark.ui


def card(page: Any, model: str) -> Any:
    return page.locator(f'#models-list article.card[data-model="{model}"]')


def cache_models(a_flags: str = "") -> str:
    slots = "--slot-bytes-per-token 1000"
    return f"  a:\n    cmd: {fake_cmd(slots, a_flags)}\n  b:\n    cmd: {fake_cmd(slots)}\n"


@ui
@pytest.mark.parametrize("width", [1280, 390])
def test_a_restore_that_worked_shows_on_the_card_and_page(
    gateway: StartGateway, page: Any, width: int
) -> None:
    gw = gateway(cache_models(), extra_top="promptCache: {enabled: true}\n")
    answer = turn(gw, "a", PROMPT)["choices"][0]["message"]["content"]
    turn(gw, "b", "hello")
    turn(gw, "a", PROMPT, answer, "and then?")  # restored: proved by this answer
    gw.wait_for(lambda: row_of(gw, "a")["prompt_cache"]["state"] == "works")
    page.set_viewport_size({"width": width, "height": 860})
    page.goto(gw.url("/ui/#/models"))
    verdict = card(page, "a").locator('[data-role="pcache"]')
    verdict.locator('[data-part="proof"]').wait_for()
    assert verdict.locator('[data-part="state"]').text_content() == "works"
    assert "restored tokens reused" in (verdict.locator('[data-part="proof"]').text_content() or "")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, f"prompt-cache-works-{width}")
    page.goto(gw.url("/ui/#/model?id=a"))
    moves = page.locator('#model-card [data-role="pcache"] [data-part="moves"]')
    moves.wait_for()
    assert "restored" in (moves.text_content() or "")


@ui
def test_restores_that_never_work_show_why_and_the_fix(gateway: StartGateway, page: Any) -> None:
    gw = gateway(cache_models("--slot-restore-noop"), extra_top="promptCache: {enabled: true}\n")
    for _ in range(4):  # three restores that keep nothing: saving stops
        turn(gw, "a", PROMPT, salt="someone")
        turn(gw, "b", "hello")
    assert row_of(gw, "a")["prompt_cache"]["saving"] is False
    page.goto(gw.url("/ui/#/model?id=a"))
    verdict = page.locator('#model-card [data-role="pcache"]')
    verdict.locator('[data-part="why"]').wait_for()
    assert verdict.locator('[data-part="state"]').text_content() == "does not work"
    assert verdict.locator('[data-part="stopped"]').text_content() == " · saving stopped"
    why = verdict.locator('[data-part="why"]').text_content() or ""
    assert "cache_salt" in why
    assert "fix:" in why
    screenshot(page, "prompt-cache-fails")
    page.goto(gw.url("/ui/#/models"))
    on_card = card(page, "a").locator('[data-role="pcache"]')
    on_card.locator('[data-part="state"]').wait_for()
    assert "cache_salt" in (on_card.get_attribute("title") or "")  # the card: as its tooltip
