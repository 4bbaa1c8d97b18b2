"""Browser fixtures: Playwright (sync API) driving Debian's chromium against a real gateway.

Without /usr/bin/chromium or the playwright package the browser tests are skipped, saying so.
The ``gateway`` factory is the e2e one: ``python -m modelswap serve`` as a subprocess.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.e2e.conftest import REPO, gateway

__all__ = ["gateway"]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "build" / "screenshots"
DOC_SCREENSHOTS = REPO / "docs" / "screenshots"
SKIP_MESSAGE = "ui tests need Debian's chromium: apt-get install chromium"


def _missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _missing()
    if missing:
        pytest.skip(f"{SKIP_MESSAGE} ({missing})")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh browser context (own sessionStorage) at a desktop size; no external requests."""
    context = browser.new_context(viewport={"width": 1280, "height": 860})
    context.set_default_timeout(60_000)  # a ceiling that only ends a hang
    external: list[str] = []

    def on_request(request: Any) -> None:
        if not request.url.startswith(("http://127.0.0.1", "data:")):
            external.append(request.url)

    context.on("request", on_request)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield tab
    finally:
        context.close()
    assert not external, f"the UI made external requests: {external}"
    assert not errors, f"JavaScript errors: {errors}"


def screenshot(tab: Any, name: str, *, publish: bool = False) -> None:
    """Save build/screenshots/<name>.png (a CI artifact); ``publish`` also copies it to
    docs/screenshots/ (committed, shown in the README)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    tab.screenshot(path=str(path), full_page=True)
    if publish:
        DOC_SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, DOC_SCREENSHOTS / f"{name}.png")
