"""A real browser for the admin's tests: Debian's chromium driven by Playwright, and numbered screenshots.

Playwright never downloads a browser here: ``make test`` installs the distribution's chromium, and a machine
without it skips the browser tests instead of failing them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import HttpCredentials, Page, ViewportSize, sync_playwright

CHROMIUM = Path("/usr/bin/chromium")

# headless in a container or CI runner: no sandbox (often no user namespaces), no GPU, and nothing that phones home
# during a test (updates, sync, field trials), so a run depends only on the pages under test
LAUNCH_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync")

# wide enough for the admin's tables, so a screenshot shows a page as people see it
VIEWPORT: ViewportSize = {"width": 1280, "height": 800}

_MISSING = f"{CHROMIUM} is missing: `make test` installs Debian's chromium package (needs root or sudo)"

# on a test whose fixtures start processes, so that a machine without chromium skips before starting them
requires_chromium = pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK), reason=_MISSING)


@contextmanager
def chromium_page(timezone_id: str | None = None, http_credentials: HttpCredentials | None = None,
                  resolve: dict[str, str] | None = None) -> Iterator[Page]:
    """A fresh page in a headless chromium that is closed on the way out, whatever happened; ``timezone_id``
    (``"Asia/Kolkata"``) is the viewer's time zone, the machine's by default; ``http_credentials`` answer an HTTP
    Basic login; ``resolve`` maps names to the addresses the browser's DNS gives them (a rebound name)."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(_MISSING)
    with sync_playwright() as playwright:
        mapped = ", ".join(f"MAP {name} {address}" for name, address in (resolve or {}).items())
        rules = [f"--host-resolver-rules={mapped}"] if mapped else []
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=[*LAUNCH_ARGS, *rules])
        try:
            yield browser.new_page(viewport=VIEWPORT, timezone_id=timezone_id, http_credentials=http_credentials)
        finally:
            browser.close()


class Screenshots:
    """Numbered PNGs of each step, kept where ``NSQ_TEST_ARTIFACTS`` says (CI uploads that directory) and
    otherwise in the test's temporary directory."""

    def __init__(self, tmp_path: Path, test_name: str) -> None:
        root = os.environ.get("NSQ_TEST_ARTIFACTS")
        # one directory per test, so that tests writing to the same artefacts directory keep apart
        self.directory = Path(root) / re.sub(r"[^\w.-]", "_", test_name) if root else tmp_path / "screenshots"
        self.directory.mkdir(parents=True, exist_ok=True)
        self.taken: list[Path] = []

    def take(self, page: Page, step: str) -> Path:
        path = self.directory / f"{len(self.taken) + 1:02d}-{step}.png"
        page.screenshot(path=path, full_page=True)
        self.taken.append(path)
        print(f"screenshot: {path}")  # pytest shows it with the output of a failed test, or always with -s
        return path

    @contextmanager
    def on_failure(self, page: Page) -> Iterator[None]:
        """A last screenshot of the page as it was when the test failed."""
        try:
            yield
        except Exception:
            self.take(page, "failure")
            raise
