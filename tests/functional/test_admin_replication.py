"""The admin's Replication page and ``/api/replication``: three nsqd at replication factor 3 with a real etcd, the
admin pointed at their lookupd; each nsqd's mirrors, in sync and recorded, and per topic who holds whose copy, in a
real browser; a node killed is taken over, and the copies of it go."""

from __future__ import annotations

import json
import re
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from harness.browser import Screenshots, chromium_page, requires_chromium
from harness.etcd import EtcdCluster
from harness.processes import NSQDProcess, start_admin, start_lookupd, wait_for
from tests.functional.test_replication import replication

WAIT_MS = 10_000


@pytest.fixture
def cluster(etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess],
            tmp_path: Path) -> Iterator[tuple[list[NSQDProcess], NSQDProcess]]:
    lookupd = start_lookupd()
    admin: NSQDProcess | None = None
    try:
        nodes = [nsqd_factory(f"--etcd-address={etcd.addresses[0]}", "--replication-address=127.0.0.1:0",
                              "--replication-factor=3", "--replication-liveness-timeout=4s",
                              f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}") for _ in range(3)]
        for nsqd in nodes:
            wait_for(lambda: len(replication(nsqd)["in_sync_recorded"]) == 2, 20, "each nsqd mirrored")
        (tmp_path / "admin").mkdir()
        admin = start_admin(f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}", data_path=tmp_path / "admin")
        yield nodes, admin
    finally:
        if admin is not None:
            admin.stop()
        lookupd.stop()


def api(admin: NSQDProcess) -> dict[str, Any]:
    status, _, body = admin.http("GET", "/api/replication")
    assert status == 200, body
    return dict(json.loads(body))


@requires_chromium
def test_the_replication_page_shows_mirrors_and_who_holds_whose_copies(
        cluster: tuple[list[NSQDProcess], NSQDProcess], tmp_path: Path, request: pytest.FixtureRequest) -> None:
    (a, b, c), admin = cluster
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    a.multi_publish("orders", [b"one", b"two"])
    a_node = f"127.0.0.1:{a.tcp_port}"
    wait_for(lambda: len(api(admin)["nodes"]) == 3, 10, "the admin sees the three nsqd")
    view = api(admin)
    assert [copy for topic in view["topics"] if topic["topic"] == "orders" for copy in topic["copies"]] == [
        {"origin": a_node, "holder": f"127.0.0.1:{node.tcp_port}", "depth": 2, "origin_gone": False}
        for node in sorted((b, c), key=lambda node: f"127.0.0.1:{node.tcp_port}")]
    shots = Screenshots(tmp_path, request.node.name)
    with chromium_page() as page, shots.on_failure(page):
        page.goto(f"http://127.0.0.1:{admin.http_port}/")
        page.get_by_role("link", name="Replication", exact=True).click()
        expect(page).to_have_url(re.compile(r"/replication$"), timeout=WAIT_MS)
        row = page.locator("tr", has=page.get_by_role("link", name=a_node, exact=True))
        expect(row.locator(".mirror")).to_have_count(2)
        expect(row.locator(".mirror .label", has_text="in sync")).to_have_count(2)
        expect(row.locator(".mirror .label", has_text="recorded")).to_have_count(2)
        copies = page.locator("section", has_text="Copies per Topic")
        expect(copies.get_by_role("link", name="orders", exact=True)).to_be_visible()
        expect(copies.locator("tr", has_text=f"127.0.0.1:{b.tcp_port}")).to_contain_text("2")
        shots.take(page, "replication")
        page.get_by_role("link", name=a_node, exact=True).click()  # the node's own page
        expect(page).to_have_url(re.compile(rf"/nodes/127.0.0.1(%3A|:){a.http_port}$"), timeout=WAIT_MS)


def test_without_replication_the_page_says_so_and_the_api_is_empty(
        nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> None:
    nsqd = nsqd_factory()
    (tmp_path / "admin").mkdir()
    admin = start_admin(f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}", data_path=tmp_path / "admin")
    try:
        assert api(admin) == {"nodes": [], "topics": [], "message": ""}
        status, _, page = admin.http("GET", "/replication")
        assert status == 200 and b"No nsqd runs with replication" in page
    finally:
        admin.stop()


def test_a_killed_node_is_taken_over_and_its_copies_go(
        cluster: tuple[list[NSQDProcess], NSQDProcess]) -> None:
    (a, b, c), admin = cluster
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    a.multi_publish("orders", [b"one", b"two"])
    a.process.send_signal(signal.SIGKILL)
    wait_for(lambda: sum(replication(node)["adopted_messages"] for node in (b, c)) == 2, 20, "a taken over")
    assert sum(node["adopted_origins"] for node in api(admin)["nodes"]) == 1
    # the adopter's messages are mirrored as its own now; the copies of a go
    wait_for(lambda: all(copy["origin"] != f"127.0.0.1:{a.tcp_port}"
                         for topic in api(admin)["topics"] for copy in topic["copies"]), 10, "a's copies gone")
