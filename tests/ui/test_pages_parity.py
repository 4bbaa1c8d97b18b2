"""llama-swap's pages outside the Playground (issue 19) and swap receipts (issue 21), in a real
browser (Debian's chromium through Playwright) against ``python -m modelswap serve``:
Performance, Hardware, the Models page's profiles and peers, Activity's stats, columns, export
and in-flight requests, the Logs panels, and the receipt of the last swap on a model's card."""

from __future__ import annotations

import http.client
import json
import math
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import HANG, Gateway, chat, chat_body, fake_cmd, request
from tests.fakes import nvidia_smi
from tests.ui.conftest import screenshot

StartGateway = Callable[..., Gateway]
READ_KEY = "sk-parity-monitor-0123456789abcdef"
ADMIN_KEY = "sk-parity-admin-0123456789abcdef"
KEYS = (
    "apiKeys:\n"
    f"  - {{key: {ADMIN_KEY}, name: ops, scopes: [inference, read, admin]}}\n"
    f"  - {{key: {READ_KEY}, name: monitor, scopes: [read]}}\n"
)
PHONE = {"width": 390, "height": 844}

ui = pytest.mark.ui


def sign_in(page: Any, key: str) -> None:
    page.get_by_label("API key", exact=True).fill(key)
    page.get_by_role("button", name="Sign in").click()


@pytest.fixture
def fake_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "gpu-bin"
    directory.mkdir()
    nvidia_smi.install(directory, "--gpus", "2")
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return directory


def fits_phone_in_both_themes(browser: Any, url: str, ready: str, key: str | None = None) -> None:
    """At 390 px, light and dark: the page draws ``ready`` and never scrolls sideways."""
    for scheme in ("light", "dark"):
        context = browser.new_context(viewport=PHONE, color_scheme=scheme)
        context.set_default_timeout(HANG * 1000)
        errors: list[str] = []
        try:
            tab = context.new_page()
            tab.on("pageerror", lambda exc, seen=errors: seen.append(str(exc)))
            tab.goto(url)
            if key:
                sign_in(tab, key)
            tab.locator(ready).first.wait_for(state="attached")
            width = tab.evaluate("document.documentElement.scrollWidth")
            assert width <= PHONE["width"], f"{url} ({scheme}): {width} px wide"
            bg = tab.evaluate("getComputedStyle(document.body).backgroundColor")
            assert (bg == "rgb(18, 20, 23)") == (scheme == "dark"), (scheme, bg)
        finally:
            context.close()
        assert not errors, errors


# ---- Performance and Hardware ---------------------------------------------------------------


@ui
def test_performance_page_draws_cpu_memory_network_and_gpus(
    gateway: StartGateway, page: Any, browser: Any, fake_gpu: Path
) -> None:
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n", extra_top=KEYS + "performance: {every: 1s}\n")
    page.goto(gw.url("/ui/#/performance"))
    sign_in(page, READ_KEY)  # the read scope sees the page
    for chart in ("cpu", "memory", "network", "gpu-util", "gpu-memory", "gpu-power", "gpu-temp"):
        # attached: a flat line (a fake GPU's constant load) has no height to be "visible"
        page.locator(f'[data-chart="{chart}"] polyline').first.wait_for(state="attached")
    page.wait_for_function(
        "document.querySelectorAll('[data-chart=\"cpu\"] polyline')[0]"
        ".getAttribute('points').split(' ').length >= 2"
    )
    cpu = page.locator('[data-chart="cpu"]')
    labels = cpu.locator("text.axis-label").all_text_contents()
    assert "100 %" in labels  # the value axis
    assert "now" in labels
    assert "−5 min" in labels  # 5 minutes: the default window
    assert cpu.locator('[data-role="value"]').text_content().endswith("%")
    gpu = page.locator('[data-chart="gpu-memory"]')
    legend = gpu.locator(".perf-legend li").all_text_contents()
    assert legend == ["GPU 0 NVIDIA Fake 0 1.0 GiB", "GPU 1 NVIDIA Fake 1 2.0 GiB"]
    assert "123 W" in page.locator('[data-chart="gpu-power"] .perf-legend').text_content()
    assert "sampled every 1 s" in page.locator("#perf-status").text_content()

    page.locator("#perf-window").select_option(label="1 min")
    page.locator('[data-chart="cpu"] text.axis-label', has_text="−1 min").wait_for()
    assert page.evaluate("localStorage.getItem('modelswap.perf.window')") == "0"
    page.reload()
    page.locator('[data-chart="cpu"] text.axis-label', has_text="−1 min").wait_for()
    assert page.locator("#perf-window").input_value() == "0"  # the window is remembered
    screenshot(page, "performance")

    page.goto(gw.url("/ui/#/hardware"))
    page.locator('#hardware-info [data-role="gpu"]').first.wait_for()
    gpus = page.locator('#hardware-info [data-role="gpu"]').all_text_contents()
    assert gpus[0] == "NVIDIA Fake 0 · 24.0 GiB · driver 550.54.15 · 350 W limit"
    cores = page.locator('#hardware-info [data-role="cores"]').text_content()
    assert f"{os.cpu_count()} logical" in cores
    assert "modelswap" in page.locator('#hardware-info [data-role="gateway"]').text_content()
    assert page.locator('#hardware-info [data-role="python"]').text_content().startswith("CPython")
    screenshot(page, "hardware")

    fits_phone_in_both_themes(
        browser, gw.url("/ui/#/performance"), '[data-chart="gpu-temp"] polyline', READ_KEY
    )
    fits_phone_in_both_themes(
        browser, gw.url("/ui/#/hardware"), '#hardware-info [data-role="gpu"]', READ_KEY
    )


@ui
def test_performance_without_a_gpu_and_switched_off(
    gateway: StartGateway, page: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    python_dir = str(Path(sys.executable).parent)
    monkeypatch.setenv("PATH", f"{python_dir}{os.pathsep}/usr/bin{os.pathsep}/bin")
    if any((Path(d) / "nvidia-smi").exists() for d in (python_dir, "/usr/bin", "/bin")):
        pytest.skip("this machine has a real nvidia-smi")
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n", extra_top="performance: {every: 1s}\n")
    page.goto(gw.url("/ui/#/performance"))
    page.locator('[data-chart="cpu"] polyline').wait_for(state="attached")
    note = page.locator('[data-role="no-gpu"]')
    assert note.text_content() == "No GPU: nvidia-smi is not on PATH."
    page.goto(gw.url("/ui/#/hardware"))
    page.locator('#hardware-info [data-role="gpus"]', has_text="none").wait_for()

    off = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n", extra_top="performance: {disabled: true}\n")
    page.goto(off.url("/ui/#/performance"))
    page.locator('[data-role="perf-off"]', has_text="performance.disabled").wait_for()


# ---- Models: profiles, selectors, peers, tags, ready count ------------------------------------


def models_config() -> str:
    return (
        f"  tiny:\n    cmd: {fake_cmd()}\n    capabilities: {{tools: true}}\n"
        f"  other:\n    cmd: {fake_cmd()}\n"
    )


MODELS_TOP = (
    KEYS + "selectors:\n  auto: {targets: [tiny, other], description: the first ready one}\n"
    "profiles:\n  work: {description: tiny kept loaded, pins: {assistant: tiny}}\n"
    "  quiet: [other]\n"
    "peers:\n  box: {proxy: 'http://127.0.0.1:9', models: [beta]}\n"
)


@ui
def test_models_page_switches_profiles_and_lists_selectors_and_peers(
    gateway: StartGateway, page: Any, browser: Any
) -> None:
    gw = gateway(models_config(), extra_top=MODELS_TOP)
    page.goto(gw.url("/ui/#/models"))
    sign_in(page, ADMIN_KEY)
    page.locator("#events-status", has_text="live").wait_for()
    cards = page.locator("#models-list article.card")
    assert sorted(c.get_attribute("data-model") for c in cards.all()) == ["other", "tiny"]
    assert page.locator("#models-summary").text_content() == "0 of 2 ready"
    tags = page.locator('article[data-model="tiny"] .tags .tag').all_text_contents()
    assert tags == ["function_calling"]

    selector = page.locator('#selectors-list [data-selector="auto"]')
    assert selector.locator('[data-role="strategy"]').text_content() == "warm"
    assert selector.locator("li").all_text_contents() == ["tiny stopped", "other stopped"]
    assert "the first ready one" in selector.text_content()
    peer = page.locator('#peers-list tr[data-peer="box"]')
    peer.wait_for()
    assert peer.locator("td").all_text_contents() == ["box", "ok", "box/beta"]

    assert page.locator('[data-role="profile-active"]').text_content() == "no profile active"
    page.locator("#profile-select").select_option("work")
    page.get_by_role("button", name="Switch").click()
    page.locator('[data-role="profile-active"]', has_text="active: work").wait_for()
    pins = page.locator('[data-role="profile-pins"]').text_content()
    assert pins == "kept loaded: assistant → tiny"
    page.locator("#models-summary", has_text="1 of 2 ready").wait_for()
    page.locator('#selectors-list li[data-target="tiny"] .badge', has_text="ready").wait_for()
    assert page.locator("#unload-all").is_enabled()
    assert "null" not in page.locator("#models-profiles").text_content()
    screenshot(page, "models-parity")

    reader = browser.new_context(viewport={"width": 1280, "height": 860})
    reader.set_default_timeout(HANG * 1000)
    try:
        tab = reader.new_page()
        tab.goto(gw.url("/ui/#/models"))
        sign_in(tab, READ_KEY)
        tab.locator('[data-role="profile-active"]', has_text="active: work").wait_for()
        switch = tab.get_by_role("button", name="Switch")
        assert switch.is_disabled()
        assert "admin" in (switch.get_attribute("title") or "")
        assert "admin" in tab.locator('[data-role="profile-perm"]').text_content()
        assert tab.locator("#unload-all").is_disabled()
        tab.locator('#peers-list tr[data-peer="box"]').wait_for()
    finally:
        reader.close()
    fits_phone_in_both_themes(
        browser, gw.url("/ui/#/models"), '#peers-list tr[data-peer="box"]', READ_KEY
    )


# ---- Activity: stats, columns, export, in flight --------------------------------------------


def stream_in_background(gw: Gateway, model: str) -> tuple[threading.Thread, list[int]]:
    """A streamed chat held open by the backend (``--stall-after``) until it is cancelled."""
    statuses: list[int] = []

    def run() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=HANG)
        try:
            body = chat_body(model, stream=True)
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {ADMIN_KEY}"}
            conn.request("POST", "/v1/chat/completions", body, headers)
            resp = conn.getresponse()
            statuses.append(resp.status)
            resp.read()  # ends when the gateway closes it (the cancel)
        except (OSError, http.client.HTTPException):  # cut mid-stream: what a cancel does
            statuses.append(-1)
        finally:
            conn.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, statuses


@ui
def test_activity_stats_columns_export_and_cancel_in_flight(
    gateway: StartGateway, page: Any, browser: Any
) -> None:
    gw = gateway(
        f"  tiny:\n    cmd: {fake_cmd('--cached-tokens 1')}\n"
        f"  slow:\n    cmd: {fake_cmd('--stall-after 2')}\n",
        extra_top=KEYS + "activity: {capture: true}\n",
    )
    admin = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    for _ in range(3):
        reply = request(gw, "POST", "/v1/chat/completions", chat_body("tiny"), admin)
        assert reply.status == 200
    rows = request(gw, "GET", "/api/activity", headers=admin).json()["data"]
    assert len(rows) == 3

    page.goto(gw.url("/ui/#/activity"))
    sign_in(page, ADMIN_KEY)
    page.locator("#activity-table tbody tr").nth(2).wait_for()
    stat = lambda name: page.locator(f'[data-stat="{name}"] .stat-value').text_content()  # noqa: E731
    assert stat("requests") == "3"
    computed = sum(r["prompt_tokens"] - r["cached_tokens"] for r in rows)  # not the cached
    assert stat("processed") == f"{computed:,}"
    assert stat("generated") == f"{sum(r['completion_tokens'] for r in rows):,}"
    assert stat("cached") == "3"  # 1 per request, as the backend reported
    generation = page.locator('[data-histogram="generation"]')
    assert generation.locator("rect.bar").count() >= 1
    assert "3 requests" in generation.locator('[data-role="median"]').text_content()
    assert page.locator('[data-histogram="prompt"] text.axis-label').count() >= 4  # axes

    # the column chooser, kept across a reload
    page.locator("#activity-columns summary").click()
    page.locator('#activity-columns input[data-column="route"]').uncheck()
    headers = page.locator("#activity-table thead th").all_text_contents()
    assert "route" not in headers
    page.reload()
    page.locator("#activity-table tbody tr").first.wait_for()
    assert "route" not in page.locator("#activity-table thead th").all_text_contents()
    assert "model" in page.locator("#activity-table thead th").all_text_contents()

    # export: the rows shown, never a captured body or header
    with page.expect_download() as csv_download:
        page.get_by_role("button", name="Export CSV").click()
    csv_text = Path(csv_download.value.path()).read_text()
    lines = csv_text.strip().splitlines()
    assert lines[0].startswith("id,at,model,route,status")
    assert len(lines) == 4
    with page.expect_download() as json_download:
        page.get_by_role("button", name="Export JSON").click()
    exported = json.loads(Path(json_download.value.path()).read_text())
    assert sorted(r["id"] for r in exported) == sorted(r["id"] for r in rows)
    assert all("request_body" in r for r in rows)  # captured, and still not exported
    assert not any(k in r for r in exported for k in ("request_body", "response_body"))
    assert "request_body" not in csv_text

    # in flight: a held stream is listed; a read key may not cancel it; admin does
    page.locator('[data-role="inflight-none"]').wait_for()
    thread, statuses = stream_in_background(gw, "slow")
    row = page.locator("#inflight tr[data-inflight]")
    row.wait_for()
    assert "slow" in row.text_content()
    screenshot(page, "activity-parity")
    reader = browser.new_context(viewport={"width": 1280, "height": 860})
    reader.set_default_timeout(HANG * 1000)
    try:
        tab = reader.new_page()
        tab.goto(gw.url("/ui/#/activity"))
        sign_in(tab, READ_KEY)
        cancel = tab.locator("#inflight tr[data-inflight] button", has_text="Cancel")
        cancel.wait_for()
        assert cancel.is_disabled()
        assert "admin" in (cancel.get_attribute("title") or "")
        assert "admin" in tab.locator('[data-role="inflight-perm"]').text_content()
    finally:
        reader.close()
    row.locator("button", has_text="Cancel").click()
    page.locator('[data-role="inflight-none"]').wait_for()
    thread.join(HANG)
    assert statuses  # the stream ended
    page.locator(
        '#activity-table tbody tr[data-status="499"], #activity-table tbody tr[data-status="502"]'
    ).first.wait_for()
    page.locator("#activity-outcome").select_option("error")  # the stats follow the filter
    page.locator('[data-stat="requests"] .stat-value', has_text="1").wait_for()
    assert stat("errors") == "1"
    assert stat("generated") != f"{sum(r['completion_tokens'] for r in rows):,}"
    fits_phone_in_both_themes(browser, gw.url("/ui/#/activity"), '[data-stat="requests"]', READ_KEY)


# ---- Logs: proxy and upstream panels, font size ----------------------------------------------


@ui
def test_logs_show_a_model_beside_the_gateway_with_a_font_size(
    gateway: StartGateway, page: Any, browser: Any
) -> None:
    gw = gateway(f"  tiny:\n    cmd: {fake_cmd()}\n", extra_top=KEYS)
    admin = {"Authorization": f"Bearer {ADMIN_KEY}", "Content-Type": "application/json"}
    assert request(gw, "POST", "/api/models/load/tiny", b"", admin).status == 200
    page.goto(gw.url("/ui/#/logs?source=tiny"))
    sign_in(page, READ_KEY)
    page.locator("#logs-view .line").first.wait_for()
    assert page.locator("#logs-proxy-wrap").is_hidden()  # one log by default
    page.locator("#logs-layout").select_option("both")
    page.locator("#logs-proxy .line", has_text="swap to tiny done").first.wait_for()
    page.locator("#logs-view .line").first.wait_for()
    assert page.locator("#logs-main-title").text_content() == "tiny (upstream)"
    assert "gateway (proxy)" in page.locator("#logs-proxy-wrap h2").text_content()
    proxy_text = page.locator("#logs-proxy").text_content()
    upstream_text = page.locator("#logs-view").text_content()
    assert "swap to tiny done" not in upstream_text  # each panel its own source
    assert proxy_text != upstream_text

    page.locator("#logs-search").fill("swap to")
    assert page.locator("#logs-proxy .line").count() >= 1
    assert all("swap to" in t for t in page.locator("#logs-proxy .line").all_text_contents())

    page.locator("#logs-font").select_option("l")
    size = "el => getComputedStyle(el).fontSize"
    assert page.locator("#logs-view").evaluate(size) == "16px"
    assert page.locator("#logs-proxy").evaluate(size) == "16px"
    page.locator("#logs-font").select_option("s")
    assert page.locator("#logs-proxy").evaluate(size) == "11px"
    page.reload()
    page.locator("#logs-proxy .line").first.wait_for()  # both panels, remembered
    assert page.locator("#logs-font").input_value() == "s"
    assert page.locator("#logs-view").evaluate(size) == "11px"
    screenshot(page, "logs-parity")
    fits_phone_in_both_themes(
        browser, gw.url("/ui/#/logs?source=tiny&panels=both"), "#logs-proxy .line", READ_KEY
    )


# ---- Swap receipts on the cards (issue 21) ---------------------------------------------------


@ui
def receipt_duration(seconds: float) -> str:
    """A receipt part as the models page writes it (app.js: ms under 1 s, else ``secs``;
    a loaded machine's spawn takes over a second)."""
    if seconds < 1:  # Math.round: half up (Python's round() is half to even: 918.5 -> 918)
        return f"{math.floor(seconds * 1000 + 0.5)} ms"
    if seconds < 60:
        return f"{seconds:.{1 if seconds < 10 else 0}f} s"
    return f"{int(seconds // 60)} min {round(seconds % 60)} s"


def test_a_models_card_says_where_its_last_swap_went(
    gateway: StartGateway, page: Any, browser: Any
) -> None:
    gw = gateway(f"  a:\n    cmd: {fake_cmd()}\n  b:\n    cmd: {fake_cmd('--load-delay 0.3')}\n")
    assert chat(gw, "a").status == 200
    page.goto(gw.url("/ui/#/models"))
    page.locator("#events-status", has_text="live").wait_for()
    assert chat(gw, "b").status == 200  # evicts a; the card updates from the events
    swap = page.locator('article[data-model="b"] [data-role="swap"]')
    swap.locator('[data-part="first byte"]').wait_for()
    receipt = gw.running()["b"]["last_swap"]
    total = swap.locator('[data-part="total"]').text_content()
    assert "evicted a" in total
    parts = swap.locator("li").evaluate_all("ls => ls.map(l => l.dataset.part)")
    assert parts == ["stop", "spawn → listening", "listening → healthy", "first byte"]
    spawn = swap.locator('[data-part="spawn → listening"] strong').text_content()
    assert spawn == receipt_duration(receipt["spawn_to_listening_seconds"])
    slowest = swap.locator("li.slowest")
    assert slowest.count() == 1
    assert slowest.get_attribute("data-part") != "first byte"  # a phase, not the request
    assert "from that request's arrival" in (
        swap.locator('[data-part="first byte"]').get_attribute("title") or ""
    )
    screenshot(page, "models-swap-receipt")

    page.goto(gw.url("/ui/#/model?id=b"))
    page.locator('#model-card [data-role="swap"] [data-part="first byte"]').wait_for()
    fits_phone_in_both_themes(
        browser, gw.url("/ui/#/models"), 'article[data-model="b"] [data-part="first byte"]'
    )
