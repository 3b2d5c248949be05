"""Headless Chromium from the system packages (Debian's /usr/bin/chromium), driven by Playwright.

Playwright's own browser download cannot work here, so the tests launch the system's browser. Without
it they fail with the command that installs it: a browser test must never skip silently.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM = os.environ.get("LOOM_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _require_chromium() -> None:
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"the console's browser tests need Chromium at {CHROMIUM} (set LOOM_CHROMIUM to another path): "
                    "apt-get install -y chromium (.ci/run does this)", pytrace=False)


@contextmanager
def chromium(width: int = 1366, height: int = 900) -> Iterator:
    """A fresh browser context (its own user-data directory); yields it, closes it."""
    _require_chromium()
    from playwright.sync_api import sync_playwright

    profile = tempfile.mkdtemp(prefix="loom-chromium-")
    try:
        with sync_playwright() as p:
            context = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS,
                                                           viewport={"width": width, "height": height})
            context.set_default_timeout(15_000)
            try:
                yield context
            finally:
                context.close()
    finally:
        shutil.rmtree(profile, ignore_errors=True)


@contextmanager
def chromium_browser() -> Iterator:
    """One browser for several tests: each opens a context of its own (``new_context``: empty cookies and
    storage, as a fresh profile has), and a launch costs some two CPU-seconds."""
    _require_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()
