"""The admin against a page on another site, in a real browser: a self-submitting form, a no-cors fetch and a frame
from http://127.0.0.2 change nothing and the refusals are audited; the admin's own pages run under their Content
Security Policy with their buttons working; and the built-in login in front of it all.

nsqd and the admin run as real processes on loopback; chromium runs both the admin's pages and the other site's.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest
from playwright.sync_api import Page, expect

from harness.browser import Screenshots, chromium_page, requires_chromium
from harness.cross_site_page import cross_site_page
from harness.processes import NSQDProcess, start_admin, start_nsqd, wait_for
from tests.functional.test_admin import get_json, nsqd_topic

TOPIC = "orders"
WAIT_MS = 10_000
PASSWORD = "wonderland"


@pytest.fixture
def nsqd(tmp_path: Path) -> Iterator[NSQDProcess]:
    (tmp_path / "nsqd").mkdir()
    process = start_nsqd(data_path=tmp_path / "nsqd")
    try:
        for n in range(3):
            assert process.http("POST", f"/pub?topic={TOPIC}", f"order {n}".encode())[0] == 200
        yield process
    finally:
        process.stop()


def start(nsqd: NSQDProcess, tmp_path: Path, *args: str) -> NSQDProcess:
    (tmp_path / "admin").mkdir()
    return start_admin(f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}", *args, data_path=tmp_path / "admin")


@pytest.fixture
def admin(nsqd: NSQDProcess, tmp_path: Path) -> Iterator[NSQDProcess]:
    process = start(nsqd, tmp_path)
    yield process
    process.stop()


def depth(nsqd: NSQDProcess) -> int:
    return int(nsqd_topic(nsqd, TOPIC)["depth"])  # type: ignore[index]


def attack_page(admin: NSQDProcess) -> str:
    """What a page elsewhere tries: a text/plain form whose one field makes the body the admin's JSON, a no-cors
    fetch, and a frame of the admin's topic page."""
    action = f"http://127.0.0.1:{admin.http_port}/api/topics/{TOPIC}"
    return f"""<!doctype html>
<title>elsewhere</title>
<iframe id="framed" src="http://127.0.0.1:{admin.http_port}/topics/{TOPIC}"></iframe>
<form id="form" method="POST" enctype="text/plain" action="{action}">
  <input type="hidden" name='{{"action":"empty","x":"' value='"}}'>
</form>
<script>
  window.fetched = fetch({json.dumps(action)}, {{method: "POST", mode: "no-cors", credentials: "include",
                                                 body: JSON.stringify({{action: "empty"}})}})
    .then((resp) => resp.type, (err) => "failed: " + err);
</script>
"""


@requires_chromium
def test_a_page_on_another_site_cannot_act_through_the_admin(nsqd: NSQDProcess, admin: NSQDProcess,
                                                             tmp_path: Path, request: pytest.FixtureRequest) -> None:
    shots = Screenshots(tmp_path, request.node.name)
    with cross_site_page(attack_page(admin)) as url, chromium_page() as page, shots.on_failure(page):
        page.goto(f"http://127.0.0.1:{admin.http_port}/")  # the operator has the admin open: a session exists
        page.goto(url)
        assert page.evaluate("window.fetched") == "opaque"  # sent, its answer unreadable
        # the browser refused to show the admin in a frame: chromium's error page stands in for it
        assert framed_url(page) == "chrome-error://chromewebdata/"
        shots.take(page, "attack-page")

        page.evaluate("document.getElementById('form').submit()")
        expect(page.locator("body")).to_contain_text("CROSS_SITE_REQUEST", timeout=WAIT_MS)
        shots.take(page, "form-refused")

    assert depth(nsqd) == 3
    entries = get_json(admin, "/api/audit")[1]["entries"]
    assert [(e["action"], e["topic"]) for e in entries] == [("empty_topic", TOPIC)] * 2
    for entry in entries:
        assert entry["result"].startswith(f"refused: CROSS_SITE_REQUEST: refused a request sent from {url[:-1]};")
        assert "Chrome" in entry["user_agent"]


def framed_url(page: Page) -> str:
    """Where the page's frame ended up, once it left about:blank (events reach Playwright while it waits)."""
    handle = page.locator("#framed").element_handle()
    frame = handle.content_frame() if handle is not None else None
    assert frame is not None
    for _ in range(100):
        if frame.url not in ("", "about:blank"):
            break
        page.wait_for_timeout(50)
    return frame.url


def watch_policy(page: Page) -> list[str]:
    """Every Content Security Policy violation the pages report."""
    violations: list[str] = []
    page.on("console", lambda message: violations.append(message.text)
            if "Content Security Policy" in message.text else None)
    page.add_init_script("document.addEventListener('securitypolicyviolation', (e) => "
                         "console.error('Content Security Policy: ' + e.violatedDirective + ' ' + e.blockedURI))")
    return violations


def pause_topic(page: Page) -> None:
    page.get_by_role("button", name="Pause Topic", exact=True).click()
    page.locator("dialog#confirm").get_by_role("button", name="Confirm").click()
    expect(page.locator(".label-paused").first).to_be_visible(timeout=WAIT_MS)


@requires_chromium
def test_the_admins_own_pages_and_buttons_work_under_their_policy(nsqd: NSQDProcess, admin: NSQDProcess,
                                                                   tmp_path: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    shots = Screenshots(tmp_path, request.node.name)
    with chromium_page() as page, shots.on_failure(page):
        violations = watch_policy(page)
        base = f"http://127.0.0.1:{admin.http_port}"
        for path in ("/", "/nodes", "/counter", "/lookup", "/audit", f"/topics/{TOPIC}"):
            response = page.goto(base + path)
            assert response is not None and response.status == 200, path
            assert response.headers["content-security-policy"].endswith("frame-ancestors 'none'")
        pause_topic(page)
        shots.take(page, "paused")
        wait_for(lambda: nsqd_topic(nsqd, TOPIC)["paused"], what="the topic paused")  # type: ignore[index]
        page.wait_for_timeout(500)  # the refresh after the action, under the same policy
        assert violations == []
    (entry,) = get_json(admin, "/api/audit")[1]["entries"]
    assert (entry["action"], entry["result"]) == ("pause_topic", "ok")


@requires_chromium
def test_the_built_in_login(nsqd: NSQDProcess, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(f"alice:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()}\n")
    admin = start(nsqd, tmp_path, f"--htpasswd-file={htpasswd}", "--admin-user=alice")
    shots = Screenshots(tmp_path, request.node.name)
    try:
        with chromium_page(http_credentials={"username": "alice", "password": PASSWORD}) as page, \
                shots.on_failure(page):
            page.goto(f"http://127.0.0.1:{admin.http_port}/topics/{TOPIC}")
            expect(page.locator(".user")).to_have_text("alice")
            pause_topic(page)
            shots.take(page, "paused-as-alice")
        alice = "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
        entries = get_json(admin, "/api/audit", {"Authorization": alice})[1]["entries"]
        assert [(e["user"], e["action"], e["result"]) for e in entries] == [("alice", "pause_topic", "ok")]
    finally:
        admin.stop()
