"""nsqd's HTTP API against a real nsqd (in this process: harness.in_process), and against NSQ 1.3's own answers
captured in tests/reference/.

Every route is checked for its status codes, NSQ's error codes, the ``X-NSQ-Content-Type`` and ``Content-Type``
headers, and, for JSON, the exact key set and JSON types of NSQ's documents (``assert_same_shape``). Behaviour
the answers promise (pause holds messages, empty drops them, defer defers) is checked through a TCP consumer.
"""

from __future__ import annotations

import http.client
import json
import re
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from harness.in_process import InProcessNSQD
from harness.processes import FAST_SCAN, Service, start_nsqd, wait_for_async
from harness.wire import WireClient

REFERENCE = Path(__file__).resolve().parent.parent / "reference"

# list fields NSQ leaves as Go nil slices, rendered as null (nsq-spec.md 2.3)
NULLABLE = frozenset({"topics", "producers", "clients", "percentiles"})
# fields NSQ tags omitempty: absent when zero or empty
OMITEMPTY = frozenset({"global_msg_count", "zone_local_msg_count", "region_local_msg_count", "pub_counts",
                       "authed", "auth_identity", "auth_identity_url"})
CHECKED_HEADERS = ("content-type", "x-nsq-content-type", "allow")

CONSUMER_IDENTITY = {"client_id": "vm", "hostname": "vm", "user_agent": "nsq_tail/1.3.0 go-nsq/1.1.0"}
PRODUCER_IDENTITY = {"client_id": "vm", "hostname": "vm", "user_agent": "to_nsq/1.3.0 go-nsq/1.1.0"}


# -- NSQ's reference answers and the "same shape" comparison ---------------------------------------------------


def reference_json(name: str) -> Any:
    return json.loads((REFERENCE / name).read_text())


def reference_headers(name: str) -> tuple[int, dict[str, str]]:
    status_line, *lines = (REFERENCE / f"{name}.headers").read_text().splitlines()
    fields = (line.partition(":") for line in lines if line.strip())
    return int(status_line.split()[1]), {key.lower(): value.strip() for key, _, value in fields}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: bool is an int in Python, not in JSON
        return "boolean"
    for python_type, name in ((int, "number"), (float, "number"), (str, "string"), (list, "array"),
                              (dict, "object")):
        if isinstance(value, python_type):
            return name
    raise TypeError(f"not a JSON value: {value!r}")


def shape_differences(actual: Any, reference: Any, where: str = "$") -> list[str]:
    """How ``actual`` differs from ``reference`` in shape: the same keys at every level, the same JSON types,
    lists compared by their first elements. ``null`` stands for a list where NSQ has nil slices, and omitempty
    fields may be absent on either side."""
    ours, theirs = json_type(actual), json_type(reference)
    if ours != theirs:
        field = where.rsplit(".", 1)[-1]
        if field in NULLABLE and {ours, theirs} <= {"array", "null"}:
            return []
        return [f"{where}: {ours} where NSQ has {theirs}"]
    if ours == "object":
        problems = [f"{where}.{key}: missing" for key in reference.keys() - actual.keys() - OMITEMPTY]
        problems += [f"{where}.{key}: not in NSQ's" for key in actual.keys() - reference.keys() - OMITEMPTY]
        for key in sorted(actual.keys() & reference.keys()):
            problems += shape_differences(actual[key], reference[key], f"{where}.{key}")
        return problems
    if ours == "array" and actual and reference:
        return shape_differences(actual[0], reference[0], f"{where}[0]")
    return []


def assert_same_shape(actual: Any, reference: Any) -> None:
    assert shape_differences(actual, reference) == []


def test_shape_comparison_catches_differences() -> None:
    reference = {"a": 1, "b": [{"c": "x"}], "clients": None, "pub_counts": [{"topic": "t"}]}
    assert shape_differences({"a": 2, "b": [], "clients": [{"any": 1}]}, reference) == []
    assert shape_differences({"a": True, "b": [{"c": "y"}], "clients": None}, reference) == \
        ["$.a: boolean where NSQ has number"]
    assert shape_differences({"a": 1, "b": [{"c": "y", "d": 0}], "clients": None, "e": None}, reference) == \
        ["$.e: not in NSQ's", "$.b[0].d: not in NSQ's"]
    assert shape_differences({"b": None, "clients": None}, reference) == \
        ["$.a: missing", "$.b: null where NSQ has array"]


def stats_text_skeleton(text: str) -> list[str]:
    """/stats text with what differs between runs masked: build, times, memory figures, client ports and
    durations, then digits (one for one, so the padding of NSQ's ``%-5d`` columns is still compared)."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"\(built w/[^)]*\)", "(built w/...)", line)
        line = re.sub(r"^(start_time|uptime) .*", r"\1 ...", line)
        line = re.sub(r"\t\d+$", "\t...", line)
        line = re.sub(r"^( +\[V2 [^:]+):\d+ ", r"\1:port ", line)
        line = re.sub(r"connected: \d+s$", "connected: ...", line)
        lines.append(re.sub(r"\d", "N", line))
    return lines


# -- HTTP and TCP helpers --------------------------------------------------------------------------------------


class Reply(NamedTuple):
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def call(nsqd: Service, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None, chunked: bool = False) -> Reply:
    """One request on its own connection; redirects are returned, not followed."""
    connection = http.client.HTTPConnection("127.0.0.1", nsqd.http_port, timeout=10)
    try:
        connection.request(method, path, body=iter([body]) if chunked and body else body, headers=headers or {},
                           encode_chunked=chunked)
        response = connection.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


def error_of(reply: Reply) -> tuple[int, str]:
    assert reply.headers["content-type"] == "application/json; charset=utf-8"
    assert reply.headers["x-nsq-content-type"] == "nsq; version=1.0"
    return reply.status, reply.json()["message"]


def assert_headers_like(reply: Reply, reference: str) -> None:
    status, headers = reference_headers(reference)
    assert reply.status == status
    for name in CHECKED_HEADERS:
        assert reply.headers.get(name) == headers.get(name), name


def assert_empty_ok(reply: Reply) -> None:
    """NSQ's answer to an action: 200, V1 header, no body and so (Go) no Content-Type."""
    assert (reply.status, reply.body) == (200, b"")
    assert reply.headers["x-nsq-content-type"] == "nsq; version=1.0"
    assert "content-type" not in reply.headers


def stats(nsqd: Service, query: str = "") -> Any:
    reply = call(nsqd, "GET", f"/stats?format=json{query}")
    assert reply.status == 200
    return reply.json()


def binary_mpub(*bodies: bytes) -> bytes:
    """/mpub?binary=true: [4B count]([4B size][message])*, big-endian."""
    return struct.pack(">i", len(bodies)) + b"".join(struct.pack(">i", len(body)) + body for body in bodies)


Connect = Callable[..., Awaitable[WireClient]]


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    """Opens protocol-V2 connections (IDENTIFYing when given fields); all are closed at teardown."""
    opened: list[WireClient] = []

    async def open_connection(nsqd: Service, **identify: Any) -> WireClient:
        client = await WireClient.connect(nsqd.tcp_address)
        opened.append(client)
        if identify:
            await client.identify(**identify)
        return client

    yield open_connection
    for client in opened:
        await client.close()


@pytest.fixture
def nsqd_factory(in_process_nsqd_factory: Callable[..., InProcessNSQD]) -> Callable[..., InProcessNSQD]:
    """This module's nsqd runs in the test's process: what it answers is all these tests check."""
    return in_process_nsqd_factory


@pytest.fixture
def nsqd(nsqd_factory: Callable[..., InProcessNSQD]) -> InProcessNSQD:
    return nsqd_factory()


@pytest.fixture(scope="module")
def shared_nsqd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessNSQD]:
    """One nsqd for the tests that only read it or check error codes (small limits for the size checks)."""
    nsqd = InProcessNSQD(*FAST_SCAN, "--max-msg-size=100", "--max-body-size=300",
                         data_path=tmp_path_factory.mktemp("nsqd"))
    yield nsqd
    nsqd.stop()


# -- /ping, /info ----------------------------------------------------------------------------------------------


def test_ping(shared_nsqd: Service) -> None:
    reply = call(shared_nsqd, "GET", "/ping")
    assert_headers_like(reply, "nsqd_ping.txt")
    assert reply.body == (REFERENCE / "nsqd_ping.txt").read_bytes() == b"OK"


def test_info(shared_nsqd: Service) -> None:
    reply = call(shared_nsqd, "GET", "/info")
    assert_headers_like(reply, "nsqd_info.json")
    info = reply.json()
    assert_same_shape(info, reference_json("nsqd_info.json"))
    assert (info["tcp_port"], info["http_port"]) == (shared_nsqd.tcp_port, shared_nsqd.http_port)
    assert info["version"] == "1.3.0" and info["broadcast_address"] == "127.0.0.1"
    assert info["max_heartbeat_interval"] == 60_000_000_000 and info["max_output_buffer_timeout"] == 30_000_000_000
    assert abs(info["start_time"] - time.time()) < 300


# -- /stats ----------------------------------------------------------------------------------------------------


async def replay_reference_stats(nsqd: Service, connect: Connect) -> None:
    """What the reference capture had: sample_topic/sample_channel, one consumer with RDY 5 that received and
    finished 6 messages, and a 7th message deferred."""
    consumer = await connect(nsqd, **CONSUMER_IDENTITY)
    await consumer.subscribe("sample_topic", "sample_channel", rdy=5)
    for number in range(6):
        assert call(nsqd, "POST", "/pub?topic=sample_topic", f"message {number}".encode()).status == 200
        message = await consumer.read_message()
        await consumer.command(b"FIN", message.id)
    assert call(nsqd, "POST", "/pub?topic=sample_topic&defer=3600000", b"later").status == 200
    await wait_for_async(lambda: nsqd.channel_stats("sample_topic", "sample_channel")["clients"][0]["finish_count"]
                         == 6, what="six FINs counted")


async def test_stats_json_matches_nsq(nsqd: Service, connect: Connect) -> None:
    await replay_reference_stats(nsqd, connect)
    reply = call(nsqd, "GET", "/stats?format=json")
    assert_headers_like(reply, "nsqd_stats.json")
    document = reply.json()
    assert_same_shape(document, reference_json("nsqd_stats.json"))
    assert document["producers"] is None  # HTTP publishers are not producers
    (topic,) = document["topics"]
    (channel,) = topic["channels"]
    (client,) = channel["clients"]
    assert (topic["topic_name"], topic["message_count"], topic["depth"]) == ("sample_topic", 7, 0)
    assert (channel["message_count"], channel["deferred_count"], channel["in_flight_count"]) == (7, 1, 0)
    assert (client["state"], client["ready_count"], client["message_count"], client["finish_count"]) == (3, 5, 6, 6)
    assert (client["client_id"], client["hostname"], client["user_agent"]) == \
        ("vm", "vm", CONSUMER_IDENTITY["user_agent"])


async def test_stats_text_matches_nsq(nsqd: Service, connect: Connect) -> None:
    await replay_reference_stats(nsqd, connect)
    reply = call(nsqd, "GET", "/stats")
    assert_headers_like(reply, "nsqd_stats.txt")
    assert stats_text_skeleton(reply.body.decode()) == \
        stats_text_skeleton((REFERENCE / "nsqd_stats.txt").read_text())


async def test_stats_filters_match_nsq(nsqd: Service, connect: Connect) -> None:
    await replay_reference_stats(nsqd, connect)
    assert call(nsqd, "POST", "/topic/create?topic=other_topic").status == 200
    assert call(nsqd, "POST", "/channel/create?topic=other_topic&channel=other_channel").status == 200

    reply = call(nsqd, "GET", "/stats?format=json&topic=sample_topic&channel=sample_channel")
    assert_headers_like(reply, "nsqd_stats_topic_channel.json")
    filtered = reply.json()
    assert_same_shape(filtered, reference_json("nsqd_stats_topic_channel.json"))
    assert [t["topic_name"] for t in filtered["topics"]] == ["sample_topic"]
    assert [c["channel_name"] for c in filtered["topics"][0]["channels"]] == ["sample_channel"]

    reply = call(nsqd, "GET", "/stats?format=json&include_clients=false")
    assert_headers_like(reply, "nsqd_stats_no_clients.json")
    without_clients = reply.json()
    assert_same_shape(without_clients, reference_json("nsqd_stats_no_clients.json"))
    assert [t["topic_name"] for t in without_clients["topics"]] == ["other_topic", "sample_topic"]
    assert all(c["clients"] is None for t in without_clients["topics"] for c in t["channels"])
    assert without_clients["topics"][1]["channels"][0]["client_count"] == 1

    channel_only = stats(nsqd, "&channel=other_channel")
    assert [t["topic_name"] for t in channel_only["topics"]] == ["other_topic"]


def test_stats_without_memory(shared_nsqd: Service) -> None:
    document = stats(shared_nsqd, "&include_mem=false")
    assert "memory" not in document
    reference = reference_json("nsqd_stats.json")
    del reference["memory"]
    assert_same_shape(document, reference)
    assert "Memory:" not in call(shared_nsqd, "GET", "/stats?include_mem=0").body.decode()


def test_stats_filter_matching_nothing(shared_nsqd: Service) -> None:
    assert call(shared_nsqd, "POST", "/topic/create?topic=lonely").status == 200
    # an unknown topic: NSQ returns before listing anything, topics and producers are null
    nothing = stats(shared_nsqd, "&topic=no_such_topic")
    assert (nothing["topics"], nothing["producers"]) == (None, None)
    assert_same_shape(nothing, reference_json("nsqd_stats.json"))
    assert "Topics: None" in call(shared_nsqd, "GET", "/stats?topic=no_such_topic").body.decode()
    # a known topic without that channel is skipped, leaving an empty list
    assert stats(shared_nsqd, "&topic=lonely&channel=no_such_channel")["topics"] == []
    assert stats(shared_nsqd, "&channel=no_such_channel")["topics"] == []


async def test_stats_lists_tcp_producers(nsqd: Service, connect: Connect) -> None:
    await replay_reference_stats(nsqd, connect)
    producer = await connect(nsqd, **PRODUCER_IDENTITY)
    for body in (b"one", b"two", b"three"):
        await producer.command(b"PUB", b"sample_topic", body=body)
        assert (await producer.read_frame()).data == b"OK"

    document = stats(nsqd)
    assert_same_shape(document, reference_json("nsqd_stats_with_tcp_producer.json"))
    (entry,) = document["producers"]
    assert entry["pub_counts"] == [{"topic": "sample_topic", "count": 3}]
    assert (entry["state"], entry["user_agent"]) == (0, PRODUCER_IDENTITY["user_agent"])

    text = call(nsqd, "GET", "/stats").body.decode()
    assert re.search(r"\nProducers:\n   \[V2 vm:\d+ to_nsq/1\.3\.0 go-nsq/1\.1\.0\] msgs: 3        "
                     r"topics: sample_topic=3 connected: \d+s\n$", text), text
    assert stats(nsqd, "&include_clients=false")["producers"] is None


async def test_stats_topic_filter_narrows_pub_counts(nsqd: Service, connect: Connect) -> None:
    producer = await connect(nsqd)
    for topic in (b"first", b"second", b"second"):
        await producer.command(b"PUB", topic, body=b"x")
        assert (await producer.read_frame()).data == b"OK"
    (entry,) = stats(nsqd)["producers"]
    assert entry["pub_counts"] == [{"topic": "first", "count": 1}, {"topic": "second", "count": 2}]
    (entry,) = stats(nsqd, "&topic=second")["producers"]
    assert entry["pub_counts"] == [{"topic": "second", "count": 2}]


def test_stats_text_separates_topics_with_a_blank_line(shared_nsqd: Service) -> None:
    for topic in ("text_a", "text_b"):
        assert call(shared_nsqd, "POST", f"/topic/create?topic={topic}").status == 200
    text = call(shared_nsqd, "GET", "/stats").body.decode()
    assert re.search(r"\n   \[text_a +\] depth: .*\n\n   \[text_b +\] depth: ", text), text


def test_stats_e2e_percentiles_before_any_sample(nsqd_factory: Callable[..., Service]) -> None:
    nsqd = nsqd_factory("--e2e-processing-latency-percentile=0.99")
    assert call(nsqd, "POST", "/topic/create?topic=e2e").status == 200
    assert call(nsqd, "POST", "/channel/create?topic=e2e&channel=c").status == 200
    latency = nsqd.channel_stats("e2e", "c")["e2e_processing_latency"]
    assert latency == {"count": 0, "percentiles": [{"quantile": 0.99, "value": 0}]}


async def test_stats_e2e_percentiles(nsqd_factory: Callable[..., Service], connect: Connect) -> None:
    nsqd = nsqd_factory("--e2e-processing-latency-percentile=1.0,0.5")
    consumer = await connect(nsqd)
    await consumer.subscribe("e2e", "c")
    assert call(nsqd, "POST", "/pub?topic=e2e", b"x").status == 200
    await consumer.command(b"FIN", (await consumer.read_message()).id)
    await wait_for_async(lambda: nsqd.channel_stats("e2e", "c")["e2e_processing_latency"]["count"] == 1,
                         what="the FIN's latency counted")
    latency = nsqd.channel_stats("e2e", "c")["e2e_processing_latency"]
    assert [p["quantile"] for p in latency["percentiles"]] == [1.0, 0.5]
    assert all(json_type(p["value"]) == "number" and p["value"] > 0 for p in latency["percentiles"])
    assert re.search(r"e2e%: \d+\.\d(ns|us|ms|s), \d+\.\d(ns|us|ms|s)\n", call(nsqd, "GET", "/stats").body.decode())


# -- /pub ------------------------------------------------------------------------------------------------------


async def test_pub(shared_nsqd: Service, connect: Connect) -> None:
    consumer = await connect(shared_nsqd)
    await consumer.subscribe("pub_ok", "c")
    reply = call(shared_nsqd, "POST", "/pub?topic=pub_ok", b"hello")
    assert_headers_like(reply, "nsqd_pub_ok.txt")
    assert reply.body == (REFERENCE / "nsqd_pub_ok.txt").read_bytes() == b"OK"
    assert (await consumer.read_message()).body == b"hello"
    # exactly --max-msg-size is allowed, sent with a Content-Length or chunked
    assert call(shared_nsqd, "POST", "/pub?topic=pub_ok", b"x" * 100).status == 200
    assert call(shared_nsqd, "POST", "/pub?topic=pub_ok", b"y" * 100, chunked=True).status == 200


async def test_large_bodies_arrive_whole(nsqd: Service, connect: Connect) -> None:
    """Bodies far larger than one socket read, up to the default --max-msg-size and --max-body-size."""
    consumer = await connect(nsqd)
    await consumer.subscribe("large", "c", rdy=12)
    biggest = bytes(range(256)) * 4096  # 1 MiB, exactly --max-msg-size
    assert call(nsqd, "POST", "/pub?topic=large", biggest).status == 200
    assert call(nsqd, "POST", "/pub?topic=large", biggest, chunked=True).status == 200
    bodies = [bytes([n]) * 1_000_000 for n in range(5)]
    assert len(binary_mpub(*bodies)) < 5 * 1024 * 1024
    assert call(nsqd, "POST", "/mpub?topic=large&binary=true", binary_mpub(*bodies)).status == 200
    text_bodies = [bytes([ord("a") + n]) * 1_000_000 for n in range(5)]
    assert call(nsqd, "POST", "/mpub?topic=large", b"\n".join(text_bodies), chunked=True).status == 200
    received = [message.body for message in await consumer.read_messages(12)]
    assert received == [biggest, biggest, *bodies, *text_bodies]


async def test_pub_defer(nsqd: Service, connect: Connect) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("deferred", "c")
    assert call(nsqd, "POST", "/pub?topic=deferred&defer=400", b"later").status == 200
    assert nsqd.channel_stats("deferred", "c")["deferred_count"] == 1
    await consumer.expect_nothing(0.2)
    assert (await consumer.read_message()).body == b"later"


def test_pub_errors(shared_nsqd: Service) -> None:
    missing = call(shared_nsqd, "POST", "/pub", b"x")
    assert_headers_like(missing, "nsqd_pub_missing_topic.json")
    assert missing.json() == reference_json("nsqd_pub_missing_topic.json")
    cases = [
        ("/pub?topic=t", b"", 400, "MSG_EMPTY"),
        ("/pub", b"", 400, "MSG_EMPTY"),  # the body is checked before the topic
        ("/pub?topic=", b"x", 400, "INVALID_TOPIC"),
        ("/pub?topic=bad!name", b"x", 400, "INVALID_TOPIC"),
        ("/pub?topic=" + "t" * 65, b"x", 400, "INVALID_TOPIC"),
        ("/pub?topic=t&defer=soon", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=-1", b"x", 400, "INVALID_DEFER"),
        ("/pub?topic=t&defer=3600001", b"x", 400, "INVALID_DEFER"),  # above --max-req-timeout
        ("/pub?topic=t", b"x" * 101, 413, "MSG_TOO_BIG"),
        ("/pub", b"x" * 101, 413, "MSG_TOO_BIG"),
    ]
    for path, body, status, code in cases:
        assert error_of(call(shared_nsqd, "POST", path, body)) == (status, code), (path, body[:8])
    assert error_of(call(shared_nsqd, "POST", "/pub?topic=t", b"x" * 101, chunked=True)) == (413, "MSG_TOO_BIG")


def test_pub_wrong_method(shared_nsqd: Service) -> None:
    reply = call(shared_nsqd, "GET", "/pub?topic=t")
    assert_headers_like(reply, "nsqd_GET_pub_method_not_allowed.json")
    assert reply.json() == reference_json("nsqd_GET_pub_method_not_allowed.json")


# -- /mpub -----------------------------------------------------------------------------------------------------


async def test_mpub_text(shared_nsqd: Service, connect: Connect) -> None:
    consumer = await connect(shared_nsqd)
    await consumer.subscribe("mpub_text", "c", rdy=10)
    reply = call(shared_nsqd, "POST", "/mpub?topic=mpub_text", b"one\n\ntwo\r\n\nthree\n")
    assert (reply.status, reply.body, reply.headers["x-nsq-content-type"]) == (200, b"OK", "nsq; version=1.0")
    # empty lines are skipped, \r is kept
    assert [m.body for m in await consumer.read_messages(3)] == [b"one", b"two\r", b"three"]
    assert call(shared_nsqd, "POST", "/mpub?topic=mpub_text&binary=false", b"four").status == 200
    assert (await consumer.read_message()).body == b"four"
    assert call(shared_nsqd, "POST", "/mpub?topic=mpub_text", b"").status == 200  # zero messages is fine
    await consumer.expect_nothing(0.1)


async def test_mpub_binary(shared_nsqd: Service, connect: Connect) -> None:
    consumer = await connect(shared_nsqd)
    await consumer.subscribe("mpub_binary", "c", rdy=10)
    body = binary_mpub(b"line\none", b"\x00\x01", b"x" * 100)
    assert call(shared_nsqd, "POST", "/mpub?topic=mpub_binary&binary=true", body).status == 200
    assert [m.body for m in await consumer.read_messages(3)] == [b"line\none", b"\x00\x01", b"x" * 100]
    # 1 means binary too; an unknown value is binary (with a deprecation warning in the log)
    for flag in ("1", "yes"):
        assert call(shared_nsqd, "POST", f"/mpub?topic=mpub_binary&binary={flag}", binary_mpub(b"b")).status == 200
        assert (await consumer.read_message()).body == b"b"


def test_mpub_errors(shared_nsqd: Service) -> None:
    cases = [
        ("/mpub", b"a\nb", 400, "MISSING_ARG_TOPIC"),
        ("/mpub?topic=bad!name", b"a\nb", 400, "INVALID_TOPIC"),
        ("/mpub?topic=t", b"a\n" * 151, 413, "BODY_TOO_BIG"),  # 302 bytes > --max-body-size=300
        ("/mpub?topic=t&binary=true", b"\x00" * 301, 413, "BODY_TOO_BIG"),
        ("/mpub?topic=t", b"ok\n" + b"x" * 101 + b"\nok", 413, "MSG_TOO_BIG"),
        ("/mpub?topic=t&binary=true", b"", 413, "BAD_BODY"),
        ("/mpub?topic=t&binary=true", b"\x00\x00", 413, "BAD_BODY"),
        ("/mpub?topic=t&binary=true", struct.pack(">i", 0), 413, "BAD_BODY"),
        ("/mpub?topic=t&binary=true", struct.pack(">i", -1), 413, "BAD_BODY"),
        ("/mpub?topic=t&binary=true", struct.pack(">i", 60) + b"\x00" * 8, 413, "BAD_BODY"),  # > (300-4)/5
        ("/mpub?topic=t&binary=true", binary_mpub(b"a", b"b")[:-1], 413, "BAD_MESSAGE"),
        ("/mpub?topic=t&binary=true", struct.pack(">ii", 2, 1) + b"a" + b"\x00\x00", 413, "BAD_MESSAGE"),
        ("/mpub?topic=t&binary=true", struct.pack(">ii", 1, 0), 413, "BAD_MESSAGE"),
        ("/mpub?topic=t&binary=true", binary_mpub(b"x" * 101), 413, "BAD_MESSAGE"),  # too big, binary
    ]
    for path, body, status, code in cases:
        assert error_of(call(shared_nsqd, "POST", path, body)) == (status, code), (path, body[:12])
    assert error_of(call(shared_nsqd, "POST", "/mpub?topic=t", b"a\n" * 151, chunked=True)) == \
        (413, "BODY_TOO_BIG")


# -- /topic/* --------------------------------------------------------------------------------------------------


def test_topic_create_and_delete(shared_nsqd: Service) -> None:
    assert_empty_ok(call(shared_nsqd, "POST", "/topic/create?topic=made"))
    assert_empty_ok(call(shared_nsqd, "POST", "/topic/create?topic=made"))  # idempotent
    assert_empty_ok(call(shared_nsqd, "POST", "/channel/create?topic=made&channel=c"))
    assert [t["topic_name"] for t in stats(shared_nsqd, "&topic=made")["topics"]] == ["made"]
    assert_empty_ok(call(shared_nsqd, "POST", "/topic/delete?topic=made"))
    assert stats(shared_nsqd, "&topic=made")["topics"] is None
    assert error_of(call(shared_nsqd, "POST", "/topic/delete?topic=made")) == (404, "TOPIC_NOT_FOUND")


def test_topic_errors(shared_nsqd: Service) -> None:
    cases = {
        "create": [("", 400, "MISSING_ARG_TOPIC"), ("?topic=bad!name", 400, "INVALID_TOPIC")],
        "empty": [("", 400, "MISSING_ARG_TOPIC"), ("?topic=bad!name", 400, "INVALID_TOPIC"),
                  ("?topic=nowhere", 404, "TOPIC_NOT_FOUND")],
        # NSQ does not validate the name for delete and (un)pause: an invalid one is simply not found
        "delete": [("", 400, "MISSING_ARG_TOPIC"), ("?topic=bad!name", 404, "TOPIC_NOT_FOUND"),
                   ("?topic=nowhere", 404, "TOPIC_NOT_FOUND")],
        "pause": [("", 400, "MISSING_ARG_TOPIC"), ("?topic=bad!name", 404, "TOPIC_NOT_FOUND"),
                  ("?topic=nowhere", 404, "TOPIC_NOT_FOUND")],
        "unpause": [("", 400, "MISSING_ARG_TOPIC"), ("?topic=nowhere", 404, "TOPIC_NOT_FOUND")],
    }
    for action, action_cases in cases.items():
        for query, status, code in action_cases:
            assert error_of(call(shared_nsqd, "POST", f"/topic/{action}{query}")) == (status, code), (action, query)
        assert error_of(call(shared_nsqd, "GET", f"/topic/{action}?topic=t")) == (405, "METHOD_NOT_ALLOWED")


def test_topic_empty(shared_nsqd: Service) -> None:
    assert call(shared_nsqd, "POST", "/mpub?topic=to_empty", b"a\nb").status == 200
    assert stats(shared_nsqd, "&topic=to_empty")["topics"][0]["depth"] == 2
    assert_empty_ok(call(shared_nsqd, "POST", "/topic/empty?topic=to_empty"))
    (topic,) = stats(shared_nsqd, "&topic=to_empty")["topics"]
    assert (topic["depth"], topic["message_count"]) == (0, 2)


async def test_topic_pause_holds_messages(nsqd: Service, connect: Connect) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("paused_topic", "c")
    assert_empty_ok(call(nsqd, "POST", "/topic/pause?topic=paused_topic"))
    assert call(nsqd, "POST", "/pub?topic=paused_topic", b"held").status == 200
    await consumer.expect_nothing(0.3)
    (topic,) = stats(nsqd, "&topic=paused_topic")["topics"]
    assert (topic["paused"], topic["depth"], topic["channels"][0]["depth"]) == (True, 1, 0)
    assert "*P [paused_topic" in call(nsqd, "GET", "/stats").body.decode()

    assert_empty_ok(call(nsqd, "POST", "/topic/unpause?topic=paused_topic"))
    assert (await consumer.read_message()).body == b"held"
    assert stats(nsqd, "&topic=paused_topic")["topics"][0]["paused"] is False


# -- /channel/* ------------------------------------------------------------------------------------------------


def test_channel_create_and_delete(shared_nsqd: Service) -> None:
    assert error_of(call(shared_nsqd, "POST", "/channel/create?topic=later&channel=c")) == (404, "TOPIC_NOT_FOUND")
    assert stats(shared_nsqd, "&topic=later")["topics"] is None  # /channel/create does not create topics
    assert call(shared_nsqd, "POST", "/topic/create?topic=later").status == 200
    assert_empty_ok(call(shared_nsqd, "POST", "/channel/create?topic=later&channel=c"))
    assert shared_nsqd.channel_stats("later", "c")["clients"] == []
    assert_empty_ok(call(shared_nsqd, "POST", "/channel/delete?topic=later&channel=c"))
    assert stats(shared_nsqd, "&topic=later")["topics"][0]["channels"] == []
    assert error_of(call(shared_nsqd, "POST", "/channel/delete?topic=later&channel=c")) == \
        (404, "CHANNEL_NOT_FOUND")


def test_channel_errors(shared_nsqd: Service) -> None:
    assert call(shared_nsqd, "POST", "/topic/create?topic=has_no_channels").status == 200
    cases = [
        ("", 400, "MISSING_ARG_TOPIC"),
        ("?channel=c", 400, "MISSING_ARG_TOPIC"),
        ("?topic=bad!name&channel=c", 400, "INVALID_ARG_TOPIC"),
        ("?topic=has_no_channels", 400, "MISSING_ARG_CHANNEL"),
        ("?topic=has_no_channels&channel=bad!name", 400, "INVALID_ARG_CHANNEL"),
        ("?topic=has_no_channels&channel=", 400, "INVALID_ARG_CHANNEL"),
        ("?topic=nowhere&channel=c", 404, "TOPIC_NOT_FOUND"),
    ]
    for action in ("create", "delete", "empty", "pause", "unpause"):
        for query, status, code in cases:
            assert error_of(call(shared_nsqd, "POST", f"/channel/{action}{query}")) == (status, code), \
                (action, query)
        if action != "create":
            assert error_of(call(shared_nsqd, "POST", f"/channel/{action}?topic=has_no_channels&channel=c")) == \
                (404, "CHANNEL_NOT_FOUND")


async def test_channel_empty(nsqd: Service, connect: Connect) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("to_empty", "c", rdy=1)
    assert call(nsqd, "POST", "/mpub?topic=to_empty", b"1\n2\n3").status == 200
    assert (await consumer.read_message()).body == b"1"
    channel = nsqd.channel_stats("to_empty", "c")
    assert (channel["depth"], channel["in_flight_count"]) == (2, 1)

    assert_empty_ok(call(nsqd, "POST", "/channel/empty?topic=to_empty&channel=c"))
    channel = nsqd.channel_stats("to_empty", "c")
    assert (channel["depth"], channel["in_flight_count"], channel["deferred_count"]) == (0, 0, 0)
    assert channel["clients"][0]["in_flight_count"] == 0
    # the consumer's RDY window is free again
    assert call(nsqd, "POST", "/pub?topic=to_empty", b"4").status == 200
    assert (await consumer.read_message()).body == b"4"


async def test_channel_pause_holds_messages(nsqd: Service, connect: Connect) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("topic", "paused_channel")
    assert_empty_ok(call(nsqd, "POST", "/channel/pause?topic=topic&channel=paused_channel"))
    assert call(nsqd, "POST", "/pub?topic=topic", b"held").status == 200
    await consumer.expect_nothing(0.3)
    channel = nsqd.channel_stats("topic", "paused_channel")
    assert (channel["paused"], channel["depth"]) == (True, 1)
    assert "   *P [paused_channel" in call(nsqd, "GET", "/stats").body.decode()

    assert_empty_ok(call(nsqd, "POST", "/channel/unpause?topic=topic&channel=paused_channel"))
    assert (await consumer.read_message()).body == b"held"
    assert nsqd.channel_stats("topic", "paused_channel")["paused"] is False


# -- /config/:opt ----------------------------------------------------------------------------------------------


def config_value(nsqd: Service, option: str, method: str = "GET", body: bytes | None = None) -> Any:
    reply = call(nsqd, method, f"/config/{option}", body)
    assert reply.status == 200, reply.body
    assert reply.headers["content-type"] == "application/json; charset=utf-8"
    assert reply.headers["x-nsq-content-type"] == "nsq; version=1.0"
    return reply.json()


def test_config_get(shared_nsqd: Service) -> None:
    assert config_value(shared_nsqd, "msg_timeout") == 60_000_000_000  # durations in nanoseconds
    assert config_value(shared_nsqd, "mem_queue_size") == 10000
    assert config_value(shared_nsqd, "max_msg_size") == 100
    assert config_value(shared_nsqd, "nsqlookupd_tcp_addresses") == []
    assert config_value(shared_nsqd, "log_level") == 2  # Go's lg.INFO
    assert config_value(shared_nsqd, "e2e_processing_latency_percentiles") == []
    assert error_of(call(shared_nsqd, "GET", "/config/no_such_option")) == (400, "INVALID_OPTION")


def test_config_put(nsqd: Service) -> None:
    assert config_value(nsqd, "log_level", "PUT", b"debug") == 1
    assert config_value(nsqd, "log_level") == 1
    addresses = ["127.0.0.2:1", "127.0.0.3:1"]  # nothing listens there, whatever else runs on this machine
    assert config_value(nsqd, "nsqlookupd_tcp_addresses", "PUT", json.dumps(addresses).encode()) == addresses
    assert config_value(nsqd, "nsqlookupd_tcp_addresses") == addresses
    assert config_value(nsqd, "nsqlookupd_tcp_addresses", "PUT", b"[]") == []

    cases = [
        ("log_level", b"", 413, "INVALID_VALUE"),
        ("log_level", b"x" * 1048577, 413, "INVALID_VALUE"),  # more than --max-msg-size
        ("log_level", b"loud", 400, "INVALID_VALUE"),
        ("nsqlookupd_tcp_addresses", b"127.0.0.1:4160", 400, "INVALID_VALUE"),
        ("msg_timeout", b"1s", 400, "INVALID_OPTION"),  # only the two above can be set
        ("no_such_option", b"1", 400, "INVALID_OPTION"),
    ]
    for option, body, status, code in cases:
        assert error_of(call(nsqd, "PUT", f"/config/{option}", body)) == (status, code), (option, body[:8])
    assert config_value(nsqd, "log_level") == 1


# -- the router: 404, 405, OPTIONS, redirects ------------------------------------------------------------------


def test_unknown_path(shared_nsqd: Service) -> None:
    for method, path in (("GET", "/nope"), ("POST", "/topic/nope"), ("GET", "/put?topic=t"),
                         ("POST", "/create_topic?topic=t"), ("GET", "/pub/")):
        reply = call(shared_nsqd, method, path)
        assert error_of(reply) == (404, "NOT_FOUND"), (method, path)
        assert reply.json() == {"message": "NOT_FOUND"}


def test_method_not_allowed_and_options(shared_nsqd: Service) -> None:
    for method, path, allow in (("HEAD", "/ping", "GET, OPTIONS"), ("POST", "/stats", "GET, OPTIONS"),
                                ("POST", "/config/log_level", "GET, OPTIONS, PUT"),
                                ("PUT", "/topic/create", "OPTIONS, POST")):
        reply = call(shared_nsqd, method, path)
        assert (reply.status, reply.headers["allow"]) == (405, allow), (method, path)
        assert reply.headers["x-nsq-content-type"] == "nsq; version=1.0"
    options = call(shared_nsqd, "OPTIONS", "/pub")
    assert (options.status, options.headers["allow"], options.body) == (200, "OPTIONS, POST", b"")


def test_trailing_slash_and_unclean_paths_redirect(shared_nsqd: Service) -> None:
    # httprouter: 301 for GET (with Go's short HTML body), 307 otherwise; the query is kept
    reply = call(shared_nsqd, "GET", "/stats/?format=json")
    assert (reply.status, reply.headers["location"]) == (301, "/stats?format=json")
    assert reply.body == b'<a href="/stats?format=json">Moved Permanently</a>.\n\n'
    reply = call(shared_nsqd, "POST", "/pub/?topic=redirected", b"x")
    assert (reply.status, reply.headers["location"], reply.body) == (307, "/pub?topic=redirected", b"")
    for path, location in (("//ping", "/ping"), ("/config/log_level/", "/config/log_level"),
                           ("/topic/../ping", "/ping")):
        reply = call(shared_nsqd, "GET", path)
        assert (reply.status, reply.headers["location"]) == (301, location), path


# -- /metrics --------------------------------------------------------------------------------------------------


async def test_metrics(nsqd: Service, connect: Connect) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("metered", "reader", rdy=1)
    assert call(nsqd, "POST", "/mpub?topic=metered", b"a\nb\nc").status == 200
    await consumer.read_message()
    assert call(nsqd, "POST", "/topic/create?topic=idle").status == 200
    assert call(nsqd, "POST", "/channel/pause?topic=metered&channel=reader").status == 200

    reply = call(nsqd, "GET", "/metrics")
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    samples = dict(line.rsplit(" ", 1) for line in reply.body.decode().splitlines() if not line.startswith("#"))
    labels = 'channel="reader",topic="metered"'
    expected = {
        'nsq_topic_depth{topic="metered"}': 0, 'nsq_topic_depth{topic="idle"}': 0,
        'nsq_topic_messages_total{topic="metered"}': 3, 'nsq_topic_message_bytes_total{topic="metered"}': 3,
        'nsq_topic_paused{topic="metered"}': 0,
        f"nsq_channel_depth{{{labels}}}": 2, f"nsq_channel_in_flight{{{labels}}}": 1,
        f"nsq_channel_deferred{{{labels}}}": 0, f"nsq_channel_clients{{{labels}}}": 1,
        f"nsq_channel_messages_total{{{labels}}}": 3, f"nsq_channel_requeued_total{{{labels}}}": 0,
        f"nsq_channel_timed_out_total{{{labels}}}": 0, f"nsq_channel_paused{{{labels}}}": 1,
        "nsq_tcp_connections": 1, "nsq_healthy": 1,
    }
    assert {name: float(samples.get(name, "nan")) for name in expected} == expected
    assert float(samples["process_resident_memory_bytes"]) > 0
    assert "process_cpu_seconds_total" in samples and "process_open_fds" in samples


def test_debug_freememory_gives_memory_back_to_the_os(tmp_path: Path) -> None:
    """NSQ 1.3's POST /debug/freememory: a backlog held in memory, emptied, then its memory returned."""

    def resident_mib(pid: int) -> int:
        with open(f"/proc/{pid}/status") as status:
            return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS:"))

    nsqd = start_nsqd("--mem-queue-size=1000000", data_path=tmp_path)  # a process of its own, to measure
    try:
        nsqd.http("POST", "/topic/create?topic=held")
        for _ in range(20):
            nsqd.multi_publish("held", [b"x" * 1000] * 10_000)  # 200 MB in memory
        nsqd.http("POST", "/topic/empty?topic=held")
        emptied = resident_mib(nsqd.process.pid)
        status, headers, body = nsqd.http("POST", "/debug/freememory")
        assert (status, body) == (200, b"")
        assert resident_mib(nsqd.process.pid) < emptied - 100, emptied
        assert nsqd.http("GET", "/debug/freememory")[0] == 405
    finally:
        nsqd.stop()
