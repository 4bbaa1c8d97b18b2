"""The web UI, second edition (issue 19): each page says what state things are in at a glance.

One test per finding of the issue, in a real browser (Debian's chromium through Playwright)
against ``python -m modelswap serve`` with the fake backend or the real llama.cpp one.
"""

from __future__ import annotations

import http.client
import itertools
import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    HANG,
    REPO,
    Gateway,
    chat,
    fake_cmd,
    held_cmd,
    llamacpp_cmd,
    request,
    stop_gateway,
)
from tests.ui.conftest import screenshot
from tests.ui.test_webui import vllm_receipt_cmd

StartGateway = Callable[..., Gateway]
MIB = 1024**2
ADMIN_KEY = "sk-ui-admin-0123456789abcdef"
READ_KEY = "sk-ui-monitor-0123456789abcdef"
KEYS = (
    "apiKeys:\n"
    f"  - {{key: {ADMIN_KEY}, name: ops, scopes: [inference, read, admin]}}\n"
    f"  - {{key: {READ_KEY}, name: monitor, scopes: [read]}}\n"
)

ui = pytest.mark.ui


def card(page: Any, model: str) -> Any:
    return page.locator(f'article.card[data-model="{model}"]')


def badge_is(page: Any, model: str, state: str) -> None:
    page.wait_for_function(
        "([m, s]) => { const b = document.querySelector(`article[data-model='${m}'] .badge`);"
        " return b && b.dataset.state === s; }",
        arg=[model, state],
        timeout=HANG * 1000,
    )


def sign_in(page: Any, key: str) -> None:
    page.get_by_label("API key", exact=True).fill(key)
    page.get_by_role("button", name="Sign in").click()


def admin_post(gw: Gateway, path: str) -> int:
    headers = {"Authorization": f"Bearer {ADMIN_KEY}"}
    return request(gw, "POST", path, b"", headers=headers, timeout=HANG).status


# ---- no browser: the read endpoint the header uses -------------------------------------------


def test_whoami_names_the_key_and_its_scopes_never_the_key(gateway: StartGateway) -> None:
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n", extra_top=KEYS)
    reply = request(gw, "GET", "/api/whoami", headers={"Authorization": f"Bearer {READ_KEY}"})
    assert reply.status == 200
    assert reply.json() == {"name": "monitor", "scopes": ["read"], "keys_configured": True}
    assert READ_KEY not in reply.body.decode()
    assert request(gw, "GET", "/api/whoami").status == 401
    wrong = request(gw, "GET", "/api/whoami", headers={"Authorization": "Bearer sk-nope-1234"})
    assert wrong.status == 401


def test_whoami_without_keys_says_full_access(gateway: StartGateway) -> None:
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n")
    body = request(gw, "GET", "/api/whoami").json()
    assert body == {
        "name": None,
        "scopes": ["admin", "inference", "read"],
        "keys_configured": False,
    }


def test_events_snapshot_lists_stopped_models_for_a_read_key(gateway: StartGateway) -> None:
    gw = gateway(
        f"  tiny:\n    cmd: {fake_cmd()}\n  other:\n    cmd: {fake_cmd()}\n", extra_top=KEYS
    )
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
    try:
        conn.request("GET", "/api/events", headers={"Authorization": f"Bearer {READ_KEY}"})
        resp = conn.getresponse()
        assert resp.status == 200
        lines = []
        while (line := resp.readline().decode()) != "\n":
            lines.append(line)
    finally:
        conn.close()
    assert lines[0].startswith("event: snapshot")
    snapshot = json.loads(lines[1].removeprefix("data: "))
    assert {m["id"]: m["state"] for m in snapshot["models"]} == {
        "tiny": "stopped",
        "other": "stopped",
    }


# ---- browser ---------------------------------------------------------------------------------


@ui
def test_read_key_sees_every_page_and_is_told_what_it_may_not_do(
    gateway: StartGateway, page: Any
) -> None:
    """Finding 1 and 10: a monitoring key sees every model card and log source; Load and
    Unload are disabled with the reason; the header names the key and its scopes; a rejected
    key never shows "Sign out"."""
    gw = gateway(
        f"  tiny:\n    cmd: {fake_cmd()}\n  other:\n    cmd: {fake_cmd()}\n", extra_top=KEYS
    )
    assert admin_post(gw, "/api/models/load/tiny") == 200
    page.goto(gw.url("/ui/#/models"))
    page.get_by_role("heading", name="Sign in").wait_for()
    sign_in(page, "sk-wrong-key-123")
    page.locator("#login-error", has_text="not accepted").wait_for()
    assert page.locator("#signout").is_hidden()
    assert page.locator("#whoami").is_hidden()

    sign_in(page, READ_KEY)
    card(page, "other").wait_for()
    badge_is(page, "tiny", "ready")
    assert card(page, "other").locator(".badge").text_content() == "stopped"
    who = page.locator("#whoami")
    who.wait_for()
    assert "monitor" in (who.text_content() or "")
    assert "read" in (who.text_content() or "")
    assert page.locator("#signout").is_visible()
    load = card(page, "other").get_by_role("button", name="Load other", exact=True)
    assert load.is_disabled()
    assert "admin" in (load.get_attribute("title") or "")
    # In words, not only a hover title (touch screens have none); once above the cards, not
    # on every card (issue 32 #10).
    perm = page.locator("#models-perm")
    assert perm.is_visible()
    assert "admin" in (perm.text_content() or "")
    assert card(page, "other").locator('[data-role="perm"]').is_hidden()
    page.locator("#events-status", has_text="live").wait_for()
    assert page.locator("#notice").is_hidden()
    screenshot(page, "models-read-key")

    page.goto(gw.url("/ui/#/logs"))
    options = page.locator("#logs-source option")
    page.wait_for_function("document.querySelectorAll('#logs-source option').length === 3")
    assert options.all_text_contents() == ["gateway", "tiny", "other"]
    for name in ("memory", "activity"):
        page.goto(gw.url(f"/ui/#/{name}"))
        page.locator(f"#page-{name}").wait_for()
        assert page.locator("#notice").is_hidden(), name


@ui
def test_a_failure_says_when_why_and_when_it_retries_and_clears_on_unload(
    gateway: StartGateway, page: Any
) -> None:
    """Finding 3: the red card carries its time, evidence, retry countdown and a log link;
    it is said once — no page-wide copy (issue 32 #3); unloading the model clears it."""
    gw = gateway(
        f"  broken:\n    cmd: {fake_cmd('--fail-start')}\n  fine:\n    cmd: {fake_cmd()}\n",
        extra_top="failureBackoff: 600\n",
    )
    page.goto(gw.url("/ui/#/models"))
    page.locator("#events-status", has_text="live").wait_for()
    broken = card(page, "broken")
    with page.expect_response(lambda r: "/api/models/load/broken" in r.url):
        broken.get_by_role("button", name="Load broken", exact=True).click()
    failure = broken.locator('[data-role="failure"]')
    failure.wait_for()
    badge_is(page, "broken", "failed")
    assert re.search(r"failed at .+ ago", failure.locator('[data-role="fail-when"]').inner_text())
    assert "more" in failure.locator('[data-role="fail-retry"]').inner_text()  # the backoff
    log_link = failure.get_by_role("link", name="its log")
    assert log_link.get_attribute("href") == "#/logs?source=broken"
    page.locator('article.card[data-model="broken"]:not([aria-busy])').wait_for()
    assert page.locator("#notice").is_hidden()  # the card says it; not a second time above
    screenshot(page, "models-failed")

    log_link.click()
    page.locator("#logs-status", has_text="live").wait_for()
    assert page.locator("#logs-source").input_value() == "broken"
    page.locator("#logs-view .line", has_text="failed").first.wait_for()

    page.goto(gw.url("/ui/#/models"))
    failure.wait_for()
    broken.get_by_role("button", name="Unload broken", exact=True).click()
    badge_is(page, "broken", "stopped")
    assert failure.is_hidden()


@ui
def test_gateway_going_away_is_a_clear_state_not_failed_to_fetch(
    gateway: StartGateway, page: Any
) -> None:
    """Finding 10: no raw "Failed to fetch"; stale cards are marked and their buttons off."""
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n")
    page.goto(gw.url("/ui/#/models"))
    page.locator("#events-status", has_text="live").wait_for()
    load = card(page, "tiny").get_by_role("button", name="Load tiny", exact=True)
    assert load.is_enabled()
    stop_gateway(gw)
    banner = page.locator("#offline")
    banner.wait_for()
    assert "unreachable" in (banner.text_content() or "")
    assert load.is_disabled()
    assert page.evaluate("document.body.classList.contains('offline')")
    assert "Failed to fetch" not in page.locator("body").inner_text()
    screenshot(page, "models-offline")


def ms(text: str, label: str) -> int:
    found = re.search(rf"{label} (\d+) ms", text)
    assert found, (label, text)
    return int(found.group(1))


@ui
def test_playground_agrees_with_activity_and_says_how_each_answer_ended(
    gateway: StartGateway, page: Any
) -> None:
    """Findings 2, 4, 5, 6 with the real llama.cpp backend: one TTFT (first token, a cold
    start's load shown apart) in the Playground and in Activity; a max_tokens cut says
    "length"; a stopped answer keeps its mark at the next turn; each answer names its model;
    switching model starts a new thread; the picker shows the model's real state."""
    gw = gateway(f"  smollm2:\n    cmd: {llamacpp_cmd(2048)}\n  tiny:\n    cmd: {fake_cmd()}\n")
    page.goto(gw.url("/ui/#/playground"))
    picker = page.locator("#pg-model")
    page.locator("#pg-model option", has_text="smollm2 · stopped").wait_for(state="attached")
    picker.select_option("smollm2")
    page.get_by_label("Temperature", exact=True).fill("0")
    page.get_by_label("Max tokens", exact=True).fill("6")
    page.get_by_label("Message", exact=True).fill("Write a long story about a lighthouse.")
    page.get_by_role("button", name="Send").click()
    stats = page.locator("#pg-stats")
    page.wait_for_function(
        "document.querySelector('#pg-stats').textContent.includes('(gateway)')",
        timeout=HANG * 1000,
    )
    first = page.locator('.msg[data-role="assistant"]').first
    assert first.locator(".role").text_content() == "assistant · smollm2"
    assert first.get_attribute("data-finish") == "length"
    assert "length" in (first.locator('[data-role="meta"]').text_content() or "")
    text = stats.text_content() or ""
    ttft = ms(text, "TTFT")
    assert "load" in text, text  # a cold start: its load is shown, and not as TTFT
    row_id = stats.get_attribute("data-activity-id")
    page.locator("#pg-model option", has_text="smollm2 · ready").wait_for(state="attached")

    # Stop: the mark stays on that answer at the next turn.
    page.get_by_label("Max tokens", exact=True).fill("1500")
    page.get_by_label("Message", exact=True).fill("Write a very long story about the sea.")
    page.get_by_role("button", name="Send").click()
    page.wait_for_function("document.querySelector('#pg-stats').textContent.includes('tokens')")
    page.get_by_role("button", name="Stop").click()
    stopped = page.locator('.msg[data-role="assistant"]').nth(1)
    page.wait_for_function(
        "document.querySelectorAll('.msg[data-role=assistant]')[1].dataset.finish === 'stopped'"
    )
    page.get_by_label("Max tokens", exact=True).fill("4")
    page.get_by_label("Message", exact=True).fill("Say hi.")
    page.get_by_role("button", name="Send").click()
    page.wait_for_function(
        "document.querySelectorAll('.msg[data-role=assistant]').length === 3 &&"
        " document.querySelector('#pg-stats').textContent.includes('done')",
        timeout=HANG * 1000,
    )
    assert stopped.get_attribute("data-finish") == "stopped"
    assert "stopped" in (stopped.locator('[data-role="meta"]').text_content() or "")
    screenshot(page, "playground")

    # Switching model starts a new thread: tiny never receives smollm2's conversation.
    picker.select_option("tiny")
    page.locator('[data-role="thread-note"]', has_text="smollm2").wait_for()
    assert page.locator(".msg").count() == 0
    page.get_by_label("Message", exact=True).fill("Hello?")
    page.get_by_role("button", name="Send").click()
    answer = page.locator('.msg[data-role="assistant"]')
    page.wait_for_function(
        "document.querySelector('.msg[data-role=assistant]')?.dataset.finish !== undefined"
        " && document.querySelector('#pg-stats').textContent.includes('done')",
        timeout=HANG * 1000,
    )
    assert answer.locator(".role").text_content() == "assistant · tiny"
    assert page.evaluate("chat.messages.length") == 2

    # Activity shows the same TTFT for the same request, and its load apart.
    page.goto(gw.url("/ui/#/activity"))
    row = page.locator(f'#activity-table tbody tr[data-id="{row_id}"]')
    row.wait_for()
    cells = dict(
        zip(
            page.locator("#activity-table thead th").all_text_contents(),
            row.locator("td").all_text_contents(),
            strict=True,
        )
    )
    assert abs(ms(f"TTFT {cells['TTFT']}", "TTFT") - ttft) <= 1, (cells, text)
    assert cells["load"], cells
    assert cells["first byte"].endswith(" ms"), cells  # shown apart from the TTFT


@ui
def test_playground_error_is_part_of_the_conversation_not_history(
    gateway: StartGateway, page: Any
) -> None:
    """Finding 4: a failed turn is a visible error bubble; no empty assistant bubble is left,
    and the failed turn is not sent as history next time."""
    gw = gateway(f"  broken:\n    cmd: {fake_cmd('--fail-start')}\n")
    page.goto(gw.url("/ui/#/playground"))
    page.locator("#pg-model option", has_text="broken").wait_for(state="attached")
    page.get_by_label("Message", exact=True).fill("Hello?")
    page.get_by_role("button", name="Send").click()
    error = page.locator('.msg[data-role="error"]')
    error.wait_for()
    assert error.is_visible()
    assert (error.locator(".content").text_content() or "").strip()
    assert page.locator('.msg[data-role="assistant"]').count() == 0
    assert page.evaluate("chat.messages") == []
    assert page.locator(".msg.user.unsent").count() == 1
    page.locator("#pg-model option", has_text="broken · failed").wait_for(state="attached")
    screenshot(page, "playground-error")


SMOL_LOG = REPO / "tests" / "data" / "startup-logs" / "llamacpp-cpu-smollm2.log"


@ui
def test_memory_page_colours_labels_limit_free_and_sources(
    gateway: StartGateway, page: Any, tmp_path: Path
) -> None:
    """Finding 7: distinct colours; labels that never overlap (even for thin bands); the
    limit's value on its line and in the legend; starting models are not free; each number
    says where it came from, and llama.cpp's total-less-KV is not called measured weights."""
    release = tmp_path / "release-slow"
    gw = gateway(
        f"  a:\n    cmd: {fake_cmd()}\n    uses: {{ram: 16MiB}}\n"
        f"  b:\n    cmd: {fake_cmd()}\n    uses: {{ram: 16MiB}}\n"
        f"  c:\n    cmd: {fake_cmd()}\n    uses: {{ram: 16MiB}}\n"
        f"  smol:\n    cmd: {fake_cmd(f'--print-log {SMOL_LOG}')}\n    uses: {{ram: 600MiB}}\n"
        # big's RAM is declared too: undeclared, its measured peak joins the RAM basin whenever
        # the sampler has seen it, which a test cannot wait for deterministically
        f"  big:\n    cmd: {vllm_receipt_cmd()}\n    uses: {{gpu0: 84GiB, ram: 16MiB}}\n"
        f"  slow:\n    cmd: {held_cmd(release)}\n    uses: {{ram: 128MiB}}\n",
        extra_top="resources: {ram: 1GiB, gpu0: 96GiB}\n",
    )
    for model in ("a", "b", "c", "smol", "big"):
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    loader = threading.Thread(target=gw.post, args=("/api/models/load/slow", b""), daemon=True)
    loader.start()
    gw.wait_for(lambda: gw.running().get("slow", {}).get("state") == "starting")
    page.goto(gw.url("/ui/#/memory"))
    ram = page.locator('svg[data-resource="ram"]')
    ram.locator('rect.band[data-model="slow"]').wait_for()

    swatches = page.evaluate(
        "[...document.querySelectorAll('.legend li[data-model]')]"
        ".map(li => [li.dataset.model, li.querySelector('.swatch').style.background])"
    )
    colours: dict[str, set[str]] = {}
    for name, colour in swatches:
        colours.setdefault(name, set()).add(colour)
    assert set(colours) == {"a", "b", "c", "smol", "big", "slow"}, swatches
    assert all(len(c) == 1 for c in colours.values()), swatches  # one colour per model
    assert len({c for (c,) in colours.values()}) == 6, swatches  # no two models share one

    boxes = ram.evaluate(
        "(svg) => [...svg.querySelectorAll('text.label')].map(t => {"
        " const b = t.getBBox(); return [b.y, b.y + b.height]; })"
    )
    assert len(boxes) == 6  # a, b, c, smol, slow, big
    boxes.sort()
    for (_, bottom), (top, _) in itertools.pairwise(boxes):
        assert bottom <= top + 0.5, boxes  # four 16 MiB bands: their labels do not overlap

    free = page.locator('.basin[data-resource="ram"] [data-role="free"]')
    expected_free = 1024 - (4 * 16 + 600 + 128)  # the starting model's share is not free
    assert int(free.get_attribute("data-free-bytes") or 0) == expected_free * MIB
    assert "starting" in (free.text_content() or "")

    smol = page.locator('.basin[data-resource="ram"] li[data-model="smol"]')
    smol.filter(has_text="rest").wait_for()  # once the receipt's KV line has been read
    smol_text = smol.text_content() or ""
    assert "rest (declared − KV)" in smol_text, smol_text
    assert "not a measured weights size" in smol_text
    assert "weights" not in smol_text.replace("weights size", "")
    big = page.locator('.basin[data-resource="gpu0"] li[data-model="big"]')
    big.filter(has_text="receipt").wait_for()  # its receipt may be read just after READY
    assert "declared" in (page.locator('li[data-model="a"]').text_content() or "")

    gpu = page.locator('svg[data-resource="gpu0"]')
    assert "limit 86.4 GiB" in (gpu.locator("text.limit-label").text_content() or "")
    limit_item = page.locator('.basin[data-resource="gpu0"] [data-role="limit"]')
    assert "86.4 GiB" in (limit_item.text_content() or "")
    assert "0.9" in (limit_item.text_content() or "")
    screenshot(page, "memory")
    release.touch()
    loader.join(timeout=HANG)


@ui
def test_context_cell_explains_slots_training_and_mismatch_in_words(
    gateway: StartGateway, page: Any
) -> None:
    """Finding 8: per-slot context (-c 8192 -np 2 → 4096), n_ctx_train, and a mismatch said
    in visible words (no hover needed on a touch screen)."""
    gw = gateway(
        f"  slots:\n    cmd: {fake_cmd('--ctx 4096 -c 8192 -np 2')}\n    uses: {{ram: 64MiB}}\n"
        f"  short:\n    cmd: {fake_cmd('--flavor vllm --ctx 4096 --max-model-len 8192')}\n"
        "    uses: {ram: 64MiB}\n",
        extra_top="resources: {ram: 1GiB}\n",  # room for both: neither swaps the other out
    )
    for model in ("slots", "short"):
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    page.goto(gw.url("/ui/#/models"))
    slots = card(page, "slots")
    slots.locator('[data-role="ctx-reported"]').wait_for()
    explained = slots.locator('[data-role="ctx-slots"]').inner_text()
    assert "-c 8192" in explained, explained
    assert "-np 2" in explained
    assert "4096 each" in explained
    assert slots.locator('[data-role="ctx-configured"]').text_content() == "configured 4096"
    assert "trained for 8192" in slots.locator('[data-role="ctx-train"]').inner_text()
    assert slots.locator('[data-role="ctx-warn"]').count() == 0
    warn = card(page, "short").locator('[data-role="ctx-warn"]')
    warn.wait_for()
    assert warn.is_visible()
    words = warn.inner_text()
    assert "less context than asked" in words, words
    assert "4096" in words
    assert "8192" in words
    screenshot(page, "models-context")


@ui
def test_activity_filters_pages_updates_live_and_fits_a_phone(
    gateway: StartGateway, browser: Any
) -> None:
    """Finding 9: filters, paging, live rows; a 404 row names what was asked for (bounded);
    sparklines with axes; at 390 px status, tokens and tok/s are on screen, no sideways
    scroll."""
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n")
    for _ in range(101):
        assert chat(gw, "tiny").status == 200
    long_name = "no-such-model-" + "x" * 200
    assert chat(gw, long_name).status == 404
    context = browser.new_context(viewport={"width": 390, "height": 844})
    context.set_default_timeout(HANG * 1000)
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(gw.url("/ui/#/activity"))
        rows = page.locator("#activity-table tbody tr")
        page.wait_for_function(
            "document.querySelectorAll('#activity-table tbody tr').length >= 100"
        )
        assert rows.count() == 100  # one page
        missing = page.locator('#activity-table tbody tr[data-status="404"]')
        asked = missing.locator("td.asked").inner_text()
        assert "no-such-model-xxx" in asked
        assert "no such model" in asked
        assert len(asked) < 120, asked  # bounded, never the whole 214 characters
        # A phone: no sideways scroll, and the columns that matter are on screen.
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        wrap = page.locator("#page-activity .table-wrap")
        assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth")
        for label in ("status", "tokens", "tok/s", "TTFT"):
            box = page.locator(f'#activity-table th button:text-is("{label}")').bounding_box()
            assert box is not None
            assert box["x"] + box["width"] <= 390, label
        chart = page.locator('.chart[data-model="tiny"]')
        assert chart.locator(".axis").count() == 1
        assert "tok/s" in " ".join(chart.locator(".axis-label").all_text_contents())
        screenshot(page, "activity-390")

        page.get_by_role("button", name="Older").click()
        page.wait_for_function(
            "document.querySelectorAll('#activity-table tbody tr').length === 102"
        )
        assert page.get_by_role("button", name="Older").is_disabled()  # that was all
        page.locator("#activity-outcome").select_option("error")
        assert rows.count() == 1
        page.locator("#activity-outcome").select_option("")

        page.locator("#activity-status", has_text="live").wait_for()
        newest = int(rows.first.get_attribute("data-id") or 0)
        assert chat(gw, "tiny").status == 200  # appears without a click
        page.wait_for_function(
            "(id) => Number(document.querySelector('#activity-table tbody tr').dataset.id) > id",
            arg=newest,
        )
        page.locator("#activity-model").select_option("tiny")
        page.wait_for_function(
            "[...document.querySelectorAll('#activity-table tbody tr')]"
            ".every(r => r.children[1].textContent === 'tiny')"
        )
    finally:
        context.close()
    assert not errors, errors


@ui
def test_every_page_fits_a_phone_and_logs_no_console_error(browser: Any, tmp_path: Path) -> None:
    """The screenshot script's checks as a test: at 390 px no page scrolls sideways, light or
    dark, and no page logs a console error (a ready, a failed and a starting model)."""
    from tests.ui.screenshots import PHONE, demo_gateway, prepare, shoot

    with demo_gateway(tmp_path) as (gw, release):
        starter = prepare(gw)
        problems = shoot(browser, gw, dark=False, size=PHONE, out=tmp_path)
        problems += shoot(browser, gw, dark=True, size=PHONE, out=tmp_path)
        release.touch()
        starter.join(timeout=HANG)
    assert not problems, problems


SECRET = "sk-upstream-secret-0123456789abcdef"


@ui
@pytest.mark.parametrize("capture", [True, False])
def test_model_page_unload_all_capture_dialog_and_log_filters(
    gateway: StartGateway, page: Any, capture: bool
) -> None:
    """llama-swap parity: a page per model (details, log, requests); Unload all with a ready
    count; a request's bodies in a dialog only with activity.capture (redacted); Logs regex
    and wrap."""
    gw = gateway(
        f"  tiny:\n    cmd: {fake_cmd()}\n    uses: {{ram: 64MiB}}\n"
        "    aliases: [small]\n"
        f"  other:\n    cmd: {fake_cmd()}\n    uses: {{ram: 64MiB}}\n"
        f"    env: ['HF_TOKEN={SECRET}']\n",
        extra_top=f"resources: {{ram: 1GiB}}\nactivity: {{capture: {str(capture).lower()}}}\n",
    )
    for model in ("tiny", "other"):
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    assert chat(gw, "tiny", messages=[{"role": "user", "content": f"say {SECRET}"}]).status == 200

    page.goto(gw.url("/ui/#/models"))
    summary = page.locator("#models-summary")
    page.wait_for_function(
        "document.querySelector('#models-summary').textContent.startsWith('2 of 2')"
    )
    card(page, "tiny").get_by_role("link", name="tiny").click()
    page.locator("#page-model").wait_for()
    assert page.locator("#model-title").text_content() == "tiny"
    page.locator('#model-card [data-role="details"]', has_text="small").wait_for()
    page.locator("#model-log .line").first.wait_for()
    page.locator("#model-activity tbody tr").first.wait_for()
    screenshot(page, "model-page")

    page.goto(gw.url("/ui/#/activity"))
    page.locator("#activity-table tbody tr").first.wait_for()
    page.locator("button.row-open").first.click()
    dialog = page.locator("dialog#capture")
    dialog.wait_for()
    text = dialog.inner_text()
    assert SECRET not in text  # never, captured or not
    if capture:
        body = dialog.locator('[data-role="request-body"]').inner_text()
        assert "say" in body
        assert dialog.locator('[data-role="no-capture"]').count() == 0
    else:
        assert dialog.locator('[data-role="request-body"]').count() == 0
        assert "activity.capture" in dialog.locator('[data-role="no-capture"]').inner_text()
    page.get_by_role("button", name="Close request details").click()
    assert dialog.is_hidden()

    page.goto(gw.url("/ui/#/logs?source=tiny"))
    view = page.locator("#logs-view")
    view.locator(".line").first.wait_for()
    page.locator("#logs-regex").check()
    page.locator("#logs-search").fill("n_ctx\\s*=")
    view.locator(".line").first.wait_for()
    assert all(re.search(r"n_ctx\s*=", t) for t in view.locator(".line").all_text_contents())
    page.locator("#logs-search").fill("(")
    page.locator("#logs-regex-error", has_text="not a regular expression").wait_for()
    page.locator("#logs-wrap").uncheck()
    assert page.evaluate("document.querySelector('#logs-view').classList.contains('nowrap')")

    page.goto(gw.url("/ui/#/models"))
    page.wait_for_function(
        "document.querySelector('#models-summary').textContent.startsWith('2 of 2')"
    )
    page.get_by_role("button", name="Unload all").click()
    page.wait_for_function(
        "document.querySelector('#models-summary').textContent.startsWith('0 of 2')"
    )
    page.wait_for_function("document.querySelector('#unload-all').disabled")  # nothing runs
    assert "0 of 2 ready" in (summary.text_content() or "")


@ui
def test_capability_tags_and_settings_theme_and_build(gateway: StartGateway, page: Any) -> None:
    """llama-swap parity: declared capabilities as tags on the card (as llama-swap lists them:
    image input is `vision`, tools `function_calling`); Settings switches the
    theme (kept in the browser) and shows the build and the key in use."""
    caps = "{in: [text, image], tools: true}"
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n    capabilities: {caps}\n")
    page.goto(gw.url("/ui/#/models"))
    tags = card(page, "tiny").locator('[data-role="tags"] .tag')
    tags.first.wait_for()
    assert tags.all_text_contents() == ["vision", "function_calling"]
    page.get_by_role("link", name="Settings").click()
    page.locator('#settings-build [data-role="version"]').wait_for()
    assert "modelswap" in page.locator('#settings-build [data-role="version"]').inner_text()
    assert "full access" in page.locator('#settings-build [data-role="key"]').inner_text()
    page.locator("#settings-theme").select_option("dark")
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(18, 20, 23)", background
    page.reload()
    page.locator("#page-settings").wait_for()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"  # kept
    screenshot(page, "settings-dark")
    page.locator("#settings-theme").select_option("auto")
    assert page.evaluate("document.documentElement.dataset.theme") is None
