"""The web UI (issue 8) in a real browser against ``python -m modelswap serve``.

Playwright's sync API drives Debian's chromium; the gateway runs the real llama.cpp backend
(SmolLM2) or the fake backend. Each page is screenshotted to build/screenshots/.
"""

from __future__ import annotations

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
    fake_cmd,
    fake_cmd_text,
    held_cmd,
    llamacpp_cmd,
    request,
)
from tests.ui.conftest import screenshot

from modelswap.webui.routes import STATIC, gpu_utilization

StartGateway = Callable[..., Gateway]
MIB = 1024**2
VLLM_LOG = REPO / "tests" / "data" / "startup-logs" / "vllm-new-success.log"
KEY = "sk-ui-test-key-0123456789"

ui = pytest.mark.ui


def open_ui(page: Any, gw: Gateway, hash_: str) -> None:
    page.goto(gw.url(f"/ui/#/{hash_}"))


def card(page: Any, model: str) -> Any:
    return page.locator(f'article.card[data-model="{model}"]')


def record_states(page: Any, model: str) -> None:
    """Record every state the model's badge shows (a MutationObserver keeps each old value)."""
    page.evaluate(
        """(model) => {
          const badge = document.querySelector(`article[data-model="${model}"] .badge`);
          window.__states = [badge.dataset.state];
          new MutationObserver((records) => {
            for (const r of records) window.__states.push(r.target.dataset.state);
          }).observe(badge, {attributes: true, attributeFilter: ["data-state"]});
        }""",
        model,
    )


def seen_states(page: Any) -> list[str]:
    states: list[str] = page.evaluate("window.__states")
    return [s for i, s in enumerate(states) if i == 0 or states[i - 1] != s]


# ---- no browser needed ---------------------------------------------------------------------


def test_gpu_utilization_is_read_from_the_command_line() -> None:
    assert gpu_utilization(("vllm", "serve", "m", "--gpu-memory-utilization", "0.85")) == 0.85
    assert gpu_utilization(("vllm", "--gpu-memory-utilization=0.5")) == 0.5
    assert gpu_utilization(("vllm", "--gpu-memory-utilization", "nope")) is None
    assert gpu_utilization(("vllm", "--gpu-memory-utilization", "1.5")) is None
    assert gpu_utilization(("llama-server", "-c", "2048")) is None


def test_static_files_make_no_external_requests() -> None:
    names = {p.name for p in STATIC.iterdir()}
    assert {"index.html", "app.js", "style.css"} <= names
    for path in STATIC.iterdir():
        text = path.read_text()
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.\w+[^\s\"')]*", text))
        urls.discard("http://www.w3.org/2000/svg")  # the SVG namespace, never fetched
        assert not urls, f"{path.name} refers to {urls}"
        assert "@import" not in text
        assert "@font-face" not in text


# ---- browser --------------------------------------------------------------------------------


@ui
def test_models_page_loads_and_unloads_a_real_llamacpp_model(
    gateway: StartGateway, page: Any
) -> None:
    gw = gateway(
        f"  smollm2:\n    cmd: {llamacpp_cmd(2048)}\n    uses: {{ram: 1GiB}}\n    ttl: 600\n"
        f"  vllm-fit:\n    cmd: {fake_cmd('--flavor vllm --ctx 4096 --max-model-len 8192')}\n"
        "    uses: {ram: 256MiB}\n"
        f"  broken:\n    cmd: {fake_cmd('--fail-start')}\n    uses: {{ram: 256MiB}}\n",
        extra_top="resources: {ram: 4GiB}\nfailureBackoff: 60\n",
    )
    open_ui(page, gw, "models")
    smol = card(page, "smollm2")
    badge = smol.locator(".badge")
    assert badge.text_content() == "stopped"
    page.locator("#events-status", has_text="live").wait_for()
    record_states(page, "smollm2")

    smol.get_by_role("button", name="Load smollm2", exact=True).click()
    page.wait_for_function(
        "document.querySelector('article[data-model=smollm2] .badge').dataset.state === 'ready'",
        timeout=HANG * 1000,
    )
    assert seen_states(page) == ["stopped", "starting", "ready"]
    reported = smol.locator('[data-role="ctx-reported"]')
    reported.wait_for()
    assert reported.text_content() == "reported 2048"
    assert smol.locator('[data-role="ctx-configured"]').text_content() == "configured 2048"
    assert smol.locator('[data-role="ctx-warn"]').count() == 0
    assert "in flight" in (smol.locator('[data-role="load-info"]').text_content() or "")
    assert re.search(r"\d", smol.locator('[data-role="ttl"]').text_content() or "")

    # A backend that serves less than it was asked for, and one that fails to start.
    assert gw.post("/api/models/load/vllm-fit", b"")[0] == 200
    assert gw.post("/api/models/load/broken", b"")[0] == 503
    fit = card(page, "vllm-fit")
    fit.locator('[data-role="ctx-warn"]').wait_for()
    assert fit.locator('[data-role="ctx-reported"]').text_content() == "reported 4096"
    assert fit.locator('[data-role="ctx-configured"]').text_content() == "configured 8192"
    failure = card(page, "broken").locator('[data-role="failure"]')
    failure.wait_for()
    assert card(page, "broken").locator(".badge").text_content() == "failed"
    assert failure.locator('[data-role="fail-fix"]').text_content()
    screenshot(page, "models")  # docs/screenshots/: make screenshots

    smol.get_by_role("button", name="Unload smollm2", exact=True).click()
    page.wait_for_function(
        "document.querySelector('article[data-model=smollm2] .badge').dataset.state === 'stopped'"
    )
    assert smol.locator('[data-role="ctx-reported"]').count() == 0


@ui
def test_slow_start_shows_progress_updating_in_place(gateway: StartGateway, page: Any) -> None:
    # A start long enough that the page surely sees it progress, even on a loaded machine.
    gw = gateway(
        f"  slow:\n    cmd: {fake_cmd('--flavor vllm --load-delay 10 --progress-interval 0.3')}\n"
    )
    open_ui(page, gw, "models")
    page.locator("#events-status", has_text="live").wait_for()
    slow = card(page, "slow")
    slow.get_by_role("button", name="Load slow", exact=True).click()
    line = slow.locator('[data-role="progress-line"]')
    page.wait_for_function(
        "/Capturing CUDA graphs/.test(document.querySelector("
        "'article[data-model=slow] [data-role=progress-line]').textContent)"
    )
    handle = line.element_handle()
    seen: set[str] = set()
    fractions: set[str] = set()
    deadline = 30
    while len(seen) < 3 and deadline:
        seen.add(line.text_content() or "")
        fractions.add(slow.locator('[data-role="fill"]').get_attribute("style") or "")
        page.wait_for_timeout(250)
        deadline -= 1
    assert len(seen) >= 3, seen  # the same element, rewritten as progress arrives
    assert len(fractions) >= 2, fractions  # the bar moves
    assert slow.locator('[data-role="progress-line"]').count() == 1
    assert line.element_handle() == handle or handle.evaluate("n => n.isConnected")
    phase = slow.locator('[data-role="phase"]').text_content() or ""
    assert "capturing" in phase.lower() or "/51" in phase, phase
    screenshot(page, "models-starting")
    page.wait_for_function(
        "document.querySelector('article[data-model=slow] .badge').dataset.state === 'ready'",
        timeout=HANG * 1000,
    )
    assert slow.locator('[data-role="progress"]').is_hidden()


def vllm_receipt_cmd() -> str:
    """The fake backend replaying a real vLLM startup log, behind a command line that carries
    ``--gpu-memory-utilization 0.9`` (sh ignores the arguments after its script)."""
    script = "exec " + fake_cmd_text(f'--flavor vllm --print-log "{VLLM_LOG}" --model big')
    return json.dumps(["/bin/sh", "-c", script, "sh", "--gpu-memory-utilization", "0.9"])


@ui
def test_memory_page_draws_one_band_per_model_in_proportion(
    gateway: StartGateway, page: Any, tmp_path: Path
) -> None:
    release = tmp_path / "release-slow"  # slow starts only once it exists: it is drawn starting
    gw = gateway(
        f"  small:\n    cmd: {fake_cmd()}\n    uses: {{ram: 256MiB}}\n"
        f"  medium:\n    cmd: {fake_cmd()}\n    uses: {{ram: 512MiB}}\n"
        f"  big:\n    cmd: {vllm_receipt_cmd()}\n    uses: {{gpu0: 84GiB, ram: 64MiB}}\n"
        f"  slow:\n    cmd: {held_cmd(release)}\n    uses: {{ram: 128MiB}}\n",
        extra_top="resources: {ram: 1GiB, gpu0: 96GiB}\n",
    )
    for model in ("small", "medium", "big"):
        status, _, body = gw.post(f"/api/models/load/{model}", b"")
        assert status == 200, body
    loader = threading.Thread(target=gw.post, args=("/api/models/load/slow", b""), daemon=True)
    loader.start()
    gw.wait_for(lambda: gw.running().get("slow", {}).get("state") == "starting")

    open_ui(page, gw, "memory")
    ram = page.locator('svg[data-resource="ram"]')
    ram.locator('rect.band[data-model="slow"]').wait_for()
    geometry = ram.evaluate(
        """(svg) => {
          const out = {free: Number(svg.querySelector("rect.free").getAttribute("height")),
                       scale: Number(svg.dataset.scale), bands: {}};
          for (const r of svg.querySelectorAll("rect.band")) out.bands[r.dataset.model] = {
            y: Number(r.getAttribute("y")), height: Number(r.getAttribute("height")),
            bytes: Number(r.dataset.bytes), dash: r.getAttribute("stroke-dasharray"),
            cls: r.getAttribute("class")};
          return out;
        }"""
    )
    bands = geometry["bands"]
    assert set(bands) >= {"small", "medium", "big", "slow"}
    assert bands["small"]["bytes"] == 256 * MIB
    assert bands["medium"]["bytes"] == 512 * MIB
    basin = geometry["free"]  # the basin's full height is the whole 1 GiB
    assert abs(bands["small"]["height"] - basin * 256 / 1024) <= 1
    assert abs(bands["medium"]["height"] - basin * 512 / 1024) <= 1
    assert abs(bands["medium"]["height"] - 2 * bands["small"]["height"]) <= 1
    assert bands["slow"]["dash"]
    assert "starting" in bands["slow"]["cls"]
    assert not bands["small"]["dash"]
    solid = [b for m, b in bands.items() if m != "slow"]
    stacked = sorted(solid, key=lambda b: -b["y"])  # bottom band first; each sits on the next
    for lower, upper in itertools.pairwise(stacked):
        assert abs(upper["y"] + upper["height"] - lower["y"]) <= 1
    assert "GiB" in (ram.locator('rect.band[data-model="small"] title').text_content() or "")

    gpu = page.locator('svg[data-resource="gpu0"]')
    parts = gpu.locator('g[data-model="big"] rect.part')
    assert parts.count() == 2  # weights + KV cache from the receipt
    weights = float(gpu.locator('rect[data-part="weights"]').get_attribute("data-bytes") or 0)
    assert abs(weights / 1024**3 - 22.07) < 0.01
    limit = gpu.locator("line.limit")
    assert abs(float(limit.get_attribute("data-bytes") or 0) - 0.9 * 96 * 1024**3) < 2
    assert "0.9" in (limit.locator("title").text_content() or "")
    screenshot(page, "memory")
    release.touch()
    loader.join(timeout=HANG)


@ui
def test_playground_streams_an_answer_and_activity_records_it(
    gateway: StartGateway, page: Any
) -> None:
    gw = gateway(f"  smollm2:\n    cmd: {llamacpp_cmd(2048)}\n")
    open_ui(page, gw, "playground")
    page.locator("#pg-model").select_option("smollm2")
    page.get_by_label("Max tokens", exact=True).fill("48")
    page.get_by_label("Temperature", exact=True).fill("0")
    page.get_by_label("Message", exact=True).fill("Name three colours.")
    page.get_by_role("button", name="Send").click()
    answer = page.locator('.msg[data-role="assistant"] .content')
    page.wait_for_function(
        "document.querySelector('#pg-stats').textContent.includes('done')", timeout=HANG * 1000
    )
    assert (answer.text_content() or "").strip()
    stats = page.locator("#pg-stats").text_content() or ""
    assert re.search(r"TTFT \d+ ms", stats), stats
    assert re.search(r"[\d.]+ tok/s", stats), stats
    assert page.get_by_role("button", name="Stop").is_disabled()
    screenshot(page, "playground")

    # Stop: a long answer is cut by the AbortController.
    page.get_by_label("Max tokens", exact=True).fill("1500")
    page.get_by_label("Message", exact=True).fill("Write a long story about a lighthouse.")
    page.get_by_role("button", name="Send").click()
    page.wait_for_function("document.querySelector('#pg-stats').textContent.includes('tokens')")
    page.get_by_role("button", name="Stop").click()
    page.wait_for_function("document.querySelector('#pg-stats').textContent.includes('stopped')")

    page.get_by_role("link", name="Activity").click()
    row = page.locator("#activity-table tbody tr", has_text="smollm2").first
    row.wait_for()
    page.locator('.chart[data-model="smollm2"] svg circle').first.wait_for()
    page.get_by_role("button", name="tok/s").click()
    sort = page.locator('th:has(button[data-sort="tokens_per_second"])')
    assert sort.get_attribute("aria-sort") in ("ascending", "descending")
    screenshot(page, "activity")


@ui
def test_logs_page_shows_live_lines_with_progress_collapsed(
    gateway: StartGateway, page: Any
) -> None:
    gw = gateway(f"  slow:\n    cmd: {fake_cmd('--load-delay 2 --progress-interval 0.2')}\n")
    open_ui(page, gw, "logs")
    page.get_by_label("Source", exact=True).select_option("slow")
    page.locator("#logs-status", has_text="live").wait_for()
    loader = threading.Thread(target=gw.post, args=("/api/models/load/slow", b""), daemon=True)
    loader.start()
    view = page.locator("#logs-view")
    view.locator(".line", has_text="llama_context: n_ctx").wait_for()
    # About ten "load_tensors ... N%" lines were printed; they are one line, redrawn.
    assert view.locator(".line", has_text="loading model tensors").count() == 1
    assert "100%" in (view.locator(".line", has_text="loading model tensors").text_content() or "")
    page.get_by_label("Search", exact=True).fill("n_ctx")
    assert view.locator(".line").count() == 1
    page.get_by_label("Search", exact=True).fill("")
    page.get_by_role("button", name="Pause").click()
    paused = view.locator(".line").count()
    assert request(gw, "POST", "/api/models/unload/slow").status == 200
    page.wait_for_timeout(500)
    assert view.locator(".line").count() == paused
    gw.wait_for(lambda: "slow" not in gw.running())
    assert view.locator(".line").count() == paused  # paused: nothing drawn…
    page.get_by_role("button", name="Resume").click()
    view.locator(".line", has_text="backend exited").wait_for()  # …but nothing lost

    page.get_by_label("Source", exact=True).select_option("")  # the gateway's own log, live
    view.locator(".line", has_text="slow").first.wait_for()
    screenshot(page, "logs")
    loader.join(timeout=HANG)


@ui
def test_keys_configured_shows_login_then_models(
    gateway: StartGateway, browser: Any, tmp_path: Path
) -> None:
    gw = gateway(
        f"  tiny:\n    cmd: {fake_cmd()}\n",
        extra_top=f"apiKeys:\n  - {{key: {KEY}, name: ui, scopes: [inference, read, admin]}}\n",
    )
    assert request(gw, "GET", "/ui/").status == 200  # the page itself is open…
    assert request(gw, "GET", "/ui/app.js").status == 200
    assert request(gw, "GET", "/api/memory").status == 401  # …its data is not
    redirect = request(gw, "GET", "/ui")
    assert redirect.status == 302
    assert redirect.headers["Location"] == "/ui/"

    context = browser.new_context(viewport={"width": 375, "height": 740})
    try:
        page = context.new_page()
        page.goto(gw.url("/ui/"))
        page.get_by_role("heading", name="Sign in").wait_for()
        assert page.locator("#page-models").is_hidden()
        screenshot(page, "login")
        page.get_by_label("API key", exact=True).fill("wrong-key-123")
        page.get_by_role("button", name="Sign in").click()
        page.locator("#login-error", has_text="not accepted").wait_for()
        page.get_by_label("API key", exact=True).fill(KEY)
        page.get_by_role("button", name="Sign in").click()
        card(page, "tiny").wait_for()
        assert page.evaluate("sessionStorage.getItem('modelswap.key')") == KEY
        # 375 px wide: nothing overflows sideways.
        assert page.evaluate("document.documentElement.scrollWidth") <= 375
        # Keyboard: the Load button is reachable with Tab.
        for _ in range(12):
            page.keyboard.press("Tab")
            if page.evaluate("document.activeElement.dataset.role") == "load":
                break
        else:
            pytest.fail("the Load button is not reachable with the keyboard")
        page.keyboard.press("Enter")
        page.wait_for_function(
            "document.querySelector('article[data-model=tiny] .badge').dataset.state === 'ready'"
        )
        for name in ("memory", "logs", "activity", "playground"):
            page.goto(gw.url(f"/ui/#/{name}"))
            page.locator(f"#page-{name}").wait_for()
            assert page.evaluate("document.documentElement.scrollWidth") <= 375, name
        screenshot(page, "playground-375")
    finally:
        context.close()
