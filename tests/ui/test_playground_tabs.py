"""The Playground's tabs (issue 19, parity): Chat (system prompt, reasoning, image attachments,
edit and regenerate, markdown), Images, Speech, Transcription, Rerank and a Load test, each in a
real browser against ``python -m modelswap serve`` with a fake backend that speaks that API
(tests/fakes/playground_backend.py), and Rerank against the real llama.cpp server too.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import HANG, REPO, Gateway, llamacpp_cmd, request
from tests.fakes.playground_backend import png, wav
from tests.ui.conftest import screenshot

StartGateway = Callable[..., Gateway]
PLAYGROUND_FAKE = REPO / "tests" / "fakes" / "playground_backend.py"
READ_KEY = "sk-ui-monitor-0123456789abcdef"
PHONE = {"width": 390, "height": 844}
TABS = ("chat", "images", "speech", "transcription", "rerank", "loadtest")
MARKDOWN = (
    "Here is **bold** and *italic* with `inline code`.\n\n"
    "```python\nprint('<b>hi</b>')\n" + "x = 1  # a long line " * 8 + "\n```\n\n"
    "- first item\n- second [link](https://example.invalid/docs)\n\n"
    "<script>window.pwned = 1</script> and [bad](javascript:alert(1))"
)

ui = pytest.mark.ui


def fake(*flags: str) -> str:
    """A YAML scalar running the Playground fake with ``flags``."""
    words = " ".join(shlex.quote(f) for f in flags)
    return json.dumps(f'"{sys.executable}" "{PLAYGROUND_FAKE}" --port ${{PORT}} {words}')


def tab(page: Any, gw: Gateway, name: str) -> None:
    page.goto(gw.url(f"/ui/#/playground?tab={name}"))
    page.locator(f"#pg-tab-{name}").wait_for()


def wait_done(page: Any, count: int) -> None:
    """The ``count``-th answer finished and the stats say how it ended."""
    page.wait_for_function(
        "n => document.querySelectorAll('.msg[data-role=assistant][data-finish]').length === n"
        " && / · (done|stopped)/.test(document.querySelector('#pg-stats').textContent)",
        arg=count,
        timeout=HANG * 1000,
    )


def answer_text(page: Any, index: int = -1) -> str:
    answers = page.locator('.msg[data-role="assistant"] .content')
    return str(answers.nth(index if index >= 0 else answers.count() - 1).inner_text())


def activity_count(gw: Gateway, model: str) -> int:
    rows = request(gw, "GET", f"/api/activity?model={model}&limit=1000").json()["data"]
    return len([r for r in rows if r["route"] == "/v1/chat/completions"])


def no_sideways_scroll(page: Any) -> None:
    for name in TABS:
        page.get_by_role("tab", name={"loadtest": "Load test"}.get(name, name.title())).click()
        page.locator(f"#pg-tab-{name}").wait_for()
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], f"{name}: {width} px wide"


@ui
def test_chat_sends_the_system_prompt_images_and_edits_and_regenerates(
    gateway: StartGateway, page: Any
) -> None:
    gw = gateway(f"  echo:\n    cmd: {fake()}\n")
    tab(page, gw, "chat")
    page.locator("#pg-model option", has_text="echo").wait_for(state="attached")
    page.get_by_label("System prompt", exact=True).fill("You are terse.")
    picture = png((200, 30, 30))
    page.locator("#pg-attach").set_input_files(
        {"name": "red.png", "mimeType": "image/png", "buffer": picture}
    )
    page.locator("#pg-attachments .chip", has_text="red.png").wait_for()
    # Too big: refused in words, nothing attached.
    page.locator("#pg-attach").set_input_files(
        {"name": "huge.png", "mimeType": "image/png", "buffer": b"\x89PNG" + b"0" * (5 << 20)}
    )
    note = page.locator("#pg-attach-note")
    note.wait_for()
    assert "huge.png" in note.inner_text()
    assert "capped at 4.0 MiB" in note.inner_text()
    assert page.locator("#pg-attachments .chip").count() == 1

    page.get_by_label("Message", exact=True).fill("Hello there")
    page.get_by_role("button", name="Send", exact=True).click()
    wait_done(page, 1)
    first = answer_text(page)
    assert "system: You are terse." in first  # the backend saw the system message first
    assert f"image_url data:image/png;base64 ({len(picture)} bytes)" in first
    assert "parts: text, image_url" in first
    assert "last: Hello there" in first
    assert page.locator(".msg.user .thumbs img").count() == 1
    assert page.locator("#pg-attachments .chip").count() == 0  # sent, so cleared

    # Regenerate: the same turns again, one answer shown, two requests made.
    page.get_by_role("button", name="Regenerate", exact=True).click()
    wait_done(page, 1)
    assert page.locator('.msg[data-role="assistant"]').count() == 1
    assert "turns: 2" in answer_text(page)
    gw.wait_for(lambda: activity_count(gw, "echo") == 2)
    assert page.evaluate("chat.messages.map(m => m.role)") == ["user", "assistant"]

    page.get_by_label("Message", exact=True).fill("Second")
    page.get_by_role("button", name="Send", exact=True).click()
    wait_done(page, 2)
    assert "turns: 4" in answer_text(page)
    assert "last: Second" in answer_text(page)

    # Edit the first turn: it and the turns after it leave; its text and image come back.
    page.locator(".msg.user").first.get_by_role("button", name="Edit").click()
    assert page.locator(".msg").count() == 0
    assert page.get_by_label("Message", exact=True).input_value() == "Hello there"
    assert page.locator("#pg-attachments .chip", has_text="red.png").count() == 1
    page.get_by_label("Message", exact=True).fill("Edited")
    page.get_by_role("button", name="Send", exact=True).click()
    wait_done(page, 1)
    edited = answer_text(page)
    assert "turns: 2" in edited
    assert "last: Edited" in edited
    assert "image_url" in edited
    screenshot(page, "playground-chat-tools", publish=False)


@ui
def test_reasoning_is_apart_and_markdown_is_built_never_parsed_as_html(
    gateway: StartGateway, page: Any, tmp_path: Path
) -> None:
    answer = tmp_path / "answer.md"
    answer.write_text(MARKDOWN)
    reasoning = "First I consider the question."
    gw = gateway(
        f"  thinker:\n    cmd: {fake('--reasoning', reasoning, '--answer-file', str(answer))}\n"
    )
    tab(page, gw, "chat")
    page.locator("#pg-model option", has_text="thinker").wait_for(state="attached")
    page.get_by_label("Message", exact=True).fill("Explain.")
    page.get_by_role("button", name="Send", exact=True).click()
    wait_done(page, 1)
    bubble = page.locator('.msg[data-role="assistant"]')
    block = bubble.locator('details[data-role="reasoning"]')
    assert block.locator("summary").inner_text() == "Reasoning"
    assert block.get_attribute("open") is None  # collapsed once the answer began
    block.locator("summary").click()
    assert block.locator(".reasoning-text").inner_text().strip() == reasoning
    content = bubble.locator(".content")
    assert "consider" not in content.inner_text()  # the answer is apart from the reasoning
    assert content.locator("pre code").inner_text().startswith("print('<b>hi</b>')\nx = 1")
    assert content.locator("pre b").count() == 0
    assert content.locator("li").count() == 2
    assert content.locator("strong").inner_text() == "bold"
    assert content.locator("em").inner_text() == "italic"
    assert content.locator("p code").inner_text() == "inline code"
    link = content.locator("a")
    assert link.count() == 1  # the javascript: link stays text
    assert link.get_attribute("rel") == "noopener noreferrer"
    assert link.get_attribute("href") == "https://example.invalid/docs"
    assert "<script>window.pwned = 1</script>" in content.inner_text()
    assert "[bad](javascript:alert(1))" in content.inner_text()
    assert page.locator("#pg-chat script").count() == 0
    assert page.evaluate("window.pwned === undefined")
    history = page.evaluate("chat.messages")
    assert history[1]["content"] == MARKDOWN  # reasoning is never sent back as history
    screenshot(page, "playground-markdown")
    page.set_viewport_size(PHONE)  # a long code line scrolls in its block, not the page
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]


@ui
def test_images_speech_transcription_and_rerank_tabs_fit_a_phone(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(
        f"  echo:\n    cmd: {fake()}\n"
        f"  painter:\n    cmd: {fake('--serves', 'images')}\n"
        "    capabilities: {in: [text], out: [image]}\n"
        f"  chatonly:\n    cmd: {fake('--serves', 'chat')}\n",
        extra_top="activity: {capture: true}\n",
    )
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(HANG * 1000)
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        tab(page, gw, "images")
        images_models = page.locator("#pg-images-model option")
        page.wait_for_function("document.querySelectorAll('#pg-images-model option').length === 3")
        # The model whose capabilities fit first, then those that list none (issue 32 #4).
        assert [o.split(" ·")[0] for o in images_models.all_text_contents()] == [
            "painter",
            "echo",
            "chatonly",
        ]
        chat_models = page.locator("#pg-model option").all_text_contents()
        assert not any(o.startswith("painter") for o in chat_models)  # declares images only
        page.locator("#pg-images-model").select_option("painter")
        page.locator("#pg-tab-images").get_by_label("Prompt", exact=True).fill("a red lighthouse")
        page.get_by_role("button", name="Generate", exact=True).click()
        image = page.locator("#pg-images-out img")
        image.wait_for()
        assert (image.get_attribute("src") or "").startswith("data:image/png;base64,iVBOR")
        page.wait_for_function("document.querySelector('#pg-images-out img').naturalWidth === 256")
        # A backend that does not serve images: its refusal, in the API's shape.
        page.locator("#pg-images-model").select_option("chatonly")
        page.get_by_role("button", name="Generate", exact=True).click()
        refusal = page.locator('#pg-images-out [data-role="error"]')
        refusal.wait_for()
        assert "404" in refusal.inner_text()
        assert "does not serve" in refusal.inner_text()
        assert json.loads(refusal.locator("pre.body").inner_text())["error"]["code"] == 404

        tab(page, gw, "speech")
        page.wait_for_function("document.querySelectorAll('#pg-speech-model option').length")
        page.get_by_label("Text", exact=True).fill("Hello world")
        page.get_by_label("Voice", exact=True).fill("nova")
        page.get_by_label("Format", exact=True).select_option("wav")
        page.get_by_role("button", name="Speak", exact=True).click()
        audio = page.locator('#pg-speech-out audio[data-role="audio"]')
        audio.wait_for()
        assert (audio.get_attribute("src") or "").startswith("data:audio/wav;base64,")
        page.wait_for_function(
            "document.querySelector('#pg-speech-out audio').duration > 0.3", timeout=HANG * 1000
        )
        rows = request(gw, "GET", "/api/activity?model=echo").json()["data"]
        asked = [json.loads(r["request_body"]) for r in rows if r["route"] == "/v1/audio/speech"]
        assert asked == [
            {"model": "echo", "input": "Hello world", "voice": "nova", "response_format": "wav"}
        ]

        tab(page, gw, "transcription")
        page.wait_for_function("document.querySelectorAll('#pg-transcription-model').length")
        clip = wav(440.0)
        page.locator("#pg-transcription-file").set_input_files(
            {"name": "clip.wav", "mimeType": "audio/wav", "buffer": clip}
        )
        page.get_by_role("button", name="Transcribe", exact=True).click()
        transcript = page.locator('[data-role="transcript"]')
        transcript.wait_for()
        # Routed by the form's model field, the file forwarded intact.
        assert transcript.inner_text() == f"clip.wav: {len(clip)} bytes, model echo"

        tab(page, gw, "rerank")
        page.get_by_label("Query", exact=True).fill("red apple")
        page.get_by_label("Documents (one a line)", exact=True).fill(
            "a red car\nred apple pie\nblue sky"
        )
        page.get_by_role("button", name="Rerank", exact=True).click()
        ranking = page.locator('#pg-rerank-out [data-role="ranking"] tbody tr')
        ranking.first.wait_for()
        assert ranking.count() == 3
        assert ranking.first.locator("td").all_text_contents() == [
            "1",
            "1.0000",
            "#1 red apple pie",
        ]
        assert ranking.nth(1).locator("td").nth(2).inner_text() == "#0 a red car"
        screenshot(page, "playground-rerank")

        # A phone, light and dark: no tab scrolls sideways (with their results shown).
        page.set_viewport_size(PHONE)
        no_sideways_scroll(page)
        page.emulate_media(color_scheme="dark")
        no_sideways_scroll(page)
    finally:
        context.close()
    assert not errors, errors


@ui
def test_load_test_counts_match_n_stop_stops_and_bounds_hold(
    gateway: StartGateway, page: Any
) -> None:
    gw = gateway(f"  echo:\n    cmd: {fake()}\n  slow:\n    cmd: {fake('--token-delay', '0.5')}\n")
    tab(page, gw, "loadtest")
    page.wait_for_function("document.querySelectorAll('#pg-loadtest-model option').length === 2")
    page.locator("#pg-loadtest-model").select_option("echo")
    page.get_by_label("Requests (N)", exact=True).fill("12")
    page.get_by_label("Concurrency (C)", exact=True).fill("3")
    page.get_by_role("button", name="Start", exact=True).click()
    result = page.locator('[data-role="load-result"][data-state="finished"]')
    result.wait_for()

    def cell(name: str) -> str:
        return str(page.locator(f'[data-role="load-result"] dd[data-role="{name}"]').inner_text())

    assert (cell("ok"), cell("errors"), cell("sent")) == ("12", "0", "12 of 12")
    assert cell("TTFT-p50").endswith(" ms")
    assert cell("TTFT-p95").endswith(" ms")
    assert cell("tok-s-p50").endswith(" tok/s")
    gw.wait_for(lambda: activity_count(gw, "echo") == 12)  # the gateway saw exactly N
    # The final numbers are the gateway's own rows for this run (as Activity shows them).
    page.locator('dd[data-role="measured-by"]', has_text="activity log").wait_for()
    rows = request(gw, "GET", "/api/activity?model=echo&limit=1000").json()["data"]
    ttfts = sorted(r["ttft"] for r in rows if r["request_id"].startswith("loadtest-"))
    assert len(ttfts) == 12
    # Nearest rank: p50 is the 6th of 12, p95 the 12th (within the display's rounding).
    assert abs(float(cell("TTFT-p50").removesuffix(" ms")) - ttfts[5] * 1000) <= 1
    assert abs(float(cell("TTFT-p95").removesuffix(" ms")) - ttfts[11] * 1000) <= 1

    # Bounded: N over 1000 or C over 64 is refused before anything is sent.
    page.get_by_label("Requests (N)", exact=True).fill("1001")
    assert page.evaluate("document.querySelector('#pg-loadtest-n').checkValidity()") is False
    page.get_by_label("Requests (N)", exact=True).fill("10")
    page.get_by_label("Concurrency (C)", exact=True).fill("65")
    assert page.evaluate("document.querySelector('#pg-loadtest-c').checkValidity()") is False

    # Stop: nothing new starts, the ones in flight are cut, the counts add up.
    page.locator("#pg-loadtest-model").select_option("slow")
    page.get_by_label("Requests (N)", exact=True).fill("1000")
    page.get_by_label("Concurrency (C)", exact=True).fill("2")
    page.get_by_role("button", name="Start", exact=True).click()
    page.wait_for_function(
        "Number(document.querySelector('[data-role=load-result] dd[data-role=ok]')"
        "?.textContent) >= 1",
        timeout=HANG * 1000,
    )
    page.get_by_role("button", name="Stop", exact=True).click()
    page.locator('[data-role="load-result"][data-state="stopped"]').wait_for()
    ok, errors, stopped = int(cell("ok")), int(cell("errors")), int(cell("stopped"))
    sent = int(cell("sent").split(" of ")[0])
    assert ok + errors + stopped == sent < 1000
    assert stopped >= 1
    assert errors == 0
    assert "stopped" in (page.locator("#pg-loadtest-status").inner_text())
    screenshot(page, "playground-loadtest")


@ui
def test_a_read_key_sees_every_tab_with_sending_disabled_and_why(
    gateway: StartGateway, page: Any
) -> None:
    keys = f"apiKeys:\n  - {{key: {READ_KEY}, name: monitor, scopes: [read]}}\n"
    gw = gateway(f"  echo:\n    cmd: {fake()}\n", extra_top=keys)
    page.goto(gw.url("/ui/#/playground?tab=rerank"))
    page.get_by_label("API key", exact=True).fill(READ_KEY)
    page.get_by_role("button", name="Sign in").click()
    page.locator("#pg-scope", has_text="inference").wait_for()
    for name in TABS:
        page.get_by_role("tab", name={"loadtest": "Load test"}.get(name, name.title())).click()
        go = page.locator("#pg-send" if name == "chat" else f"#pg-{name}-go")
        assert go.is_disabled(), name
        if name != "chat":
            assert "inference" in (go.get_attribute("title") or ""), name
            page.locator(f"#pg-{name}-model option", has_text="echo").wait_for(state="attached")
    # The keyboard: arrow keys move between the tabs, wrapping round.
    page.get_by_role("tab", name="Load test").focus()
    page.keyboard.press("ArrowRight")
    assert page.get_by_role("tab", name="Chat").get_attribute("aria-selected") == "true"
    assert page.locator("#pg-tab-chat").is_visible()
    page.keyboard.press("ArrowLeft")
    assert page.locator("#pg-tab-loadtest").is_visible()


@ui
def test_rerank_tab_against_the_real_llamacpp_server(gateway: StartGateway, page: Any) -> None:
    """llama.cpp serves /v1/rerank with --reranking even for SmolLM2 (a chat model without a
    reranking head: the scores are not meaningful, but the API and the tab are exercised)."""
    gw = gateway(f"  smol-rerank:\n    cmd: {llamacpp_cmd(2048, '--reranking')}\n")
    tab(page, gw, "rerank")
    page.locator("#pg-rerank-model option", has_text="smol-rerank").wait_for(state="attached")
    page.get_by_label("Query", exact=True).fill("red apple")
    page.get_by_label("Documents (one a line)", exact=True).fill("a red car\nred apple pie")
    page.get_by_role("button", name="Rerank", exact=True).click()
    rows = page.locator('#pg-rerank-out [data-role="ranking"] tbody tr')
    rows.first.wait_for(timeout=HANG * 3000)  # a cold start of the real server, then two scores
    assert rows.count() == 2
    scores = [float(rows.nth(i).locator("td").nth(1).inner_text()) for i in range(2)]
    assert scores == sorted(scores, reverse=True)
    assert {rows.nth(i).get_attribute("data-index") for i in range(2)} == {"0", "1"}
