"""nsqadmin against a real cluster: nsqlookupd, two nsqd and the admin as processes on loopback."""

from __future__ import annotations

import base64
import http.server
import json
import re
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.processes import FAST_SCAN, NSQDProcess, start_admin, start_lookupd, start_nsqd, wait_for, wait_for_async

ADMIN_USER = {"X-Forwarded-User": "alice"}


@dataclass
class Cluster:
    lookupd: NSQDProcess
    nodes: list[NSQDProcess]
    tmp_path: Path

    def node_name(self, index: int) -> str:
        return f"127.0.0.1:{self.nodes[index].http_port}"

    def admin(self, *flags: str, mode: str = "lookupd") -> NSQDProcess:
        """An admin process (stopped by the caller, or by ``admins`` below)."""
        data_path = self.tmp_path / f"admin{time.monotonic_ns()}"
        data_path.mkdir()
        if mode == "lookupd":
            sources = [f"--lookupd-http-address=127.0.0.1:{self.lookupd.http_port}"]
        else:
            sources = [f"--nsqd-http-address=127.0.0.1:{node.http_port}" for node in self.nodes]
        return start_admin(*sources, *flags, data_path=data_path)




def get_json(process: NSQDProcess, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    status, _, body = process.http("GET", path, headers=headers)
    return status, json.loads(body)


def send(process: NSQDProcess, method: str, path: str, body: Any = None,
         headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    status, _, answer = process.http(method, path, data, headers={"Content-Type": "application/json",
                                                                   **(headers or {})})
    return status, json.loads(answer) if answer else None


def page(process: NSQDProcess, path: str, headers: dict[str, str] | None = None) -> str:
    status, _, body = process.http("GET", path, headers=headers)
    assert status == 200, (path, status, body[:500])
    return body.decode()


def nsqd_channel(node: NSQDProcess, topic: str, channel: str) -> dict[str, Any] | None:
    document = json.loads(node.http("GET", f"/stats?format=json&topic={topic}")[2])
    for topic_stats in document["topics"] or []:
        for channel_stats in topic_stats["channels"]:
            if channel_stats["channel_name"] == channel:
                return channel_stats  # type: ignore[no-any-return]
    return None


def nsqd_topic(node: NSQDProcess, topic: str) -> dict[str, Any] | None:
    document = json.loads(node.http("GET", f"/stats?format=json&topic={topic}")[2])
    return next(iter(document["topics"] or []), None)


def messages(count: int) -> list[bytes]:
    return [b"message %d" % index for index in range(count)]


def create_channel(node: NSQDProcess, topic: str, channel: str) -> None:
    assert node.http("POST", f"/topic/create?topic={topic}")[0] == 200
    assert node.http("POST", f"/channel/create?topic={topic}&channel={channel}")[0] == 200


def start_cluster(tmp_path: Path) -> Cluster:
    lookupd = start_lookupd()
    nodes = []
    try:
        for index in range(2):
            (tmp_path / f"nsqd{index}").mkdir()
            nodes.append(start_nsqd(*FAST_SCAN, f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                                    data_path=tmp_path / f"nsqd{index}"))
    except BaseException:
        stop_all(lookupd, *nodes)
        raise
    return Cluster(lookupd, nodes, tmp_path)


def stop_all(*processes: NSQDProcess) -> None:
    for process in processes:
        process.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """One cluster for the module; each test uses topics of its own."""
    started = start_cluster(tmp_path_factory.mktemp("cluster"))
    yield started
    stop_all(*started.nodes, started.lookupd)


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> Iterator[NSQDProcess]:
    process = cluster.admin("--history-interval=200ms")
    yield process
    process.stop()


def traffic(cluster: Cluster, admin: NSQDProcess, topic: str, channel: str = "archive") -> None:
    """10 messages on the first node and 5 on the second, with a channel on both, known to the admin."""
    for index, count in ((0, 10), (1, 5)):
        create_channel(cluster.nodes[index], topic, channel)
        cluster.nodes[index].multi_publish(topic, messages(count))
    wait_for(lambda: len(get_json(admin, f"/api/topics/{topic}")[1]["nodes"]) == 2)


def test_every_page_shows_the_cluster_after_known_traffic(cluster: Cluster, admin: NSQDProcess) -> None:
    traffic(cluster, admin, "pages")
    status, topic = get_json(admin, "/api/topics/pages")
    assert status == 200 and topic["message"] == ""
    # the topic hands its messages on to its channel at once
    assert (topic["message_count"], topic["depth"]) == (15, 0)
    assert sorted(row["message_count"] for row in topic["nodes"]) == [5, 10]
    [channel] = topic["channels"]
    assert (channel["channel_name"], channel["depth"], channel["message_count"]) == ("archive", 15, 15)
    assert "pages" in get_json(admin, "/api/topics")[1]["topics"]
    counter = get_json(admin, "/api/counter")[1]["stats"]
    assert sum(entry["message_count"] for key, entry in counter.items() if key.startswith("pages:")) == 15
    nodes = get_json(admin, "/api/nodes")[1]["nodes"]
    assert sorted(row["http_port"] for row in nodes) == sorted(node.http_port for node in cluster.nodes)

    html = page(admin, "/topics/pages")
    assert "/topics/pages/archive" in html and ">15<" in html.replace(",", "")
    assert "archive" in page(admin, "/topics/pages/archive")
    assert "pages" in page(admin, "/")
    nodes_html = page(admin, "/nodes")
    assert all(f":{node.http_port}" in nodes_html for node in cluster.nodes)
    assert "pages" in page(admin, f"/nodes/{cluster.node_name(0)}")
    for path in ("/topics", "/counter", "/lookup", "/audit", "/static/admin.js", "/static/admin.css"):
        page(admin, path)
    assert admin.http("GET", "/ping")[2] == b"OK"


def test_without_the_features_beyond_nsq_the_answers_are_nsqadmins(cluster: Cluster, admin: NSQDProcess) -> None:
    """No TTL, attempts limit or disk-queue cap: no field, column or action of theirs shows."""
    traffic(cluster, admin, "plain")
    beyond = {"ttl", "expired_count", "max_attempts", "dead_letter_count", "dead_letter_depth", "dropped_count"}
    topic = get_json(admin, "/api/topics/plain")[1]
    channel = get_json(admin, "/api/topics/plain/archive")[1]
    for row in (topic, *topic["nodes"], *topic["channels"], channel, *channel["nodes"]):
        assert not beyond & set(row), row
    for path in ("/topics/plain", "/topics/plain/archive", f"/nodes/{cluster.node_name(0)}"):
        html = page(admin, path)
        assert not re.search(r">(TTL|Expired|Dead Letters|Parked|Max Attempts|Dropped)</", html), path


def test_channel_page_lists_the_clients(cluster: Cluster, admin: NSQDProcess) -> None:
    import asyncio

    from nsqclient import Consumer, Message

    traffic(cluster, admin, "clients", "workers")
    received: list[Message] = []

    async def consume() -> None:
        async def handler(message: Message) -> None:
            received.append(message)

        consumer = Consumer("clients", "workers", handler, max_in_flight=4, user_agent="billing-worker/2.0",
                            nsqd_tcp_addresses=[f"127.0.0.1:{node.tcp_port}" for node in cluster.nodes])
        await consumer.start()
        try:
            await wait_for_async(lambda: len(received) >= 15, what="15 messages consumed")
            channel = await asyncio.to_thread(get_json, admin, "/api/topics/clients/workers")
            assert channel[1]["message_count"] == 15
            assert len(channel[1]["clients"]) == 2
            assert {client["user_agent"] for client in channel[1]["clients"]} == {"billing-worker/2.0"}
            html = await asyncio.to_thread(page, admin, "/topics/clients/workers")
            assert html.count("billing-worker/2.0") >= 2
        finally:
            await consumer.stop()

    asyncio.run(consume())


def test_queued_messages_are_peeked_on_every_node(cluster: Cluster, admin: NSQDProcess) -> None:
    queued = {0: [b"<b>first</b>", b"second"], 1: [b"\x00\x01 binary"]}
    for index, bodies in queued.items():
        create_channel(cluster.nodes[index], "peeked", "c")
        for body in bodies:
            assert cluster.nodes[index].http("POST", "/pub?topic=peeked", body)[0] == 200
    assert cluster.nodes[0].http("POST", "/pub?topic=peeked_alone", b"waiting")[0] == 200
    wait_for(lambda: len(get_json(admin, "/api/topics/peeked")[1]["nodes"]) == 2)
    wait_for(lambda: "peeked_alone" in get_json(admin, "/api/topics")[1]["topics"])

    def peeked(path: str) -> dict[str, list[bytes]]:
        status, answer = get_json(admin, path)
        assert status == 200 and answer["message"] == "", answer
        by_node: dict[str, list[bytes]] = {}
        for message in answer["messages"]:
            assert len(message["id"]) == 16 and message["attempts"] == 0 and message["timestamp"] > 0
            by_node.setdefault(message["node"], []).append(base64.b64decode(message["body"]))
        return by_node

    expected = {cluster.node_name(index): bodies for index, bodies in queued.items()}
    assert peeked("/api/peek/peeked/c") == expected
    assert peeked("/api/peek/peeked/c?n=1") == {node: bodies[:1] for node, bodies in expected.items()}
    assert peeked("/api/peek/peeked") == {}  # the topic handed them to its channel
    assert peeked("/api/peek/peeked_alone") == {cluster.node_name(0): [b"waiting"]}
    for bad in ("0", "-1", "ten"):
        assert get_json(admin, f"/api/peek/peeked/c?n={bad}") == (400, {"message": "INVALID_ARG_N"})
    assert [nsqd_channel(node, "peeked", "c")["depth"] for node in cluster.nodes] == [2, 1]  # type: ignore[index]

    html = page(admin, "/topics/peeked/c")
    assert "<b>first</b>" not in html and "<code>&lt;b&gt;first&lt;/b&gt;</code>" in html
    assert '<span class="label">hex</span> <code>00 01 20 62 69 6e 61 72 79</code>' in html
    assert "<code>waiting</code>" in page(admin, "/topics/peeked_alone")


def test_topic_and_channel_actions_reach_every_nsqd(cluster: Cluster, admin: NSQDProcess) -> None:
    traffic(cluster, admin, "acts", "c1")
    assert send(admin, "POST", "/api/topics/acts/c1", {"action": "pause"}) == (200, {"message": ""})
    assert all(nsqd_channel(node, "acts", "c1")["paused"] for node in cluster.nodes)  # type: ignore[index]
    assert get_json(admin, "/api/topics/acts/c1")[1]["paused"] is True
    assert send(admin, "POST", "/api/topics/acts/c1", {"action": "unpause"})[0] == 200
    assert not any(nsqd_channel(node, "acts", "c1")["paused"] for node in cluster.nodes)  # type: ignore[index]
    assert send(admin, "POST", "/api/topics/acts/c1", {"action": "empty"})[0] == 200
    assert [nsqd_channel(node, "acts", "c1")["depth"] for node in cluster.nodes] == [0, 0]  # type: ignore[index]

    assert send(admin, "POST", "/api/topics/acts", {"action": "pause"})[0] == 200
    assert all(nsqd_topic(node, "acts")["paused"] for node in cluster.nodes)  # type: ignore[index]
    assert send(admin, "POST", "/api/topics/acts", {"action": "unpause"})[0] == 200
    cluster.nodes[0].multi_publish("acts", messages(3))
    assert send(admin, "POST", "/api/topics/acts", {"action": "empty"})[0] == 200

    assert send(admin, "DELETE", "/api/topics/acts/c1")[0] == 200
    assert all(nsqd_channel(node, "acts", "c1") is None for node in cluster.nodes)
    assert send(admin, "DELETE", "/api/topics/acts")[0] == 200
    assert all(nsqd_topic(node, "acts") is None for node in cluster.nodes)
    wait_for(lambda: "acts" not in get_json(admin, "/api/topics")[1]["topics"])


def test_tombstone_deletes_the_topic_on_one_node_only(cluster: Cluster, admin: NSQDProcess) -> None:
    traffic(cluster, admin, "tomb")
    node = cluster.node_name(1)
    assert send(admin, "DELETE", f"/api/nodes/{node}", {"topic": "tomb"}) == (200, {"message": ""})
    assert nsqd_topic(cluster.nodes[1], "tomb") is None
    assert nsqd_topic(cluster.nodes[0], "tomb") is not None
    rows = {row["http_port"]: row for row in get_json(admin, "/api/nodes")[1]["nodes"]}
    assert {"topic": "tomb", "tombstoned": True} not in rows[cluster.nodes[0].http_port]["topics"]


def test_create_topic_and_channel_through_lookupd(cluster: Cluster, admin: NSQDProcess) -> None:
    assert send(admin, "POST", "/api/topics", {"topic": "planned", "channel": "later"}) == (200, {"message": ""})
    status, inactive = get_json(admin, "/api/topics?inactive=true")
    assert status == 200 and inactive["topics"]["planned"] == ["later"]
    assert "planned" in page(admin, "/lookup")
    # once an nsqd has the topic, creating the channel reaches that nsqd too
    cluster.nodes[0].multi_publish("planned", messages(1))
    wait_for(lambda: get_json(admin, "/api/topics/planned")[1]["nodes"])
    assert send(admin, "POST", "/api/topics", {"topic": "planned", "channel": "now"})[0] == 200
    assert nsqd_channel(cluster.nodes[0], "planned", "now") is not None


def test_bad_requests_get_nsqadmin_error_codes(admin: NSQDProcess) -> None:
    assert send(admin, "POST", "/api/topics", b"{not json") == (400, {"message": "INVALID_BODY"})
    assert send(admin, "POST", "/api/topics", {"topic": "bad topic!"}) == (400, {"message": "INVALID_TOPIC"})
    assert send(admin, "POST", "/api/topics", {"topic": "ok", "channel": "no/pe"}) == (
        400, {"message": "INVALID_CHANNEL"})
    assert send(admin, "POST", "/api/topics/ok", {"action": "explode"}) == (400, {"message": "INVALID_ACTION"})
    assert send(admin, "DELETE", "/api/nodes/127.0.0.1:1", {"topic": ""}) == (400, {"message": "INVALID_TOPIC"})
    assert get_json(admin, "/api/nodes/127.0.0.1:1") == (404, {"message": "NODE_NOT_FOUND"})
    assert get_json(admin, "/api/nope")[0] == 404
    assert get_json(admin, "/api/audit?limit=x") == (400, {"message": "INVALID_ARG_LIMIT"})


def test_history_samples_become_charts(cluster: Cluster, admin: NSQDProcess) -> None:
    traffic(cluster, admin, "charted")
    samples = wait_for(lambda: len(s := get_json(admin, "/api/history/charted")[1]["samples"]) >= 3 and s)
    assert samples[-1]["message_count"] == 15
    channel = wait_for(lambda: get_json(admin, "/api/history/charted/archive")[1]["samples"])
    assert channel[-1]["depth"] == 15
    cluster.nodes[0].multi_publish("charted", messages(20))
    wait_for(lambda: get_json(admin, "/api/history/charted")[1]["samples"][-1]["message_count"] == 35)
    html = page(admin, "/topics/charted")
    assert html.count("<svg") >= 2
    assert "<svg" in page(admin, "/topics/charted/archive?window=24h")


def test_actions_are_audited_and_notified(cluster: Cluster, tmp_path: Path) -> None:
    received: list[dict[str, Any]] = []

    class Endpoint(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    admin = cluster.admin(f"--notification-http-endpoint=http://127.0.0.1:{server.server_port}/notify",
                          "--admin-user=alice")
    try:
        traffic(cluster, admin, "audited")
        assert send(admin, "POST", "/api/topics/audited/archive", {"action": "pause"}, ADMIN_USER)[0] == 200
        [entry] = get_json(admin, "/api/audit")[1]["entries"]
        assert (entry["action"], entry["topic"], entry["channel"], entry["user"], entry["result"]) == (
            "pause_channel", "audited", "archive", "alice", "ok")
        assert "pause_channel" in page(admin, "/audit", ADMIN_USER)
        wait_for(lambda: received)
        note = received[0]
        assert {key: note[key] for key in ("action", "topic", "channel")} == {
            "action": "pause_channel", "topic": "audited", "channel": "archive"}
        assert note["url"].endswith("/api/topics/audited/archive") and note["via"] and note["timestamp"] > 0
    finally:
        admin.stop()
        server.shutdown()
        server.server_close()


def test_a_notification_endpoint_that_is_down_changes_nothing(cluster: Cluster) -> None:
    admin = cluster.admin("--notification-http-endpoint=http://127.0.0.1:1/notify")
    try:
        traffic(cluster, admin, "unnotified")
        assert send(admin, "POST", "/api/topics/unnotified", {"action": "pause"}) == (200, {"message": ""})
        assert send(admin, "POST", "/api/topics/unnotified", {"action": "unpause"}) == (200, {"message": ""})
        assert len(get_json(admin, "/api/audit")[1]["entries"]) == 2
    finally:
        assert admin.stop() == 0


def test_only_admin_users_act(cluster: Cluster) -> None:
    admin = cluster.admin("--admin-user=alice", "--admin-user=bob")
    try:
        traffic(cluster, admin, "guarded")
        assert send(admin, "POST", "/api/topics/guarded", {"action": "pause"}) == (403, {"message": "FORBIDDEN"})
        assert send(admin, "POST", "/api/topics/guarded", {"action": "pause"}, {"X-Forwarded-User": "eve"})[0] == 403
        assert not nsqd_topic(cluster.nodes[0], "guarded")["paused"]  # type: ignore[index]
        assert "data-confirm" not in page(admin, "/topics/guarded")
        assert "data-confirm" in page(admin, "/topics/guarded", ADMIN_USER)
        assert send(admin, "POST", "/api/topics/guarded", {"action": "pause"}, ADMIN_USER)[0] == 200
        assert nsqd_topic(cluster.nodes[0], "guarded")["paused"]  # type: ignore[index]
    finally:
        admin.stop()


def test_config_endpoint_is_gated_by_cidr(cluster: Cluster) -> None:
    admin = cluster.admin()
    try:
        assert get_json(admin, "/config/nsqlookupd_http_addresses") == (
            200, [f"127.0.0.1:{cluster.lookupd.http_port}"])
        assert get_json(admin, "/config/nope") == (404, {"message": "INVALID_OPTION"})
        assert send(admin, "PUT", "/config/log_level", b"debug") == (200, 1)
        assert send(admin, "PUT", "/config/http_address", b"x") == (400, {"message": "INVALID_OPTION"})
        assert send(admin, "PUT", "/config/nsqlookupd_http_addresses", b"[1]") == (400, {"message": "INVALID_VALUE"})
    finally:
        admin.stop()
    admin = cluster.admin("--allow-config-from-cidr=10.0.0.0/8")
    try:
        assert get_json(admin, "/config/log_level") == (403, {"message": "FORBIDDEN"})
    finally:
        admin.stop()


def test_base_path_prefixes_every_route_and_link(cluster: Cluster, admin: NSQDProcess) -> None:
    traffic(cluster, admin, "based")
    prefixed = cluster.admin("--base-path=/ops/nsq/")
    try:
        assert prefixed.http("GET", "/ops/nsq/ping")[2] == b"OK"
        assert get_json(prefixed, "/ops/nsq/api/topics/based")[1]["message_count"] == 15
        html = page(prefixed, "/ops/nsq/")
        links = re.findall(r'(?:href|src)="(/[^"]*)"', html)
        assert links and all(link.startswith("/ops/nsq/") for link in links), links
        assert "/ops/nsq/topics/based" in links
        page(prefixed, "/ops/nsq/static/admin.js")
        assert prefixed.http("GET", "/api/topics")[0] == 404
    finally:
        prefixed.stop()


def test_nsqd_addresses_given_directly(cluster: Cluster, admin: NSQDProcess) -> None:
    traffic(cluster, admin, "direct")
    direct = cluster.admin(mode="nsqd")
    try:
        assert "direct" in get_json(direct, "/api/topics")[1]["topics"]
        assert len(get_json(direct, "/api/nodes")[1]["nodes"]) == 2
        assert get_json(direct, "/api/topics/direct")[1]["message_count"] == 15
        assert send(direct, "POST", "/api/topics/direct/archive", {"action": "pause"})[0] == 200
        assert all(nsqd_channel(node, "direct", "archive")["paused"] for node in cluster.nodes)  # type: ignore[index]
    finally:
        direct.stop()


def test_metrics_show_the_cluster_and_the_admin(cluster: Cluster, admin: NSQDProcess) -> None:
    traffic(cluster, admin, "scraped")
    page(admin, "/topics/scraped")
    text = page(admin, "/metrics")
    assert 'nsqadmin_topic_depth{topic="scraped"} 0.0' in text
    assert 'nsqadmin_topic_messages_total{topic="scraped"} 15.0' in text
    assert 'nsqadmin_channel_depth{channel="archive",topic="scraped"} 15.0' in text
    assert re.search(r'nsqadmin_http_request_duration_seconds_count\{method="GET",'
                     r'route="/topics/\{topic\}",status="200"\} \d', text)


def test_a_dead_node_gives_a_warning_and_the_rest_still_renders(tmp_path: Path) -> None:
    cluster = start_cluster(tmp_path)
    admin = cluster.admin(mode="nsqd")
    try:
        traffic(cluster, admin, "partial")
        cluster.nodes[1].stop(signal.SIGKILL)
        status, topic = get_json(admin, "/api/topics/partial")
        assert status == 200 and topic["message"].startswith("WARNING: ")
        assert str(cluster.nodes[1].http_port) in topic["message"]
        assert topic["message_count"] == 10
        html = page(admin, "/topics/partial")
        assert "WARNING: " in html and str(cluster.nodes[1].http_port) in html
        cluster.nodes[0].stop(signal.SIGKILL)
        status, answer = get_json(admin, "/api/topics/partial")
        assert status == 502 and answer["message"].startswith("UPSTREAM_ERROR: ")
        status, _, body = admin.http("GET", "/topics/partial")
        assert status == 502 and b"UPSTREAM_ERROR" in body
    finally:
        stop_all(admin, *cluster.nodes, cluster.lookupd)


def test_a_hung_node_that_lookupd_still_lists_gives_a_warning(tmp_path: Path) -> None:
    """A killed nsqd drops its lookupd connection and vanishes from the cluster; a hung one stays listed."""
    cluster = start_cluster(tmp_path)
    admin = cluster.admin("--http-client-request-timeout=500ms")
    try:
        traffic(cluster, admin, "hung")
        cluster.nodes[1].process.send_signal(signal.SIGSTOP)
        status, topic = get_json(admin, "/api/topics/hung")
        assert status == 200 and topic["message"].startswith("WARNING: ")
        assert "timed out" in topic["message"] and topic["message_count"] == 10
        assert "WARNING: " in page(admin, "/topics/hung")
        cluster.nodes[1].process.send_signal(signal.SIGCONT)
        wait_for(lambda: get_json(admin, "/api/topics/hung")[1]["message"] == "")
    finally:
        cluster.nodes[1].process.send_signal(signal.SIGCONT)
        stop_all(admin, *cluster.nodes, cluster.lookupd)
