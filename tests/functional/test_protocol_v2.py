"""Protocol V2 against a real nsqd (in this process, over real sockets): every command, its replies and its error codes."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from harness.in_process import InProcessNSQD
from harness.processes import Service, wait_for_async
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, Frame, encode_mpub


def error(text: str) -> Frame:
    return Frame(FRAME_TYPE_ERROR, text.encode())


@pytest.fixture
def nsqd_factory(in_process_nsqd_factory: Callable[..., InProcessNSQD]) -> Callable[..., InProcessNSQD]:
    """nsqd in this process: what these tests check is what it answers, not how it runs as a program."""
    return in_process_nsqd_factory


async def connect(nsqd: Service) -> WireClient:
    return await WireClient.connect(nsqd.tcp_address)


async def publish(nsqd: Service, topic: str, *bodies: bytes) -> None:
    producer = await connect(nsqd)
    for body in bodies:
        await producer.command(b"PUB", topic.encode(), body=body)
        assert await producer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
    await producer.close()


async def assert_fatal(client: WireClient, expected: str) -> None:
    assert await client.read_frame() == error(expected)
    assert await client.closed()


async def test_bad_magic_is_refused(nsqd: Service) -> None:
    client = await WireClient.connect(nsqd.tcp_address, magic=b"  V1")
    await assert_fatal(client, "E_BAD_PROTOCOL")


async def test_unknown_command_is_fatal(nsqd: Service) -> None:
    client = await connect(nsqd)
    await client.command(b"HELLO")
    await assert_fatal(client, "E_INVALID invalid command HELLO")


async def test_identify_negotiates_features(nsqd_factory: Callable[..., Service]) -> None:
    nsqd = nsqd_factory("--max-rdy-count=100", "--msg-timeout=30s")
    client = await connect(nsqd)
    frame = await client.identify(feature_negotiation=True, client_id="c1", hostname="h1", user_agent="test/1",
                                  heartbeat_interval=2000, output_buffer_size=1024, output_buffer_timeout=100,
                                  sample_rate=0, tls_v1=True)
    reply = json.loads(frame.data)
    assert reply["max_rdy_count"] == 100 and reply["msg_timeout"] == 30000
    assert reply["max_msg_timeout"] == 900000 and reply["version"] == "1.3.0"
    assert reply["output_buffer_size"] == 1024 and reply["output_buffer_timeout"] == 100
    # no certificate: TLS is not offered; compression was not asked for
    assert reply["tls_v1"] is False and reply["snappy"] is False and reply["deflate"] is False
    assert reply["auth_required"] is False
    await client.command(b"SUB", b"t", b"c")
    assert await client.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
    status, _, body = nsqd.http("GET", "/stats?format=json")
    stats = json.loads(body)["topics"][0]["channels"][0]["clients"][0]
    assert (stats["client_id"], stats["hostname"], stats["user_agent"]) == ("c1", "h1", "test/1")
    await client.close()


async def test_identify_without_negotiation_answers_ok(nsqd: Service) -> None:
    client = await connect(nsqd)
    assert await client.identify(client_id="x") == Frame(FRAME_TYPE_RESPONSE, b"OK")
    await client.close()


async def test_identify_out_of_range_is_fatal(nsqd: Service) -> None:
    client = await connect(nsqd)
    await client.command(b"IDENTIFY", body=json.dumps({"heartbeat_interval": 500}).encode())
    await assert_fatal(client, "E_BAD_BODY IDENTIFY heartbeat interval (500) is invalid")


async def test_identify_bad_json_is_fatal(nsqd: Service) -> None:
    client = await connect(nsqd)
    await client.command(b"IDENTIFY", body=b"{nope")
    await assert_fatal(client, "E_BAD_BODY IDENTIFY failed to decode JSON body")


async def test_auth_is_disabled(nsqd: Service) -> None:
    client = await connect(nsqd)
    await client.command(b"AUTH", body=b"secret")
    await assert_fatal(client, "E_AUTH_DISABLED AUTH disabled")


async def test_sub_errors(nsqd: Service) -> None:
    cases = [
        ([b"SUB", b"bad!topic", b"c"], 'E_BAD_TOPIC SUB topic name "bad!topic" is not valid'),
        ([b"SUB", b"t", b"bad#chan"], 'E_BAD_CHANNEL SUB channel name "bad#chan" is not valid'),
        ([b"SUB", b"t"], "E_INVALID SUB insufficient number of parameters"),
    ]
    for command, expected in cases:
        client = await connect(nsqd)
        await client.command(*command)
        await assert_fatal(client, expected)


async def test_sub_needs_heartbeats_and_happens_once(nsqd: Service) -> None:
    client = await connect(nsqd)
    await client.identify(heartbeat_interval=-1)
    await client.command(b"SUB", b"t", b"c")
    await assert_fatal(client, "E_INVALID cannot SUB with heartbeats disabled")
    client = await connect(nsqd)
    await client.subscribe("t", "c")
    await client.command(b"SUB", b"t", b"c")
    await assert_fatal(client, "E_INVALID cannot SUB in current state")


async def test_commands_before_sub_are_invalid(nsqd: Service) -> None:
    for command, expected in [((b"RDY", b"1"), "E_INVALID cannot RDY in current state"),
                              ((b"FIN", b"0" * 16), "E_INVALID cannot FIN in current state"),
                              ((b"REQ", b"0" * 16, b"0"), "E_INVALID cannot REQ in current state"),
                              ((b"TOUCH", b"0" * 16), "E_INVALID cannot TOUCH in current state"),
                              ((b"CLS",), "E_INVALID cannot CLS in current state")]:
        client = await connect(nsqd)
        await client.command(*command)
        await assert_fatal(client, expected)


async def test_rdy_bounds(nsqd_factory: Callable[..., Service]) -> None:
    nsqd = nsqd_factory("--max-rdy-count=10")
    client = await connect(nsqd)
    await client.subscribe("t", "c", rdy=10)
    await client.command(b"RDY", b"11")
    await assert_fatal(client, "E_INVALID RDY count 11 out of range 0-10")
    client = await connect(nsqd)
    await client.subscribe("t", "c")
    await client.command(b"RDY", b"-1")
    await assert_fatal(client, "E_INVALID RDY could not parse count -1")


async def test_rdy_is_an_in_flight_window(nsqd: Service) -> None:
    await publish(nsqd, "window", *[b"m%d" % i for i in range(5)])
    consumer = await connect(nsqd)
    await consumer.subscribe("window", "c", rdy=2)
    first = await consumer.read_messages(2)
    await consumer.expect_nothing(0.3)
    await consumer.command(b"FIN", first[0].id)
    third = await consumer.read_message()
    await consumer.expect_nothing(0.3)
    await consumer.command(b"RDY", b"0")
    for msg in (first[1], third):
        await consumer.command(b"FIN", msg.id)
    await consumer.expect_nothing(0.3)
    await consumer.command(b"RDY", b"5")
    rest = await consumer.read_messages(2)
    assert sorted(m.body for m in [*first, third, *rest]) == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    await consumer.close()


async def test_fin_failures_are_not_fatal(nsqd: Service) -> None:
    await publish(nsqd, "fin", b"one")
    owner = await connect(nsqd)
    await owner.subscribe("fin", "c")
    msg = await owner.read_message()
    other = await connect(nsqd)
    await other.subscribe("fin", "c")
    await other.command(b"FIN", msg.id)
    assert await other.read_frame() == error(f"E_FIN_FAILED FIN {msg.id.decode()} failed client does not own message")
    await other.command(b"FIN", b"0" * 16)
    assert await other.read_frame() == error("E_FIN_FAILED FIN 0000000000000000 failed ID not in flight")
    await other.command(b"REQ", b"0" * 16, b"0")
    assert await other.read_frame() == error("E_REQ_FAILED REQ 0000000000000000 failed ID not in flight")
    await other.command(b"TOUCH", b"0" * 16)
    assert await other.read_frame() == error("E_TOUCH_FAILED TOUCH 0000000000000000 failed ID not in flight")
    await owner.command(b"FIN", msg.id)
    await publish(nsqd, "fin", b"two")
    reads = [asyncio.ensure_future(client.read_message()) for client in (owner, other)]
    done, pending = await asyncio.wait(reads, timeout=6, return_when=asyncio.FIRST_COMPLETED)
    for read in pending:
        read.cancel()
    assert [read.result().body for read in done] == [b"two"]  # both still subscribed: one of them gets it
    await owner.close()
    await other.close()


async def test_fin_with_a_malformed_id_is_fatal(nsqd: Service) -> None:
    client = await connect(nsqd)
    await client.subscribe("t", "c")
    await client.command(b"FIN", b"short")
    await assert_fatal(client, "E_INVALID invalid message ID")


async def test_req_redelivers_now_or_after_its_delay(nsqd: Service) -> None:
    await publish(nsqd, "req", b"again")
    consumer = await connect(nsqd)
    await consumer.subscribe("req", "c", rdy=1)
    msg = await consumer.read_message()
    await consumer.command(b"REQ", msg.id, b"0")
    again = await consumer.read_message()
    assert (again.id, again.attempts) == (msg.id, 2)
    loop = asyncio.get_running_loop()
    requeued_at = loop.time()
    await consumer.command(b"REQ", msg.id, b"600")
    later = await consumer.read_message()
    assert loop.time() - requeued_at >= 0.6
    assert later.attempts == 3
    await consumer.command(b"FIN", later.id)
    stats = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]["channels"][0]
    assert stats["requeue_count"] == 2 and stats["in_flight_count"] == 0 and stats["deferred_count"] == 0
    await consumer.close()


async def test_timeout_redelivers_with_attempts_incremented(nsqd: Service) -> None:
    await publish(nsqd, "timeout", b"slow")
    consumer = await connect(nsqd)
    await consumer.subscribe("timeout", "c", rdy=1, msg_timeout=1000)
    loop = asyncio.get_running_loop()
    msg = await consumer.read_message()
    delivered_at = loop.time()
    again = await consumer.read_message(timeout=5)
    assert loop.time() - delivered_at >= 1.0
    assert (again.id, again.attempts) == (msg.id, 2)
    await consumer.command(b"FIN", again.id)
    stats = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]["channels"][0]
    assert stats["timeout_count"] == 1 and stats["requeue_count"] == 0
    await consumer.close()


async def test_touch_keeps_a_message_past_its_timeout(nsqd: Service) -> None:
    await publish(nsqd, "touch", b"long job")
    consumer = await connect(nsqd)
    await consumer.subscribe("touch", "c", rdy=1, msg_timeout=1000)
    msg = await consumer.read_message()
    for _ in range(4):
        await asyncio.sleep(0.5)
        await consumer.command(b"TOUCH", msg.id)
    await consumer.command(b"FIN", msg.id)
    await consumer.expect_nothing(1.5)
    stats = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]["channels"][0]
    assert stats["timeout_count"] == 0 and stats["clients"][0]["finish_count"] == 1
    await consumer.close()


async def test_heartbeats_and_disconnect_of_a_silent_client(nsqd: Service) -> None:
    client = await connect(nsqd)
    loop = asyncio.get_running_loop()
    last_command_at = loop.time()
    await client.identify(heartbeat_interval=1000)
    frame = await client.read_frame(timeout=2, skip_heartbeats=False)
    assert frame == Frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")
    assert await client.closed(timeout=5)
    # the read deadline is two intervals after the last command nsqd received
    assert 1.95 <= loop.time() - last_command_at <= 3.5


async def test_answering_heartbeats_keeps_the_connection(nsqd: Service) -> None:
    client = await connect(nsqd)
    await client.identify(heartbeat_interval=1000)
    for _ in range(3):
        frame = await client.read_frame(timeout=2, skip_heartbeats=False)
        assert frame.data == b"_heartbeat_"
        await client.command(b"NOP")
    await client.close()


async def test_dpub_defers_delivery(nsqd: Service) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("dpub", "c", rdy=5)
    producer = await connect(nsqd)
    loop = asyncio.get_running_loop()
    sent_at = loop.time()
    await producer.command(b"DPUB", b"dpub", b"800", body=b"later")
    assert await producer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
    msg = await consumer.read_message()
    assert msg.body == b"later" and loop.time() - sent_at >= 0.8
    await producer.command(b"DPUB", b"dpub", b"3600001", body=b"x")
    await assert_fatal(producer, "E_INVALID DPUB timeout 3600001 out of range 0-3600000")
    await consumer.close()


async def test_mpub_and_its_errors(nsqd_factory: Callable[..., Service]) -> None:
    nsqd = nsqd_factory("--max-msg-size=100")
    consumer = await connect(nsqd)
    await consumer.subscribe("mpub", "c", rdy=10)
    producer = await connect(nsqd)
    producer.send(encode_mpub(b"mpub", [b"a", b"b", b"c"]))
    assert await producer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
    assert [m.body for m in await consumer.read_messages(3)] == [b"a", b"b", b"c"]
    producer.send(encode_mpub(b"mpub", [b"ok", b"x" * 101]))
    await assert_fatal(producer, "E_BAD_MESSAGE MPUB message too big 101 > 100")
    await consumer.expect_nothing(0.3)  # all or nothing
    producer = await connect(nsqd)
    producer.send(encode_mpub(b"bad!", [b"a"]))
    await assert_fatal(producer, 'E_BAD_TOPIC E_BAD_TOPIC MPUB topic name "bad!" is not valid')
    producer = await connect(nsqd)
    await producer.command(b"PUB", b"mpub", body=b"y" * 101)
    await assert_fatal(producer, "E_BAD_MESSAGE PUB message too big 101 > 100")
    await consumer.close()


async def test_publishing_is_allowed_in_any_state(nsqd: Service) -> None:
    client = await connect(nsqd)
    await client.subscribe("self", "c", rdy=1)
    await client.command(b"PUB", b"self", body=b"loop")
    frames = [await client.read_frame(), await client.read_frame()]
    assert Frame(FRAME_TYPE_RESPONSE, b"OK") in frames
    await client.close()


async def test_cls_stops_delivery(nsqd: Service) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("cls", "c", rdy=10)
    await consumer.command(b"CLS")
    assert await consumer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"CLOSE_WAIT")
    await consumer.command(b"RDY", b"5")  # ignored while closing
    await publish(nsqd, "cls", b"not for you")
    await consumer.expect_nothing(0.5)
    await consumer.close()


async def test_two_channels_each_get_every_message(nsqd: Service) -> None:
    first, second = await connect(nsqd), await connect(nsqd)
    await first.subscribe("fanout", "a", rdy=10)
    await second.subscribe("fanout", "b", rdy=10)
    await publish(nsqd, "fanout", b"1", b"2", b"3")
    for consumer in (first, second):
        assert sorted(m.body for m in await consumer.read_messages(3)) == [b"1", b"2", b"3"]
        await consumer.close()


async def test_consumers_of_one_channel_split_messages(nsqd: Service) -> None:
    consumers = [await connect(nsqd) for _ in range(2)]
    for consumer in consumers:
        await consumer.subscribe("split", "c", rdy=100)
    await publish(nsqd, "split", *[b"%d" % i for i in range(20)])
    received: list[list[bytes]] = [[], []]
    for index, consumer in enumerate(consumers):
        try:
            while True:
                received[index].append((await consumer.read_message(timeout=0.5)).body)
        except asyncio.TimeoutError:
            pass
    assert all(received) and sorted(received[0] + received[1], key=int) == [b"%d" % i for i in range(20)]
    for consumer in consumers:
        await consumer.close()


async def test_max_channel_consumers(nsqd_factory: Callable[..., Service]) -> None:
    nsqd = nsqd_factory("--max-channel-consumers=1")
    first = await connect(nsqd)
    await first.subscribe("limited", "c")
    second = await connect(nsqd)
    await second.command(b"SUB", b"limited", b"c")
    await assert_fatal(second, "E_SUB_FAILED SUB failed consumers for limited:c exceeds limit of 1")
    await first.close()


async def test_overflow_goes_to_disk_and_nothing_is_lost(nsqd_factory: Callable[..., Service]) -> None:
    nsqd = nsqd_factory("--mem-queue-size=3")
    producer = await connect(nsqd)
    producer.send(encode_mpub(b"full", [b"%d" % i for i in range(10)]))
    assert await producer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
    topic = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]
    assert (topic["depth"], topic["backend_depth"]) == (10, 7)
    consumer = await connect(nsqd)
    await consumer.subscribe("full", "c", rdy=100)
    assert sorted(int(m.body) for m in await consumer.read_messages(10)) == list(range(10))
    await consumer.expect_nothing(0.3)
    await consumer.close()
    await producer.close()


async def test_ephemeral_channel_and_topic_go_away_with_their_consumer(nsqd: Service) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("gone#ephemeral", "tail#ephemeral")
    durable = await connect(nsqd)
    await durable.subscribe("kept", "tail#ephemeral")
    topics = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"]
    assert [t["topic_name"] for t in topics] == ["gone#ephemeral", "kept"]
    await consumer.close()
    await durable.close()

    def only_kept_without_channels() -> bool:
        topics = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"]
        return [(t["topic_name"], t["channels"]) for t in topics] == [("kept", [])]

    await wait_for_async(only_kept_without_channels, 5, "the ephemeral topic and channel deleted")


async def test_deleting_a_channel_closes_its_consumers(nsqd: Service) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("del", "c")
    status, _, _ = nsqd.http("POST", "/channel/delete?topic=del&channel=c")
    assert status == 200
    assert await consumer.closed()


async def test_a_lost_connection_is_freed_at_once_not_by_the_collector(
        nsqd_factory: Callable[..., InProcessNSQD]) -> None:
    """nsqd runs full garbage collections rarely (its thresholds): a lost connection must leave no reference cycle
    behind, or every one would stay in memory until the next of them."""
    nsqd = nsqd_factory()
    consumer = await connect(nsqd)
    await consumer.subscribe("t", "c")
    connection = next(iter(nsqd.nsqd.connections))
    # followed by identity among the objects the collector tracks: compiled classes take no weak references
    items = (connection, connection.client, connection.session)
    assert all(gc.is_tracked(item) for item in items)
    watched = {(id(item), type(item)) for item in items}
    del items
    del connection
    gc.disable()
    # log records kept by the test's log capture would hold the client (their arguments) whatever nsqd does
    logging.disable(logging.INFO)
    try:
        await consumer.close()
        await wait_for_async(lambda: not any((id(item), type(item)) in watched for item in gc.get_objects()),
                             what="the lost connection freed without the garbage collector")
    finally:
        logging.disable(logging.NOTSET)
        gc.enable()


async def test_idle_consumer_gets_messages_promptly(nsqd: Service) -> None:
    consumer = await connect(nsqd)
    await consumer.subscribe("prompt", "c", rdy=100)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await publish(nsqd, "prompt", b"now")
    await consumer.read_message()
    assert loop.time() - started < 0.2  # well under the 250 ms output_buffer_timeout
    await consumer.close()


async def test_e2e_processing_latency_percentiles(nsqd_factory: Callable[..., Service]) -> None:
    nsqd = nsqd_factory("--e2e-processing-latency-percentile=0.99,0.5")
    consumer = await connect(nsqd)
    await consumer.subscribe("e2e", "c", rdy=10)
    await publish(nsqd, "e2e", b"1", b"2")
    for msg in await consumer.read_messages(2):
        await consumer.command(b"FIN", msg.id)
    await consumer.command(b"NOP")

    def latencies() -> list[dict[str, Any]]:
        topic = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]
        return [topic["e2e_processing_latency"], topic["channels"][0]["e2e_processing_latency"]]

    await wait_for_async(lambda: [latency["count"] for latency in latencies()] == [2, 2], what="both FINs counted")
    for latency in latencies():
        assert latency["count"] == 2
        assert [p["quantile"] for p in latency["percentiles"]] == [0.99, 0.5]
        assert all(0 < p["value"] < 5e9 for p in latency["percentiles"])
    await consumer.close()


async def test_a_producer_that_does_not_read_its_replies_is_throttled_not_dropped(
        nsqd_factory: Callable[..., Service]) -> None:
    nsqd = nsqd_factory("--mem-queue-size=100000")
    producer = await connect(nsqd)
    count = 50_000
    batch = b"".join(b"PUB flood\n\x00\x00\x00\x04%04d" % (i % 10000) for i in range(1000))

    async def flood() -> None:
        for _ in range(count // 1000):
            producer.send(batch)
            await producer.writer.drain()

    writer = asyncio.create_task(flood())
    await asyncio.sleep(1.0)  # nothing read meanwhile: nsqd must stop reading, not buffer replies forever
    oks = 0
    while oks < count:
        frame = await producer.read_frame(timeout=10)
        assert frame == Frame(FRAME_TYPE_RESPONSE, b"OK")
        oks += 1
    await writer
    topic = json.loads(nsqd.http("GET", "/stats?format=json&topic=flood")[2])["topics"][0]
    assert topic["message_count"] == count
    await producer.close()
