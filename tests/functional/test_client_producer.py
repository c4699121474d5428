"""The client library's Producer against a real nsqd."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from harness.processes import FAST_SCAN, NSQDProcess, start_lookupd, start_nsqd, wait_for
from harness.wire import WireClient
from nsqclient import NSQError, NSQProtocolError, Producer, TransportError
from nsqclient.protocol.frames import encode_command, encode_mpub


async def test_publish_multi_publish_and_deferred_publish(nsqd: NSQDProcess) -> None:
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("events", "c", rdy=10)
    async with Producer(nsqd.tcp_address_text, client_id="producer-1") as producer:
        await producer.publish("events", b"one")
        await producer.multi_publish("events", [b"two", b"three"])
        sent_at = time.monotonic()
        await producer.deferred_publish("events", b"later", delay=0.5)
        assert [m.body for m in await consumer.read_messages(3)] == [b"one", b"two", b"three"]
        assert (await consumer.read_message()).body == b"later" and time.monotonic() - sent_at >= 0.5
        stats = json.loads(nsqd.http("GET", "/stats?format=json")[2])
        assert stats["producers"][0]["client_id"] == "producer-1"
        assert stats["producers"][0]["user_agent"] == "nsqclient/1.3.0"
    await consumer.close()


async def test_pipelined_publishes_are_each_answered(nsqd: NSQDProcess) -> None:
    async with Producer(nsqd.tcp_address_text) as producer:
        await asyncio.gather(*(producer.publish("many", b"%d" % i) for i in range(1000)))
    topic = json.loads(nsqd.http("GET", "/stats?format=json&topic=many")[2])["topics"][0]
    assert topic["message_count"] == 1000


async def test_errors_carry_nsqs_code(nsqd: NSQDProcess) -> None:
    async with Producer(nsqd.tcp_address_text) as producer:
        with pytest.raises(NSQProtocolError) as raised:
            await producer.publish("empty", b"")  # nsqd refuses an empty body, and closes the connection
        assert raised.value.code == "E_BAD_MESSAGE"
        await producer.publish("good", b"reconnected after the fatal error")  # a new connection


async def nsqds_answer(nsqd: NSQDProcess, command: bytes) -> str:
    """What nsqd answers ``command`` with, sent on a connection of its own."""
    wire = await WireClient.connect(nsqd.tcp_address)
    wire.send(command)
    answer = (await wire.read_frame()).data.decode()
    await wire.close()
    return answer


async def test_a_topic_nsqd_would_refuse_is_refused_before_it_is_sent_with_nsqds_answer(nsqd: NSQDProcess) -> None:
    async with Producer(nsqd.tcp_address_text) as producer:
        for command, publish in ((encode_command(b"PUB", b"bad!", body=b"x"), producer.publish("bad!", b"x")),
                                 (encode_mpub(b"bad!", [b"x"]), producer.multi_publish("bad!", [b"x"])),
                                 (encode_command(b"DPUB", b"bad!", b"1000", body=b"x"),
                                  producer.deferred_publish("bad!", b"x", 1.0))):
            with pytest.raises(NSQProtocolError) as raised:
                await publish
            assert str(raised.value) == await nsqds_answer(nsqd, command)
            assert raised.value.code == "E_BAD_TOPIC"
        # a space or a newline would split the command: nsqd would read "a b" as topic "a", and the rest as more
        for name in ("a b", "x\nPUB y", "", "z" * 65):
            for publish in (producer.publish(name, b"x"), producer.multi_publish(name, [b"x"]),
                            producer.deferred_publish(name, b"x", 1.0)):
                with pytest.raises(NSQProtocolError, match="^E_BAD_TOPIC (E_BAD_TOPIC )?[DM]?PUB topic name"):
                    await publish
        async with producer.pipeline() as pipeline:
            await pipeline.publish("good", b"before")
            with pytest.raises(NSQProtocolError, match="^E_BAD_TOPIC PUB topic name"):
                await pipeline.publish("a b", b"x")
            await pipeline.publish("good", b"after")  # the pipeline goes on
        await producer.publish("good", b"x")
    stats = json.loads(nsqd.http("GET", "/stats?format=json")[2])
    # none of the others reached nsqd
    assert [(topic["topic_name"], topic["message_count"]) for topic in stats["topics"]] == [("good", 3)]


async def test_it_reconnects_after_nsqd_restarts(tmp_path: Path) -> None:
    first = start_nsqd(*FAST_SCAN, data_path=tmp_path)
    port = first.tcp_port
    producer = Producer(f"127.0.0.1:{port}")
    try:
        await producer.publish("t", b"before")
        first.stop()
        with pytest.raises(TransportError):  # the lost connection, or the new one refused
            await producer.publish("t", b"while down")
        second = start_nsqd(*FAST_SCAN, f"--tcp-address=127.0.0.1:{port}", data_path=tmp_path)
        try:
            await producer.publish("t", b"after")
            assert json.loads(second.http("GET", "/stats?format=json")[2])["topics"][0]["depth"] == 2
        finally:
            await producer.close()
            second.stop()
    finally:
        first.stop()


async def test_heartbeats_are_answered(nsqd: NSQDProcess) -> None:
    async with Producer(nsqd.tcp_address_text, heartbeat_interval=1000) as producer:
        await asyncio.sleep(3.2)  # nsqd would drop a client silent for two intervals
        await producer.publish("t", b"still connected")
        assert json.loads(nsqd.http("GET", "/stats?format=json")[2])["producers"][0]["pub_counts"] == [
            {"topic": "t", "count": 1}]


async def test_it_finds_an_nsqd_through_lookupd(tmp_path: Path) -> None:
    lookupd = start_lookupd()
    nsqd = start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", "--broadcast-address=127.0.0.1",
                      data_path=tmp_path)
    try:
        wait_for(lambda: json.loads(lookupd.http("GET", "/nodes")[2])["producers"], what="nsqd identified")
        async with Producer(lookupd_http_addresses=[f"127.0.0.1:{lookupd.http_port}"]) as producer:
            await producer.publish("found", b"via lookupd")
            assert producer.address == f"127.0.0.1:{nsqd.tcp_port}"
        topic = json.loads(nsqd.http("GET", "/stats?format=json&topic=found")[2])["topics"][0]
        assert topic["message_count"] == 1
    finally:
        nsqd.stop()
        lookupd.stop()


async def test_no_nsqd_known_to_lookupd_is_an_error() -> None:
    lookupd = start_lookupd()
    try:
        producer = Producer(lookupd_http_addresses=[f"127.0.0.1:{lookupd.http_port}"])
        with pytest.raises(NSQError, match="no nsqd reachable"):
            await producer.publish("t", b"x")
    finally:
        lookupd.stop()
