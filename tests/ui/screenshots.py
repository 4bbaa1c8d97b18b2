"""Refresh docs/screenshots/: every web UI page, desktop and phone, light and dark.

    .venv/bin/python -m tests.ui.screenshots        (or: make screenshots)

Starts ``python -m modelswap serve`` with fake backends (one ready, one failed, one starting,
memory budgets), drives Debian's chromium through each page and saves ``<page>[-dark][-390].png``.
The Playground's tabs come from tests/ui/screenshots_playground.py (``playground-<tab>…png``).
It also fails (exit 1) when a page scrolls sideways at 390 px or logs a console error, so the
pictures in the README never show a broken page.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.e2e.conftest import (
    REPO,
    Gateway,
    chat,
    fake_cmd,
    free_port,
    free_port_range,
    held_cmd,
    request,
    serve_command,
    stop_gateway,
    wait_healthy,
)
from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS
from tests.ui.screenshots_playground import shoot_all as shoot_playground_tabs

OUT = REPO / "docs" / "screenshots"
PAGES = (
    "models",
    "memory",
    "logs",
    "activity",
    "queue",
    "performance",
    "hardware",
    "playground",
    "settings",
)
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}


@contextlib.contextmanager
def demo_gateway(workdir: Path) -> Iterator[tuple[Gateway, Path]]:
    """A gateway with a ready, a failed and a starting model sharing one RAM budget."""
    release = workdir / "release-starting"
    config = workdir / "config.yaml"
    config.write_text(
        f"startPort: {free_port_range(8)}\nstateDir: {workdir / 'state'}\n"
        "resources: {ram: 2GiB}\nfailureBackoff: 600\nperformance: {every: 1s}\n"
        "models:\n"
        f"  qwen-chat:\n    cmd: {fake_cmd('--ctx 4096 -c 8192 -np 2')}\n"
        "    uses: {ram: 900MiB}\n"
        f"  coder:\n    cmd: {fake_cmd('--flavor vllm --ctx 4096 --max-model-len 8192')}\n"
        "    uses: {ram: 400MiB}\n"
        f"  broken:\n    cmd: {fake_cmd('--fail-start')}\n    uses: {{ram: 300MiB}}\n"
        f"  starting:\n    cmd: {held_cmd(release)}\n    uses: {{ram: 256MiB}}\n"
    )
    port = free_port()
    log = (workdir / "modelswap.log").open("wb")
    proc = subprocess.Popen(
        serve_command(config, f"127.0.0.1:{port}"), stdout=log, stderr=subprocess.STDOUT, cwd=REPO
    )
    gw = Gateway(proc, port, workdir / "modelswap.log", config)
    try:
        wait_healthy(gw)
        yield gw, release
    finally:
        release.touch()
        stop_gateway(gw)
        log.close()


def prepare(gw: Gateway) -> threading.Thread:
    for model in ("qwen-chat", "coder"):
        gw.post(f"/api/models/load/{model}", b"")
    gw.post("/api/models/load/broken", b"")
    for _ in range(6):
        chat(gw, "qwen-chat")
        chat(gw, "coder")
    chat(gw, "no-such-model")
    # held until the pictures are taken, however long that is (gw.post gives up after 60 s)
    load = (gw, "POST", "/api/models/load/starting", b"")
    starter = threading.Thread(target=request, args=load, kwargs={"timeout": 1800})
    starter.start()
    gw.wait_for(lambda: gw.running().get("starting", {}).get("state") == "starting")
    return starter


def shoot(
    browser: Any, gw: Gateway, *, dark: bool, size: dict[str, int], out: Path = OUT
) -> list[str]:
    """Screenshot every page; return what is wrong (sideways scroll, console errors)."""
    problems: list[str] = []
    context = browser.new_context(viewport=size, color_scheme="dark" if dark else "light")
    context.set_default_timeout(60_000)
    try:
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        suffix = ("-dark" if dark else "") + ("-390" if size == PHONE else "")
        for name in PAGES:
            page.goto(gw.url(f"/ui/#/{name}"))
            page.locator(f"#page-{name}").wait_for()
            if name == "models":
                page.locator("#events-status", has_text="live").wait_for()
            if name == "logs":
                page.locator("#logs-view .line").first.wait_for()
            if name == "activity":
                page.locator("#activity-table tbody tr").first.wait_for()
            if name == "queue":
                page.locator("#queue-keys .card").first.wait_for()
            if name == "performance":  # a few samples drawn (every 1 s in the demo)
                page.wait_for_function(
                    "(document.querySelector('[data-chart=\"cpu\"] polyline')"
                    " ?.getAttribute('points') || '').split(' ').length >= 3"
                )
            if name == "hardware":
                page.locator("#hardware-info dl").wait_for()
            if name == "playground":
                page.locator("#pg-input").fill("Name three colours.")
                page.get_by_role("button", name="Send").click()
                page.wait_for_function(
                    "document.querySelector('#pg-stats').textContent.includes('done')"
                )
            page.wait_for_timeout(300)  # let the last render settle for the picture
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > size["width"]:
                problems.append(f"{name}{suffix}: {width} px wide in a {size['width']} px window")
            page.screenshot(path=str(out / f"{name}{suffix}.png"), full_page=size != PHONE)
    finally:
        context.close()
    return problems


def main() -> int:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, demo_gateway(Path(tmp)) as (gw, release):
        starter = prepare(gw)
        problems: list[str] = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            try:
                for dark in (False, True):
                    for size in (DESKTOP, PHONE):
                        problems += shoot(browser, gw, dark=dark, size=size)
                problems += shoot_playground_tabs(browser, Path(tmp))
            finally:
                browser.close()
        release.touch()
        starter.join(timeout=60)
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"screenshots in {OUT.relative_to(REPO)}/", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
