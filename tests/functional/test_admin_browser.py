"""The admin in a real browser: navigation by links, a channel paused through the confirmation dialog, the topics
table sorted by its headers, the charts read under the pointer in the viewer's time zone, a channel's dead
letters replayed, and a topic's retention set and a channel rewound.

nsqlookupd, nsqd and the admin run as real processes on loopback; chromium runs the admin's own JavaScript, which
is what the server-side tests cannot reach (the dialog, the fetch behind a button, the refresh of the live part).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Page, Request, expect

from harness.browser import Screenshots, chromium_page, requires_chromium
from harness.processes import FAST_SCAN, NSQDProcess, start_admin, start_lookupd, start_nsqd, wait_for
from tests.functional.test_admin_dead_letters import park

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
                                   "--history-interval=1s", data_path=_directory(tmp_path / "admin")))
        nsqd, admin = started[1], started[2]
        for n in range(3):
            assert nsqd.http("POST", f"/pub?topic={TOPIC}", f"order {n}".encode())[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")[0] == 200
        # nsqd registers with nsqlookupd in the background; the admin only knows what nsqlookupd knows
        wait_for(lambda: TOPIC in _json(admin, "/api/topics").get("topics", []))
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


@requires_chromium
def test_topics_table_sorts_by_backlog_and_stays_sorted_through_refreshes(
        cluster: tuple[NSQDProcess, NSQDProcess], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    nsqd, admin = cluster
    for name, count in (("browser_clicks", 40), ("browser_views", 10)):
        assert nsqd.http("POST", f"/topic/create?topic={name}")[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={name}&channel=slow")[0] == 200
        assert nsqd.http("POST", f"/mpub?topic={name}", b"\n".join([b"event"] * count))[0] == 200
    wait_for(lambda: {"browser_clicks", "browser_views"} <= set(_json(admin, "/api/topics")["topics"]))
    shots = Screenshots(tmp_path, request.node.name)
    with chromium_page() as page, shots.on_failure(page):
        page.goto(f"http://127.0.0.1:{admin.http_port}/topics")
        rows = page.locator("table.topics-overview tbody tr")
        expect(rows.first).to_contain_text("browser_clicks", timeout=WAIT_MS)  # by name at first
        clicks = rows.filter(has_text="browser_clicks")
        # depth, rate, channels, nodes, slowest channel, its backlog
        expect(clicks.locator("td").nth(3)).to_have_text("1")
        expect(clicks.locator("td").nth(4)).to_have_text("1")
        expect(clicks.locator("td").nth(5)).to_have_text("slow")
        expect(clicks.locator("td").nth(6)).to_have_text("40")
        expect(clicks.locator("td").nth(2)).not_to_have_text("–", timeout=WAIT_MS * 2)  # a rate, once sampled

        page.get_by_role("link", name="Backlog").click()
        expect(page).to_have_url(re.compile(r"\?sort=backlog&order=desc$"), timeout=WAIT_MS)
        names = ["browser_clicks", "browser_views", TOPIC]  # 40, 10 and 3 messages waiting
        expect(rows.locator("td:first-child a")).to_have_text(names, timeout=WAIT_MS)
        expect(page.locator('th[aria-sort="descending"]')).to_contain_text("Backlog")
        shots.take(page, "by-backlog")

        assert nsqd.http("POST", f"/mpub?topic={TOPIC}", b"\n".join([b"late"] * 100))[0] == 200
        names = [TOPIC, "browser_clicks", "browser_views"]  # the live refresh re-sorts, same order asked
        expect(rows.locator("td:first-child a")).to_have_text(names, timeout=WAIT_MS)
        expect(page).to_have_url(re.compile(r"\?sort=backlog&order=desc$"))

        page.get_by_role("link", name="Backlog").click()
        expect(page).to_have_url(re.compile(r"\?sort=backlog&order=asc$"), timeout=WAIT_MS)
        expect(rows.locator("td:first-child a")).to_have_text(list(reversed(names)), timeout=WAIT_MS)


@requires_chromium
def test_charts_read_in_the_viewers_time_zone_with_the_value_under_the_pointer(
        cluster: tuple[NSQDProcess, NSQDProcess], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    nsqd, admin = cluster
    for round_ in range(6):  # traffic over a few of the admin's 1 s samples
        assert nsqd.http("POST", f"/mpub?topic={TOPIC}", b"\n".join([b"order"] * (10 + 10 * round_)))[0] == 200
        time.sleep(0.5)
    shots = Screenshots(tmp_path, request.node.name)
    with chromium_page(timezone_id="Asia/Kolkata") as page, shots.on_failure(page):
        page.goto(f"http://127.0.0.1:{admin.http_port}/topics/{TOPIC}/{CHANNEL}")
        zone = re.compile("^Asia/(Kolkata|Calcutta)$")  # chromium says it by its older name
        expect(page.locator(".chart-zone .zone")).to_have_text(zone, timeout=WAIT_MS)
        rate = page.locator("svg.chart").first
        expect(rate.locator(".chart-title")).to_have_text("Rate (msg/s)")
        labels = rate.locator(".chart-time")
        expect(labels.first).to_be_visible(timeout=WAIT_MS)
        for index in range(labels.count()):  # UTC+05:30: each label is its timestamp's time in Kolkata
            label = labels.nth(index)
            kolkata = time.gmtime(float(label.get_attribute("data-ts") or 0) + 5.5 * 3600)
            shown = time.strftime("%H:%M:%S" if label.get_attribute("data-seconds") else "%H:%M", kolkata)
            expect(label).to_have_text(shown)
        font_size = rate.locator(".chart-label").first.evaluate("el => parseFloat(getComputedStyle(el).fontSize)")
        scale = rate.evaluate("el => el.getBoundingClientRect().width / el.viewBox.baseVal.width")
        assert font_size * scale >= 12  # labels read at about the page's own text size (14 px)

        expect(rate.locator(".chart-readout")).to_contain_text("latest:")
        rate.scroll_into_view_if_needed()  # below the queued messages: the pointer moves within the viewport
        box = rate.bounding_box()
        assert box is not None
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5, steps=4)
        expect(rate.locator(".chart-pointer")).to_have_attribute("visibility", "visible")
        expect(rate.locator(".chart-readout")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d · [\d,.]+ msg/s$"))
        shots.take(page, "pointer-on-rate")
        page.mouse.move(5, 5)
        expect(rate.locator(".chart-pointer")).to_have_attribute("visibility", "hidden")
        expect(rate.locator(".chart-readout")).to_contain_text("latest:")


@requires_chromium
def test_queued_messages_show_as_text_as_hex_or_cut(cluster: tuple[NSQDProcess, NSQDProcess], tmp_path: Path,
                                                    request: pytest.FixtureRequest) -> None:
    nsqd, admin = cluster
    script = "<script>window.peeked = true</script>"
    for body in (script.encode(), b"\x00\xff\x01\x02", b"x" * 500):
        assert nsqd.http("POST", f"/pub?topic={TOPIC}", body)[0] == 200
    shots = Screenshots(tmp_path, request.node.name)
    with chromium_page() as page, shots.on_failure(page):
        page.goto(f"http://127.0.0.1:{admin.http_port}/topics/{TOPIC}/{CHANNEL}")
        rows = page.locator("table.peek tbody tr")
        expect(rows).to_have_count(6, timeout=WAIT_MS)  # the 3 orders of the fixture, then these
        bodies = rows.locator("td.body code")
        expect(bodies).to_have_text(["order 0", "order 1", "order 2", script, "00 ff 01 02", "x" * 200 + "…"])
        expect(rows.nth(4).locator("td.body .label")).to_have_text("hex")
        expect(rows.nth(5).locator("td.body")).to_have_attribute("title", "500 bytes")
        expect(rows.first.locator("td").first).to_have_text(f"127.0.0.1:{nsqd.http_port}")
        shots.take(page, "queued")
        assert page.locator("table.peek script").count() == 0
        assert page.evaluate("window.peeked") is None  # shown, never run
    assert _channel(nsqd)["depth"] == 6  # still queued


@requires_chromium
def test_replay_a_channels_dead_letters_from_its_page(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    shots = Screenshots(tmp_path, request.node.name)
    with _nsqd_and_admin(tmp_path, *FAST_SCAN, "--max-attempts=1") as (nsqd, admin):
        assert nsqd.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")[0] == 200
        assert nsqd.http("POST", f"/mpub?topic={TOPIC}", b"poison 1\npoison 2")[0] == 200
        asyncio.run(park(nsqd, 2, TOPIC, CHANNEL))
        with chromium_page() as page, shots.on_failure(page):
            page.goto(f"http://127.0.0.1:{admin.http_port}/topics/{TOPIC}/{CHANNEL}")
            # Total, Depth, Memory + Disk, In-Flight, Deferred, Requeued, Timed Out, Dead Letters, Parked
            total = page.locator("tr.total td")
            expect(total.nth(7)).to_have_text("2", timeout=WAIT_MS)
            expect(total.nth(1)).to_have_text("0")
            expect(page.locator("section.queued", has_text="Dead Letters").locator("td.body code")).to_have_text(
                ["poison 1", "poison 2"])
            shots.take(page, "dead-letters")

            dialog = page.locator("dialog#confirm")
            page.get_by_role("button", name="Replay Dead Letters", exact=True).click()
            expect(dialog).to_be_visible(timeout=WAIT_MS)
            expect(dialog).to_contain_text(f"replay the dead letters of {TOPIC}/{CHANNEL}")
            shots.take(page, "confirm-replay")
            page.locator("#confirm-ok").click()
            expect(page.locator("#action-error")).to_have_text("Replayed 2 dead letters.", timeout=WAIT_MS)
            expect(total.nth(7)).to_have_text("0", timeout=WAIT_MS)
            expect(total.nth(8)).to_have_text("2")  # parked so far
            expect(total.nth(1)).to_have_text("2")  # back in the channel
            expect(page.get_by_role("heading", name="Dead Letters")).to_have_count(0)
            shots.take(page, "replayed")
        assert (_channel(nsqd)["dead_letter_depth"], _channel(nsqd)["depth"]) == (0, 2)


@requires_chromium
def test_set_a_topics_retention_and_rewind_a_channel_from_their_pages(tmp_path: Path,
                                                                    request: pytest.FixtureRequest) -> None:
    shots = Screenshots(tmp_path, request.node.name)
    with _nsqd_and_admin(tmp_path, "--retention-time=1h") as (nsqd, admin):
        assert nsqd.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")[0] == 200
        assert nsqd.http("POST", f"/mpub?topic={TOPIC}", b"order 1\norder 2\norder 3")[0] == 200
        assert nsqd.http("POST", f"/channel/empty?topic={TOPIC}&channel={CHANNEL}")[0] == 200
        with chromium_page() as page, shots.on_failure(page):
            page.goto(f"http://127.0.0.1:{admin.http_port}/topics/{TOPIC}")
            expect(page.locator("p.retention")).to_contain_text("Retains 3 messages", timeout=WAIT_MS)
            page.get_by_label("Retention time").fill("2h")
            page.get_by_role("button", name="Set Retention", exact=True).click()
            dialog = page.locator("dialog#confirm")
            expect(dialog).to_be_visible(timeout=WAIT_MS)
            expect(dialog).to_contain_text(f"change the retention of {TOPIC} (time 2h)?")
            page.locator("#confirm-ok").click()
            expect(page.locator("p.retention")).to_contain_text("for 2h0m0s", timeout=WAIT_MS)
            shots.take(page, "retention-set")

            page.goto(f"http://127.0.0.1:{admin.http_port}/topics/{TOPIC}/{CHANNEL}")
            total = page.locator("tr.total td")
            expect(total.nth(1)).to_have_text("0", timeout=WAIT_MS)
            page.get_by_label("Rewind since").fill("earliest")
            page.get_by_role("button", name="Rewind", exact=True).click()
            expect(dialog).to_be_visible(timeout=WAIT_MS)
            expect(dialog).to_contain_text(f"rewind {TOPIC}/{CHANNEL} (since earliest)?")
            shots.take(page, "confirm-rewind")
            page.locator("#confirm-ok").click()
            expect(page.locator("#action-error")).to_have_text("Rewound 3 messages.", timeout=WAIT_MS)
            expect(total.nth(1)).to_have_text("3", timeout=WAIT_MS)
        assert _channel(nsqd)["depth"] == 3
        audited = [entry["action"] for entry in _json(admin, "/api/audit")["entries"]]
        assert audited == ["rewind_channel", "set_retention"]


@contextmanager
def _nsqd_and_admin(tmp_path: Path, *flags: str) -> Iterator[tuple[NSQDProcess, NSQDProcess]]:
    """nsqd with ``flags``, and the admin pointed at it straight (no lookupd); both stopped after."""
    nsqd = start_nsqd(*flags, data_path=_directory(tmp_path / "nsqd"))
    try:
        admin = start_admin(f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}",
                            data_path=_directory(tmp_path / "admin"))
        try:
            yield nsqd, admin
        finally:
            admin.stop()
    finally:
        nsqd.stop()


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




def _directory(path: Path) -> Path:
    path.mkdir()
    return path
