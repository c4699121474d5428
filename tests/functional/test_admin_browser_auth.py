"""The admin in a real browser against a cluster whose HTTP APIs answer to the auth server (``--http-auth-required``):
with its secret (``--http-client-auth-secret-file``) it shows the cluster and acts on it, and its audit log names the
identity the auth server gave the secret; without one, its page says which node refused it and why."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import expect

from harness.browser import Screenshots, chromium_page, requires_chromium
from harness.processes import NSQDProcess, start_admin, start_auth_server, start_lookupd, start_nsqd, wait_for

TOPIC, CHANNEL = "guarded_orders", "archive"
WAIT_MS = 10_000
RULES = {"ttl": 300, "secrets": {
    "operator-secret": {"identity": "ops-console", "authorizations": [
        {"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish", "admin"]}]}}}
OPERATOR = {"Authorization": "Bearer operator-secret"}


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[tuple[NSQDProcess, NSQDProcess]]:
    """A guarded lookupd and nsqd with a topic and a channel; yields (nsqd, lookupd)."""
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps(RULES))
    started = [start_auth_server(rules)]
    try:
        flags = (f"--auth-http-address=127.0.0.1:{started[0].http_port}", "--http-auth-required")
        started.append(start_lookupd(*flags))
        (tmp_path / "nsqd").mkdir()
        started.append(start_nsqd(*flags, f"--lookupd-tcp-address=127.0.0.1:{started[1].tcp_port}",
                                  data_path=tmp_path / "nsqd"))
        nsqd, lookupd = started[2], started[1]
        assert nsqd.http("POST", f"/pub?topic={TOPIC}", b"order", OPERATOR)[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}", headers=OPERATOR)[0] == 200
        wait_for(lambda: TOPIC in json.loads(lookupd.http("GET", "/topics", headers=OPERATOR)[2])["topics"])
        yield nsqd, lookupd
    finally:
        for process in reversed(started):
            process.stop()


@requires_chromium
def test_the_admin_with_its_secret_acts_and_audits_the_identity(guarded: tuple[NSQDProcess, NSQDProcess],
                                                                  tmp_path: Path, request: pytest.FixtureRequest
                                                                  ) -> None:
    nsqd, lookupd = guarded
    secret = tmp_path / "admin.secret"
    secret.write_text("operator-secret\n")
    (tmp_path / "admin").mkdir()
    admin = start_admin(f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}",
                        f"--http-client-auth-secret-file={secret}", data_path=tmp_path / "admin")
    shots = Screenshots(tmp_path, request.node.name)
    try:
        with chromium_page() as page, shots.on_failure(page):
            page.goto(f"http://127.0.0.1:{admin.http_port}/")
            page.get_by_role("link", name=TOPIC, exact=True).click()
            page.get_by_role("link", name=CHANNEL, exact=True).click()
            expect(page).to_have_url(re.compile(rf"/topics/{TOPIC}/{CHANNEL}$"), timeout=WAIT_MS)
            page.get_by_role("button", name="Pause Channel", exact=True).click()
            page.locator("#confirm-ok").click()
            expect(page.locator("h1 .label-paused")).to_have_text("paused", timeout=WAIT_MS)
            shots.take(page, "paused")
            page.goto(f"http://127.0.0.1:{admin.http_port}/audit")
            row = page.locator("tbody tr").first
            expect(row).to_contain_text("pause_channel", timeout=WAIT_MS)
            expect(row).to_contain_text("ops-console")
            shots.take(page, "audit")
        stats = json.loads(nsqd.http("GET", "/stats?format=json", headers=OPERATOR)[2])
        assert stats["topics"][0]["channels"][0]["paused"] is True
    finally:
        admin.stop()


@requires_chromium
def test_the_admin_without_a_secret_says_which_node_refused_it_and_why(guarded: tuple[NSQDProcess, NSQDProcess],
                                                                        tmp_path: Path,
                                                                        request: pytest.FixtureRequest) -> None:
    _, lookupd = guarded
    (tmp_path / "admin").mkdir()
    admin = start_admin(f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", data_path=tmp_path / "admin")
    shots = Screenshots(tmp_path, request.node.name)
    try:
        with chromium_page() as page, shots.on_failure(page):
            page.goto(f"http://127.0.0.1:{admin.http_port}/")
            body = page.locator("body")
            expect(body).to_contain_text(f"127.0.0.1:{lookupd.http_port}", timeout=WAIT_MS)
            expect(body).to_contain_text("AUTH_REQUIRED")
            expect(body).to_contain_text("--http-client-auth-secret-file")
            shots.take(page, "refused")
    finally:
        admin.stop()
