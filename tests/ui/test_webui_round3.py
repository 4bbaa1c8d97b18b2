"""The web UI's third round (issue 32): the eviction on the evicted model's card and page (#2)
and findings 3, 4, 6–10, each checked in a real browser (Debian's chromium through Playwright)
at desktop size and at 390 px, in the light and the dark theme, against ``python -m modelswap
serve`` with fake backends.

Each test drives its gateway once, then looks at the result in the four views (``VIEWS``); a
view also fails when its page scrolls sideways or throws."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import (
    HANG,
    REPO,
    Gateway,
    chat,
    chat_body,
    fake_cmd,
    request,
    stop_gateway,
)
from tests.ui.conftest import screenshot
from tests.ui.test_pages_parity import fake_gpu  # noqa: F401 (a fixture)
from tests.ui.test_playground_tabs import fake
from tests.ui.test_webui import vllm_receipt_cmd

StartGateway = Callable[..., Gateway]
ui = pytest.mark.ui

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 860}
VIEWS = [(DESKTOP, "light"), (DESKTOP, "dark"), (PHONE, "light"), (PHONE, "dark")]
READ_KEY = "sk-round3-monitor-0123456789abcdef"
ADMIN_KEY = "sk-round3-admin-0123456789abcdef"
KEYS = (
    "apiKeys:\n"
    f"  - {{key: {ADMIN_KEY}, name: ops, scopes: [inference, read, admin]}}\n"
    f"  - {{key: {READ_KEY}, name: monitor, scopes: [read]}}\n"
)
GUARD_LOG = REPO / "tests" / "data" / "startup-logs" / "vllm-new-utilization-guard.log"
GUARD = fake_cmd("--flavor", "vllm", "--print-log", str(GUARD_LOG), "--fail-start")
CLOCK = r"\d\d:\d\d:\d\d"
FULL_DATE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+")


@contextlib.contextmanager
def view(browser: Any, size: dict[str, int], scheme: str) -> Iterator[Any]:
    """A fresh page at ``size`` in the ``scheme`` theme; it may throw no JavaScript error."""
    context = browser.new_context(viewport=size, color_scheme=scheme)
    context.set_default_timeout(HANG * 1000)
    errors: list[str] = []
    tab = context.new_page()
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield tab
    finally:
        context.close()
    assert not errors, errors


def name(size: dict[str, int], scheme: str) -> str:
    return ("-dark" if scheme == "dark" else "") + ("-390" if size == PHONE else "")


def fits(tab: Any, size: dict[str, int]) -> None:
    width = tab.evaluate("document.documentElement.scrollWidth")
    assert width <= size["width"], f"{tab.url}: {width} px wide in a {size['width']} px window"


def card(tab: Any, model: str) -> Any:
    return tab.locator(f'article.card[data-model="{model}"]')


def sign_in(tab: Any, key: str) -> None:
    tab.get_by_label("API key", exact=True).fill(key)
    tab.get_by_role("button", name="Sign in").click()


# ---- #2 and #3: the evicted model's card and page; a failure said once ---------------------

EVICTED = re.compile(
    rf"stopped: evicted to start guard at {CLOCK} \(guard then failed: utilization_guard\)"
)


@ui
def test_an_evicted_model_says_why_on_its_card_and_page_and_a_failure_is_said_once(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(
        f"  chat:\n    cmd: {fake_cmd()}\n  guard:\n    cmd: {GUARD}\n",
        extra_top="failureBackoff: 600\n",
    )
    assert chat(gw, "chat").status == 200
    assert chat(gw, "guard").status == 503  # chat was evicted for it
    gw.wait_for(lambda: gw.get_json("/v1/models/chat").get("last_stop", {}).get("outcome"))
    summary = gw.running()["guard"]["last_failure"]["summary"]
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/models"))
            tab.locator("#events-status", has_text="live").wait_for()
            stop = card(tab, "chat").locator('[data-role="last-stop"]')
            stop.wait_for()
            assert EVICTED.fullmatch(stop.inner_text()), stop.inner_text()
            assert FULL_DATE.fullmatch(stop.locator("time").get_attribute("title") or "")
            outcome = stop.locator('[data-role="stop-outcome"]')
            assert outcome.get_attribute("class") == "error"  # red: it failed

            # #3: Load again: the same failure (the backoff) is in the failure box only — not
            # in a banner, not again on the "last swap" line.
            guard = card(tab, "guard")
            guard.locator('[data-role="failure"]').wait_for()
            with tab.expect_response(lambda r: "/api/models/load/guard" in r.url):
                guard.get_by_role("button", name="Load guard", exact=True).click()
            tab.locator('article.card[data-model="guard"]:not([aria-busy])').wait_for()
            assert tab.locator("#notice").is_hidden()
            assert guard.inner_text().count(summary) == 1
            swap_error = guard.locator('[data-role="swap-error"]').text_content()
            assert swap_error == " · failed (why: below)"
            fits(tab, size)
            screenshot(tab, f"round3-evicted{name(size, scheme)}")

            tab.goto(gw.url("/ui/#/model?id=chat"))
            here = tab.locator('#model-card [data-role="last-stop"]')
            here.wait_for()
            assert EVICTED.fullmatch(here.inner_text()), here.inner_text()
            tab.locator("#model-log .line", has_text="then failed: utilization_guard").wait_for()
            last = tab.locator("#model-log .line").last.inner_text()
            assert last.startswith("[modelswap] stopped: evicted to start guard at "), last
            fits(tab, size)


# ---- #4: the non-chat tabs list the models that fit first, and say when one cannot ---------

PLAYGROUND_MODELS = (
    f"  echo:\n    cmd: {fake()}\n"
    f"  chatonly:\n    cmd: {fake('--serves', 'chat')}\n"
    "    capabilities: {in: [text], out: [text]}\n"
    f"  painter:\n    cmd: {fake('--serves', 'images')}\n"
    "    capabilities: {in: [text], out: [image]}\n"
    f"  speaker:\n    cmd: {fake('--serves', 'speech')}\n"
    "    capabilities: {in: [text], out: [audio]}\n"
    f"  scribe:\n    cmd: {fake('--serves', 'transcription')}\n"
    "    capabilities: {in: [audio], out: [text]}\n"
)


def picker(tab: Any, name: str) -> list[str]:
    select = f"#pg-{name}-model"
    tab.wait_for_function(f"document.querySelectorAll('{select} option').length === 5")
    return [o.split(" ·")[0] for o in tab.locator(f"{select} option").all_text_contents()]


@ui
def test_non_chat_tabs_list_fitting_models_first_and_say_when_one_cannot(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(PLAYGROUND_MODELS)
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/playground?tab=images"))
            tab.locator("#pg-tab-images").wait_for()
            assert picker(tab, "images") == ["painter", "echo", "chatonly", "speaker", "scribe"]
            assert tab.locator("#pg-images-model").input_value() == "painter"  # the default
            assert tab.locator("#pg-images-fit").is_hidden()
            assert picker(tab, "speech")[:2] == ["speaker", "echo"]
            assert picker(tab, "transcription")[:2] == ["scribe", "echo"]
            chat_options = tab.locator("#pg-model option").all_text_contents()
            assert [o.split(" ·")[0] for o in chat_options] == ["echo", "chatonly"]

            options = tab.locator("#pg-images-model option")
            assert options.nth(1).inner_text().endswith("capabilities not listed")
            assert options.nth(2).inner_text().endswith("cannot, by its capabilities")
            tab.locator("#pg-images-model").select_option("chatonly")
            note = tab.locator("#pg-images-fit")
            note.wait_for()
            assert "chatonly cannot serve image generation" in note.inner_text()
            assert "in text, out text" in note.inner_text()
            tab.locator("#pg-tab-images").get_by_label("Prompt", exact=True).fill("a lighthouse")
            tab.get_by_role("button", name="Generate", exact=True).click()
            cannot = tab.locator('#pg-images-out [data-role="cannot"]')
            cannot.wait_for()
            assert cannot.inner_text() == (
                "chatonly cannot serve image generation: its backend has no "
                "/v1/images/generations (404). Models that list it: painter."
            )
            assert "404" in tab.locator('#pg-images-out [data-role="error"]').inner_text()
            tab.locator("#pg-images-model").select_option("echo")
            note.filter(has_text="lists no capabilities").wait_for()
            fits(tab, size)
            screenshot(tab, f"round3-images{name(size, scheme)}")


# ---- #6: Activity agrees with itself; one time format; the dialog; a model page's 404 ------


def stream_chat(gw: Gateway, model: str) -> int:
    headers = {"Content-Type": "application/json"}
    return request(
        gw, "POST", "/v1/chat/completions", chat_body(model, stream=True), headers
    ).status


@ui
def test_activity_agrees_under_the_errors_filter_and_writes_time_one_way(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(
        f"  tiny:\n    cmd: {fake('--serves', 'chat')}\n",
        extra_top="activity: {capture: true}\n",
    )
    for _ in range(3):
        assert stream_chat(gw, "tiny") == 200
    images = json.dumps({"model": "tiny", "prompt": "a cat"}).encode()
    headers = {"Content-Type": "application/json"}
    assert request(gw, "POST", "/v1/images/generations", images, headers).status == 404
    assert chat(gw, "no-such-model").status == 404
    gw.wait_for(lambda: len(gw.get_json("/api/activity")["data"]) == 5)  # type: ignore[arg-type]
    stat = '[data-stat="{}"] .stat-value'
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/activity"))
            rows = tab.locator("#activity-table tbody tr")
            rows.nth(4).wait_for()
            times = tab.locator("button.row-open")
            for i in range(5):
                assert re.fullmatch(CLOCK, times.nth(i).inner_text())
                assert FULL_DATE.fullmatch(times.nth(i).get_attribute("title") or "")
            chart = tab.locator('#activity-charts figure[data-model="tiny"]')
            axis = chart.locator("text.axis-label").all_text_contents()
            clocks = [t for t in axis if ":" in t]
            assert clocks, axis
            assert all(re.fullmatch(CLOCK, t) for t in clocks), axis
            assert tab.locator("#activity-range").inner_text() == "5 requests shown · that is all"

            tab.locator("#activity-outcome").select_option("error")
            tab.locator(stat.format("requests"), has_text="2").wait_for()
            assert rows.count() == 2
            assert tab.locator(stat.format("errors")).inner_text() == "2"
            assert tab.locator("#activity-charts figure").count() == 0  # no error has tok/s
            range_text = tab.locator("#activity-range").inner_text()
            assert range_text == "2 of 5 loaded requests shown (filtered) · that is all"
            screenshot(tab, f"round3-activity-errors{name(size, scheme)}")
            tab.locator("#activity-outcome").select_option("")
            chart.wait_for()

            # The request dialog: no raw Unix time, no 16-digit seconds, JSON pretty-printed.
            ok_row = tab.locator('#activity-table tbody tr[data-outcome="ok"]').first
            ok_row.locator("button.row-open").click()
            dialog = tab.locator("dialog#capture")
            dialog.wait_for()
            at = dialog.locator('dd[data-field="at"]').inner_text()
            assert re.fullmatch(rf"{CLOCK} · \d{{4}}-\d\d-\d\d {CLOCK} \S+", at), at
            fields = dialog.locator("dl.kv").inner_text()
            assert not re.search(r"\d\.\d{4,}", fields), fields  # no long fractions
            assert not re.search(r"\b1\d{9}\b", fields), fields  # no Unix time
            body = dialog.locator('[data-role="request-body"]').inner_text()
            assert body == json.dumps(json.loads(body), indent=2)
            fits(tab, size)
            tab.get_by_role("button", name="Close request details").click()

            # A 404 on the model's page: red, no TTFT, no speed.
            tab.goto(gw.url("/ui/#/model?id=tiny"))
            bad = tab.locator('#model-activity tbody tr[data-outcome="error"]')
            bad.wait_for()
            assert bad.count() == 1
            status = bad.locator('[data-role="status"]')
            assert status.get_attribute("class") == "status-bad"
            assert status.inner_text().startswith("404")
            assert bad.locator('[data-role="ttft"]').inner_text() == ""
            assert "ms" not in bad.inner_text()
            assert re.fullmatch(CLOCK, bad.locator("time").inner_text())
            fits(tab, size)


# ---- #7 and #10: the Memory page's limit, legend and colours; the gateway gone --------------


def geometry(tab: Any) -> list[dict[str, Any]]:
    return tab.evaluate(  # type: ignore[no-any-return]
        """() => [...document.querySelectorAll('.basin')].map((b) => {
          const svg = b.querySelector('svg').getBoundingClientRect();
          const legend = b.querySelector('.legend').getBoundingClientRect();
          const colours = {};
          for (const li of b.querySelectorAll('.legend li[data-model]'))
            colours[li.dataset.model] = li.querySelector('.swatch').style.background;
          const label = b.querySelector('text.limit-label');
          const box = label ? label.getBBox() : null;
          return {name: b.dataset.resource, svgRight: svg.right, svgBottom: svg.bottom,
                  legendLeft: legend.left, legendTop: legend.top, colours,
                  label: label ? [box.x, box.x + box.width, label.textContent] : null};
        })"""
    )


@ui
def test_memory_limit_legend_and_colours_hold_in_every_view_and_it_says_when_offline(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(
        f"  big:\n    cmd: {vllm_receipt_cmd()}\n    uses: {{gpu0: 84GiB, ram: 64MiB}}\n"
        f"  small:\n    cmd: {fake_cmd()}\n    uses: {{ram: 256MiB}}\n"
        f"  medium:\n    cmd: {fake_cmd()}\n    uses: {{ram: 512MiB}}\n",
        extra_top="resources: {ram: 2GiB, gpu0: 96GiB}\n",
    )
    for model in ("big", "small"):
        assert gw.post(f"/api/models/load/{model}", b"")[0] == 200
    first: dict[str, str] = {}
    for index, (size, scheme) in enumerate(VIEWS):
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/memory"))
            tab.locator('.basin[data-resource="gpu0"] text.limit-label').wait_for()
            tab.locator('.basin[data-resource="ram"] .legend li[data-model="small"]').wait_for()
            basins = geometry(tab)
            assert [b["name"] for b in basins] == ["ram", "gpu0"]
            for b in basins:  # the legend in the same place in every basin
                if size == DESKTOP:
                    assert b["legendLeft"] >= b["svgRight"] - 1, b
                else:
                    assert b["legendTop"] >= b["svgBottom"] - 1, b
            low, high, text = basins[1]["label"]
            assert low >= 0, basins[1]["label"]  # inside the drawing: never cut off
            assert high <= 430, basins[1]["label"]
            assert text == "limit 86.4 GiB"
            ram, gpu = basins[0]["colours"], basins[1]["colours"]
            assert ram["big"] == gpu["big"]  # one colour per model in every basin
            if index == 0:
                first = dict(ram)
                # Another model loads: the others keep their colours.
                assert gw.post("/api/models/load/medium", b"")[0] == 200
                tab.locator(
                    '.basin[data-resource="ram"] .legend li[data-model="medium"]'
                ).wait_for()
                after = geometry(tab)[0]["colours"]
                assert {m: after[m] for m in first} == first
                assert len(set(after.values())) == 3
            else:
                assert {m: ram[m] for m in first} == first
            fits(tab, size)
            screenshot(tab, f"round3-memory{name(size, scheme)}")

    # #10: the gateway gone, the page says so instead of going blank.
    with contextlib.ExitStack() as stack:
        tabs = []
        for size, scheme in VIEWS:
            tab = stack.enter_context(view(browser, size, scheme))
            tab.goto(gw.url("/ui/#/memory"))
            tab.locator(".basin").first.wait_for()
            tabs.append((tab, size))
        stop_gateway(gw)
        for tab, size in tabs:
            note = tab.locator("#memory-offline")
            note.wait_for()
            assert "gateway is unreachable" in note.inner_text()
            assert tab.locator(".basin").count() == 2  # the last figures stay, marked stale
            fits(tab, size)


# ---- #8: Performance: measured vs declared, one unit per axis, equal lines apart ------------


def units(labels: list[str]) -> set[str]:
    return {label.split(" ", 1)[1] for label in labels if re.fullmatch(r"[\d.]+ \S+", label)}


@ui
def test_performance_says_measured_keeps_one_unit_per_axis_and_dashes_the_second_line(
    gateway: StartGateway,
    browser: Any,
    fake_gpu: Path,  # noqa: F811
) -> None:
    gw = gateway(
        f"  tiny:\n    cmd: {fake_cmd()}\n",
        extra_top="performance: {every: 1s}\nresources: {ram: 8GiB}\n",
    )
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/performance"))
            memory = tab.locator('[data-chart="memory"]')
            memory.locator("polyline").wait_for(state="attached")
            assert "measured" in memory.locator("figcaption").inner_text()
            memory.locator('[data-role="note"]', has_text="ram 8.0 GiB").wait_for()
            assert "declared" in memory.locator('[data-role="note"]').inner_text()
            tab.locator('[data-chart="gpu-memory"] polyline').first.wait_for(state="attached")
            for chart in ("memory", "gpu-memory", "network"):
                labels = tab.locator(f'[data-chart="{chart}"] text.axis-label')
                found = units(labels.all_text_contents())
                assert len(found) == 1, (chart, labels.all_text_contents())
            network = tab.locator('[data-chart="network"]')
            network.locator('polyline[data-series="sent"]').wait_for(state="attached")
            sent = network.locator('polyline[data-series="sent"]')
            assert sent.get_attribute("stroke-dasharray")
            received = network.locator('polyline[data-series="received"]')
            assert not received.get_attribute("stroke-dasharray")
            assert network.locator('li[data-series="sent"] .swatch.dashed').count() == 1
            fits(tab, size)
            screenshot(tab, f"round3-performance{name(size, scheme)}")


# ---- #9: the load test's aggregate throughput and slow tail ---------------------------------


@ui
def test_load_test_reports_throughput_and_labels_the_slow_tail(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(f"  echo:\n    cmd: {fake()}\n")
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/playground?tab=loadtest"))
            tab.locator("#pg-tab-loadtest").wait_for()
            tab.locator("#pg-loadtest-model option", has_text="echo").wait_for(state="attached")
            tab.get_by_label("Requests (N)", exact=True).fill("6")
            tab.get_by_label("Concurrency (C)", exact=True).fill("2")
            tab.get_by_role("button", name="Start", exact=True).click()
            result = tab.locator('[data-role="load-result"][data-state="finished"]')
            result.wait_for()
            tab.locator('dd[data-role="measured-by"]', has_text="activity log").wait_for()

            def cell(role: str, result: Any = result) -> str:
                return str(result.locator(f'dd[data-role="{role}"]').inner_text())

            assert re.fullmatch(r"[\d.]+ req/s", cell("requests-per-s")), cell("requests-per-s")
            assert re.fullmatch(r"[\d.]+ tok/s", cell("total-tok-s")), cell("total-tok-s")
            terms = result.locator("dt").all_text_contents()
            assert "TTFT p95 (slow tail)" in terms
            assert "tok/s p5 (slow tail)" in terms
            assert "tok/s p95" not in terms  # the best case is not shown as a percentile
            tail = float(cell("tok-s-p5").split()[0])
            median = float(cell("tok-s-p50").split()[0])
            assert tail <= median
            fits(tab, size)
            screenshot(tab, f"round3-loadtest{name(size, scheme)}")


# ---- #10: the leftovers -----------------------------------------------------------------------


@ui
def test_a_read_key_is_told_once_a_refusal_clears_and_a_receipt_outlives_an_unload(
    gateway: StartGateway, browser: Any
) -> None:
    gw = gateway(
        f"  a:\n    cmd: {fake_cmd()}\n  b:\n    cmd: {fake_cmd()}\n  c:\n    cmd: {fake_cmd()}\n",
        extra_top=KEYS,
    )
    auth = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    for model in ("a", "b"):
        reply = request(gw, "POST", "/v1/chat/completions", chat_body(model), auth)
        assert reply.status == 200
    assert request(gw, "POST", "/api/models/unload/b", b"", auth).status == 200
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw.url("/ui/#/models"))
            sign_in(tab, READ_KEY)
            card(tab, "c").wait_for()
            note = tab.locator("#models-perm")
            note.wait_for()
            assert "admin" in note.inner_text()
            visible = tab.locator('article.card [data-role="perm"]:visible')
            assert visible.count() == 0  # said once above the cards, not on every card
            # b's last swap (it evicted a) stays on its card after the unload.
            swap = card(tab, "b").locator('[data-role="swap"] [data-part="total"]')
            swap.wait_for()
            assert "evicted a" in swap.inner_text()
            stop = card(tab, "b").locator('[data-role="last-stop"]')
            assert re.fullmatch(rf"stopped: unloaded at {CLOCK}", stop.inner_text())
            fits(tab, size)
            screenshot(tab, f"round3-read-key{name(size, scheme)}")

            tab.goto(gw.url("/ui/#/model?id=c"))
            tab.locator('#model-card [data-role="perm"]').wait_for()
            assert tab.locator('[data-role="perm"]:visible').count() == 1
            assert tab.locator("#models-perm").is_hidden()  # another page's

    gw2 = gateway(f"  echo:\n    cmd: {fake()}\n")
    for size, scheme in VIEWS:
        with view(browser, size, scheme) as tab:
            tab.goto(gw2.url("/ui/#/playground"))
            tab.locator("#pg-model option", has_text="echo").wait_for(state="attached")
            tab.locator("#pg-attach").set_input_files(
                {"name": "notes.txt", "mimeType": "text/plain", "buffer": b"not an image"}
            )
            refusal = tab.locator("#pg-attach-note")
            refusal.wait_for()
            assert "not an image" in refusal.inner_text()
            tab.get_by_role("button", name="New chat", exact=True).click()
            assert refusal.is_hidden()
            fits(tab, size)
