"""The web UI shows a remembered capability as a memory (issue 30): on a stopped model's card the
context it had on its last run ("last run N", never "reported"), its remembered tags marked
apart from written ones, and on the model's page what was observed and when."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.e2e.conftest import Gateway, chat, fake_cmd, request
from tests.ui.conftest import screenshot

StartGateway = Callable[..., Gateway]

ui = pytest.mark.ui


def card(page: Any, model: str) -> Any:
    return page.locator(f'article.card[data-model="{model}"]')


@ui
def test_a_stopped_cards_memory_is_labelled_as_the_last_run(
    gateway: StartGateway, page: Any
) -> None:
    gw = gateway(
        f"  eye:\n    cmd: {fake_cmd('--modalities vision --template-tools --ctx 3072')}\n"
        "    capabilities: {tools: true}\n"
    )
    assert chat(gw, "eye", max_tokens=1).status == 200
    gw.wait_for(lambda: "observed" in gw.get_json("/v1/models/eye"))
    assert request(gw, "POST", "/api/models/unload/eye").status == 200
    gw.wait_for(lambda: gw.get_json("/v1/models/eye")["state"] == "stopped")

    page.goto(gw.url("/ui/#/models"))
    eye = card(page, "eye")
    eye.locator('[data-role="ctx-observed"]').wait_for()
    assert eye.locator('[data-role="ctx-observed"]').text_content() == "last run 3072"
    assert "last run" in (eye.locator('[data-role="ctx-observed"]').get_attribute("title") or "")
    assert eye.locator('[data-role="ctx-reported"]').count() == 0  # no receipt while stopped
    tags = eye.locator('[data-role="tags"] .tag')
    assert tags.all_text_contents() == ["vision", "function_calling"]
    remembered = eye.locator('[data-role="tags"] .tag[data-remembered="1"]')
    assert remembered.all_text_contents() == ["vision"]  # function_calling is written
    screenshot(page, "capabilities-remembered")

    page.goto(gw.url("/ui/#/model?id=eye"))
    details = page.locator('#model-card [data-role="details"]')
    details.wait_for()
    text = details.inner_text()
    assert "observed (a memory)" in text
    assert "context 3072" in text
    assert "last run" in text
