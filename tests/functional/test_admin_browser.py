"""The admin in a real browser: navigation by links, and a channel paused through the confirmation dialog.

nsqlookupd, nsqd and the admin run as real processes on loopback; chromium runs the admin's own JavaScript, which
is what the server-side tests cannot reach (the dialog, the fetch behind a button, the refresh of the live part).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, Request, expect

from tests.browser import Screenshots, chromium_page, requires_chromium
from tests.processes import NSQDProcess, start_admin, start_lookupd, start_nsqd

TOPIC = "browser_orders"
CHANNEL = "archive"
WAIT_MS = 10_000  # each expectation; the admin refreshes its live part every 5 s and right after an action


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[NSQDProcess, NSQDProcess]]:
    """nsqd and the admin, both pointed at one nsqlookupd; yields (nsqd, admin) with a topic and a channel."""
    started = [start_lookupd()]
    try:
        lookupd = started[0]
        started.append(start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                                  data_path=_directory(tmp_path / "nsqd")))
        started.append(start_admin(f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}",
                                   data_path=_directory(tmp_path / "admin")))
        nsqd, admin = started[1], started[2]
        for n in range(3):
            assert nsqd.http("POST", f"/pub?topic={TOPIC}", f"order {n}".encode())[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")[0] == 200
        # nsqd registers with nsqlookupd in the background; the admin only knows what nsqlookupd knows
        _wait_for(lambda: TOPIC in _json(admin, "/api/topics").get("topics", []))
        yield nsqd, admin
    finally:
        for process in reversed(started):
            process.stop()


@requires_chromium
def test_pause_a_channel_from_its_page(cluster: tuple[NSQDProcess, NSQDProcess], tmp_path: Path,
                                       request: pytest.FixtureRequest) -> None:
    nsqd, admin = cluster
    shots = Screenshots(tmp_path, request.node.name)
    with chromium_page() as page, shots.on_failure(page):
        posts = _record_posts(page)
        page.goto(f"http://127.0.0.1:{admin.http_port}/")
        shots.take(page, "topics")

        page.get_by_role("link", name=TOPIC, exact=True).click()
        expect(page).to_have_url(re.compile(rf"/topics/{TOPIC}$"), timeout=WAIT_MS)
        shots.take(page, "topic")

        page.get_by_role("link", name=CHANNEL, exact=True).click()
        expect(page).to_have_url(re.compile(rf"/topics/{TOPIC}/{CHANNEL}$"), timeout=WAIT_MS)
        expect(page.locator("h1")).to_contain_text(CHANNEL, timeout=WAIT_MS)
        expect(page.locator(".label-paused")).to_have_count(0)

        dialog = page.locator("dialog#confirm")
        pause = page.get_by_role("button", name="Pause Channel", exact=True)
        pause.click()
        expect(dialog).to_be_visible(timeout=WAIT_MS)
        expect(dialog).to_contain_text(f"pause {TOPIC}/{CHANNEL}")
        shots.take(page, "confirm-pause")
        dialog.get_by_role("button", name="Cancel").click()
        expect(dialog).to_be_hidden(timeout=WAIT_MS)
        assert _channel(nsqd)["paused"] is False

        pause.click()
        expect(dialog).to_be_visible(timeout=WAIT_MS)
        page.locator("#confirm-ok").click()
        expect(page.locator("h1 .label-paused")).to_have_text("paused", timeout=WAIT_MS)
        expect(page.get_by_role("button", name="UnPause Channel", exact=True)).to_be_visible(timeout=WAIT_MS)
        shots.take(page, "paused")

    assert _channel(nsqd)["paused"] is True
    # had Cancel gone ahead as well, its request would have been sent before the confirmed one
    assert posts == [f"/api/topics/{TOPIC}/{CHANNEL}"]


def _record_posts(page: Page) -> list[str]:
    """Paths of the POSTs the page sends to the admin's API, in order."""
    posts: list[str] = []

    def record(sent: Request) -> None:
        path = urlsplit(sent.url).path
        if sent.method == "POST" and path.startswith("/api/"):
            posts.append(path)

    page.on("request", record)
    return posts


def _channel(nsqd: NSQDProcess) -> dict[str, Any]:
    topics = _json(nsqd, "/stats?format=json")["topics"]
    [topic] = [t for t in topics if t["topic_name"] == TOPIC]
    [channel] = [c for c in topic["channels"] if c["channel_name"] == CHANNEL]
    return channel  # type: ignore[no-any-return]


def _json(process: NSQDProcess, path: str) -> dict[str, Any]:
    status, _, body = process.http("GET", path)
    assert status == 200, body
    return json.loads(body)  # type: ignore[no-any-return]


def _wait_for(condition: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def _directory(path: Path) -> Path:
    path.mkdir()
    return path
