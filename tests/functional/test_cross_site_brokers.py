"""What a page on another site can make an operator's browser do to nsqd and nsqlookupd: real processes on
127.0.0.1, Debian's chromium, and the attacking page on 127.0.0.2 (harness.cross_site_page).

The page posts self-submitting ``text/plain`` forms and ``no-cors`` fetches at actions that need no body, and
frames nsqd's ``/stats`` and lookupd's ``/nodes``. By default nothing changes and nothing is framed; with
``--http-allow-cross-site`` the same page deletes, empties, publishes, tombstones and frames, which proves the
attack is real.
"""

from __future__ import annotations

import html
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Response, expect

from harness.browser import chromium_page, requires_chromium
from harness.cross_site_page import cross_site_page
from harness.processes import NSQDProcess, start_lookupd, start_nsqd, wait_for

WAIT_MS = 10_000
# what each attack leaves behind (--http-allow-cross-site), and what is there before it
UNTOUCHED = {"deleted": True, "emptied": 1, "published": 1, "tombstoned": False, "created": False}
ATTACKED = {"deleted": False, "emptied": 0, "published": 2, "tombstoned": True, "created": True}


@dataclass
class Cluster:
    """An nsqd registered with a lookupd, both with or both without ``--http-allow-cross-site``."""

    nsqd: NSQDProcess
    lookupd: NSQDProcess
    allows_cross_site: bool

    def prepare(self, scenario: str) -> list[str]:
        """Topics for one scenario's attacks, each with one message and known to lookupd; the attacks' URLs."""
        for name in ("deleted", "emptied", "published", "tombstoned"):
            assert self.nsqd.http("POST", f"/pub?topic={scenario}-{name}", b"kept")[0] == 200
        wait_for(lambda: self.lookupd.http("GET", f"/lookup?topic={scenario}-tombstoned")[0] == 200,
                 what="nsqd registered its topics")
        nsqd, lookupd = self.nsqd.http_url(""), self.lookupd.http_url("")
        return [f"{nsqd}/topic/delete?topic={scenario}-deleted", f"{nsqd}/topic/empty?topic={scenario}-emptied",
                f"{nsqd}/pub?topic={scenario}-published",
                f"{lookupd}/topic/tombstone?topic={scenario}-tombstoned&node=127.0.0.1:{self.nsqd.http_port}",
                f"{lookupd}/topic/create?topic={scenario}-created"]

    def outcome(self, scenario: str) -> dict[str, Any]:
        depths = {topic["topic_name"]: topic["depth"] for topic in _json(self.nsqd, "/stats?format=json")["topics"]}
        (node,) = _json(self.lookupd, "/nodes")["producers"]
        tombstones = dict(zip(node["topics"], node["tombstones"]))
        return {"deleted": f"{scenario}-deleted" in depths, "emptied": depths[f"{scenario}-emptied"],
                "published": depths[f"{scenario}-published"], "tombstoned": tombstones[f"{scenario}-tombstoned"],
                "created": f"{scenario}-created" in _json(self.lookupd, "/topics")["topics"]}

    @property
    def expected(self) -> tuple[dict[str, Any], int]:
        """The outcome of the attacks, and the status of each."""
        return (ATTACKED, 200) if self.allows_cross_site else (UNTOUCHED, 403)


@pytest.fixture(scope="module", params=["refused", "allowed"])
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    flags = ["--http-allow-cross-site"] if request.param == "allowed" else []
    started = [start_lookupd(*flags)]
    try:
        started.append(start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{started[0].tcp_port}", *flags))
        yield Cluster(started[1], started[0], bool(flags))
    finally:
        for process in reversed(started):
            process.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One chromium for the module's tests (each gets a page of its own): launching it is most of a test's time."""
    with chromium_page() as page:
        assert page.context.browser is not None
        yield page.context.browser


@contextmanager
def new_page(browser: Browser) -> Iterator[Page]:
    page = browser.new_page()
    try:
        yield page
    finally:
        page.close()


@requires_chromium
def test_self_submitting_forms(cluster: Cluster, browser: Browser) -> None:
    urls = cluster.prepare("form")
    assert cluster.outcome("form") == UNTOUCHED
    # each form posts into a frame of its own, so that the page stays and submits them all
    forms = "".join(f'<iframe name="target{index}"></iframe><form method="post" enctype="text/plain" '
                    f'action="{html.escape(url)}" target="target{index}"><input name="a" value="b"></form>'
                    for index, url in enumerate(urls))
    document = f"<!doctype html>{forms}<script>for (const form of document.forms) form.submit()</script>"
    with cross_site_page(document) as page_url, new_page(browser) as page:
        statuses = _statuses_of_posts(page)
        page.goto(page_url)
        _wait_for_count(page, statuses, len(urls))
    _assert_expected(cluster, "form", statuses, len(urls))


@requires_chromium
def test_no_cors_fetches(cluster: Cluster, browser: Browser) -> None:
    urls = cluster.prepare("fetch")
    script = (f"Promise.allSettled({json.dumps(urls)}.map(url => fetch(url, "
              '{method: "POST", mode: "no-cors", body: "x"}))).then(() => { document.title = "sent" })')
    with cross_site_page(f"<!doctype html><title>sending</title><script>{script}</script>") as page_url, \
            new_page(browser) as page:
        statuses = _statuses_of_posts(page)
        page.goto(page_url)
        expect(page).to_have_title("sent", timeout=WAIT_MS)
        _wait_for_count(page, statuses, len(urls))
    _assert_expected(cluster, "fetch", statuses, len(urls))


def _assert_expected(cluster: Cluster, attack: str, statuses: list[int], sent: int) -> None:
    """Every request answered as the cluster's flags say, and the state the attack left is the expected one."""
    outcome, status = cluster.expected
    assert statuses == [status] * sent
    assert cluster.outcome(attack) == outcome


@requires_chromium
def test_frames(cluster: Cluster, browser: Browser) -> None:
    frames = {"nsqd": (cluster.nsqd.http_url("/stats"), "nsqd v"),
              "lookupd": (cluster.lookupd.http_url("/nodes"), '"producers"')}
    document = "<!doctype html>" + "".join(f'<iframe id="{name}" src="{html.escape(url)}"></iframe>'
                                           for name, (url, _) in frames.items())
    with cross_site_page(document) as page_url, new_page(browser) as page:
        refusals = _console_lines_about(page, "frame-ancestors")
        page.goto(page_url)  # returns once the frames loaded, or failed to
        for name, (url, text) in frames.items():
            frame = page.locator(f"#{name}").element_handle().content_frame()
            assert frame is not None
            if cluster.allows_cross_site:
                assert frame.url == url and text in frame.content()
            else:
                # chromium puts its error page in place of a page that forbids the frame
                assert frame.url == "chrome-error://chromewebdata/" and text not in frame.content()
        if not cluster.allows_cross_site:
            _wait_for_count(page, refusals, len(frames))
            assert all("frame-ancestors 'none'" in refusal for refusal in refusals)


def _statuses_of_posts(page: Page) -> list[int]:
    """The status of each answer to a POST the page sends, as they arrive."""
    statuses: list[int] = []

    def record(response: Response) -> None:
        if response.request.method == "POST":
            statuses.append(response.status)

    page.on("response", record)
    return statuses


def _console_lines_about(page: Page, subject: str) -> list[str]:
    lines: list[str] = []

    def record(message: ConsoleMessage) -> None:
        if subject in message.text:
            lines.append(message.text)

    page.on("console", record)
    return lines


def _wait_for_count(page: Page, events: list[Any], count: int) -> None:
    """Lets the page run (and Playwright deliver its events) until ``events`` has ``count`` of them."""
    deadline = time.monotonic() + WAIT_MS / 1000
    while len(events) < count:
        assert time.monotonic() < deadline, f"{len(events)} of {count} events: {events}"
        page.wait_for_timeout(20)


def _json(process: NSQDProcess, path: str) -> Any:
    status, _, body = process.http("GET", path)
    assert status == 200, (path, body)
    return json.loads(body)
