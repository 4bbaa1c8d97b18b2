"""Screenshots of the Playground's tabs, each with a result shown, for docs/screenshots/.

    .venv/bin/python -m tests.ui.screenshots_playground     (only these; `make screenshots`
                                                            takes them too)

A gateway with one model on the Playground fake (tests/fakes/playground_backend.py: chat with
reasoning and a markdown answer, images, speech, transcription, rerank) is driven through each
tab and saved as ``playground-<tab>[-dark][-390].png``; a tab that scrolls sideways at 390 px or
logs a console error is reported, as for the other pages.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.e2e.conftest import (
    REPO,
    Gateway,
    free_port,
    free_port_range,
    serve_command,
    stop_gateway,
    wait_healthy,
)
from tests.fakes.playground_backend import wav
from tests.ui.conftest import CHROMIUM, CHROMIUM_ARGS

OUT = REPO / "docs" / "screenshots"
FAKE = REPO / "tests" / "fakes" / "playground_backend.py"
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1400, "height": 900}
TABS = ("chat", "images", "speech", "transcription", "rerank", "loadtest")
ANSWER = (
    "Use `ls`; **-l** gives the long format:\n\n```sh\nls -la ~/models\n```\n\n"
    "- `-a` shows hidden files too\n- `-h` prints sizes as *K*, *M*, *G*\n\n"
    "See [the coreutils manual](https://www.gnu.org/software/coreutils/ls) for more."
)
REASONING = "The user wants to list files; ls does that, and -la shows everything."


@contextlib.contextmanager
def playground_gateway(workdir: Path) -> Iterator[Gateway]:
    answer = workdir / "answer.md"
    answer.write_text(ANSWER)
    # ~50 tokens/s, as a small model would stream: the stats in the picture look like real ones.
    flags = f'--token-delay 0.02 --answer-file "{answer}" --reasoning'
    cmd = f'"{sys.executable}" "{FAKE}" --port ${{PORT}} {flags}'
    config = workdir / "playground.yaml"
    config.write_text(
        f"startPort: {free_port_range(4)}\nstateDir: {workdir / 'pg-state'}\nmodels:\n"
        f"  studio:\n    cmd: {json.dumps(cmd + ' ' + json.dumps(REASONING))}\n"
    )
    port = free_port()
    log = (workdir / "playground.log").open("wb")
    proc = subprocess.Popen(
        serve_command(config, f"127.0.0.1:{port}"), stdout=log, stderr=subprocess.STDOUT, cwd=REPO
    )
    gw = Gateway(proc, port, workdir / "playground.log", config)
    try:
        wait_healthy(gw)
        yield gw
    finally:
        stop_gateway(gw)
        log.close()


def run_tab(page: Any, name: str) -> None:
    """Fill the tab's form, send it, and wait for its result."""
    panel = page.locator(f"#pg-tab-{name}")
    if name == "chat":
        page.get_by_label("System prompt", exact=True).fill("Answer in markdown.")
        page.get_by_label("Message", exact=True).fill("How do I list the files in a folder?")
        page.get_by_role("button", name="Send", exact=True).click()
        page.wait_for_function("/ · done/.test(document.querySelector('#pg-stats').textContent)")
        return
    if name == "images":
        panel.get_by_label("Prompt", exact=True).fill("a lighthouse at dusk, watercolour")
        page.get_by_label("Count", exact=True).fill("2")
    elif name == "speech":
        page.get_by_label("Text", exact=True).fill("Hello from modelswap.")
    elif name == "transcription":
        page.locator("#pg-transcription-file").set_input_files(
            {"name": "meeting.wav", "mimeType": "audio/wav", "buffer": wav(330.0)}
        )
    elif name == "rerank":
        page.get_by_label("Query", exact=True).fill("how much memory does the model need")
        page.get_by_label("Documents (one a line)", exact=True).fill(
            "The model needs 4 GiB of memory at 8k context.\nLighthouses guide ships.\n"
            "Memory use grows with the context.\nThe gateway listens on port 8080."
        )
    elif name == "loadtest":
        page.get_by_label("Requests (N)", exact=True).fill("40")
        page.get_by_label("Concurrency (C)", exact=True).fill("4")
    panel.locator("button[type=submit]").click()
    page.wait_for_function(
        "s => /^(done|finished)/.test(document.querySelector(s).textContent)",
        arg=f"#pg-{name}-status",
    )
    if name == "loadtest":  # the final numbers: the gateway's own rows for the run
        page.locator('dd[data-role="measured-by"]', has_text="activity log").wait_for()


def shoot_tabs(
    browser: Any, gw: Gateway, *, dark: bool, size: dict[str, int], out: Path
) -> list[str]:
    problems: list[str] = []
    context = browser.new_context(viewport=size, color_scheme="dark" if dark else "light")
    context.set_default_timeout(60_000)
    try:
        page = context.new_page()
        page.on("console", lambda m: m.type == "error" and problems.append(f"console: {m.text}"))
        page.on("pageerror", lambda exc: problems.append(f"page error: {exc}"))
        suffix = ("-dark" if dark else "") + ("-390" if size == PHONE else "")
        for name in TABS:
            page.goto(gw.url(f"/ui/#/playground?tab={name}"))
            page.locator(f"#pg-tab-{name}").wait_for()
            page.locator("#pg-model option", has_text="studio").wait_for(state="attached")
            run_tab(page, name)
            page.wait_for_timeout(300)  # let the last render settle for the picture
            width = page.evaluate("document.documentElement.scrollWidth")
            if width > size["width"]:
                problems.append(f"playground-{name}{suffix}: {width} px wide")
            shot = out / f"playground-{name}{suffix}.png"
            page.screenshot(path=str(shot), full_page=size != PHONE)
    finally:
        context.close()
    return problems


def shoot_all(browser: Any, workdir: Path, out: Path = OUT) -> list[str]:
    """Every tab, desktop and phone, light and dark."""
    problems: list[str] = []
    with playground_gateway(workdir) as gw:
        for dark in (False, True):
            for size in (DESKTOP, PHONE):
                problems += shoot_tabs(browser, gw, dark=dark, size=size, out=out)
    return problems


def main() -> int:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            problems = shoot_all(browser, Path(tmp))
        finally:
            browser.close()
    for problem in problems:
        print(problem, file=sys.stderr)
    print(f"playground screenshots in {OUT.relative_to(REPO)}/", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
