"""What the dashboard's browser tests share: the system chromium (never a downloaded browser)
and the marks that skip a module without it or without playwright, a page that records every
script and console error, and a retry for checks that read the page and the API at slightly
different moments. The ``browser`` fixture itself is in this folder's ``conftest.py``."""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from gpufleet.testing import waiting

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


def _chromium() -> str | None:
    for candidate in (
        os.environ.get("GPUFLEET_CHROMIUM"),
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        "/usr/bin/chromium",
    ):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


CHROMIUM = _chromium()

#: A browser test's marks: slow (a server process and a browser), skipped without either.
BROWSER_MARKS = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("playwright") is None,
        reason="the playwright package is not installed (pip install -e '.[dev]')",
    ),
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no chromium found (apt-get install chromium, or set GPUFLEET_CHROMIUM)",
    ),
]

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


@dataclass
class Watched:
    """A browser page, with every script error and console error it reported."""

    page: Page
    errors: list[str] = field(default_factory=list)


def new_page(browser: Browser) -> Watched:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    watched = Watched(page=context.new_page())
    watched.page.on("pageerror", lambda error: watched.errors.append(f"page error: {error}"))
    watched.page.on(
        "console",
        lambda message: (
            watched.errors.append(f"console {message.type}: {message.text}")
            if message.type == "error"
            else None
        ),
    )
    return watched


def eventually(check: Callable[[], None], timeout: float = 15.0) -> None:
    """Retry ``check`` until it stops failing: page and API are read at slightly different
    moments, and the page refreshes at most once a second (hence the longer default)."""
    waiting.eventually(check, timeout_s=timeout, every_s=0.5)
