"""Odd, hostile and slow peers: oversized numbers, deep JSON, clients that stop reading, chatty logs."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable

import pytest

from harness.processes import NSQDProcess, start_nsqd, wait_for, wait_for_async
from harness.wire import WireClient
from nsqclient.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_RESPONSE,
    MAGIC_V2,
    Frame,
    encode_command,
    encode_mpub,
)
from services.nsqd import identify
from services.nsqd.__main__ import main as nsqd_main
from services.nsqd.nsqd import NSQD
from services.nsqd.options import Options
from shared.protocol.commands import FIN_RUN, CommandParser


async def _frames_until_closed(client: WireClient) -> list[Frame]:
    frames: list[Frame] = []
    try:
        while True:
            frames.append(await client.read_frame(timeout=5))
    except ConnectionError:
        return frames
    finally:
        await client.close()


async def test_oversized_number_is_an_error_frame_not_a_dropped_connection(nsqd: NSQDProcess) -> None:
    client = await WireClient.connect(nsqd.tcp_address)
    # more digits than a uint64 holds: E_INVALID, after the PUB's OK
    client.send(encode_command(b"PUB", b"t", body=b"hello") + b"DPUB t " + b"1" * 5000 + b"\n\0\0\0\1x")
    frames = await _frames_until_closed(client)
    assert frames[:1] == [Frame(FRAME_TYPE_RESPONSE, b"OK")], frames  # the message *was* published
    assert len(frames) == 2 and frames[1].frame_type == FRAME_TYPE_ERROR
    assert frames[1].data.startswith(b"E_INVALID DPUB could not parse timeout 1111")


async def test_deeply_nested_identify_is_e_bad_body(nsqd: NSQDProcess) -> None:
    client = await WireClient.connect(nsqd.tcp_address)
    client.send(encode_command(b"IDENTIFY", body=b"[" * 100_000))
    frames = await _frames_until_closed(client)
    assert frames == [Frame(FRAME_TYPE_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body")]


def test_client_closed_by_read_deadline_leaves_its_channel(nsqd: NSQDProcess) -> None:
    body = b"x" * 400_000
    for _ in range(100):  # far more than the socket buffers hold, so the transport's own buffer stays full
        assert nsqd.http("POST", "/pub?topic=t", body)[0] == 200
    consumer = socket.socket()
    consumer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    consumer.connect(nsqd.tcp_address)
    try:
        identify = json.dumps({"heartbeat_interval": 1000, "msg_timeout": 1000}).encode()
        consumer.sendall(MAGIC_V2 + encode_command(b"IDENTIFY", body=identify) + b"SUB t c\nRDY 100\n")
        wait_for(lambda: nsqd.channel_stats("t", "c").get("client_count") == 1, what="the consumer subscribed")
        # the read deadline (2 heartbeats of 1 s) closes it, though its socket never drains
        wait_for(lambda: nsqd.channel_stats("t", "c").get("client_count") == 0, timeout=10,
                 what="the consumer gone from its channel")
    finally:
        consumer.close()


def test_fin_run_with_an_odd_line_parses_in_linear_time() -> None:
    good = b"".join(b"FIN %016x\n" % i for i in range(10_000))
    odd = b"FIN 0123456\r89abcdef\n"  # a 16-byte ID with a \r inside: NSQ answers E_FIN_FAILED, not fatal
    parser = CommandParser(1 << 20, 5 << 20)
    started = time.perf_counter()
    commands = parser.feed(good + odd)  # 210 KB: less than one 256 KiB socket read
    elapsed = time.perf_counter() - started
    assert [(c.name, len(c.args)) for c in commands] == [(FIN_RUN, 10_000), (b"FIN", 1)]
    assert elapsed < 0.5, f"{elapsed:.2f}s"


async def test_repeated_identify_with_zero_keeps_msg_timeout(nsqd: NSQDProcess) -> None:
    client = await WireClient.connect(nsqd.tcp_address)
    try:
        await client.identify(msg_timeout=5000)
        reply = json.loads((await client.identify(feature_negotiation=True)).data)
        assert reply["msg_timeout"] == 5000
    finally:
        await client.close()


def test_nsqd_started_by_the_harness_survives_a_chatty_log() -> None:
    nsqd = start_nsqd()
    try:
        for _ in range(1500):  # two INFO lines per connection
            with socket.create_connection(nsqd.tcp_address, timeout=2) as connection:
                connection.sendall(MAGIC_V2)
        assert nsqd.http("GET", "/ping")[0] == 200
    finally:
        nsqd.stop(timeout=2)


async def test_publish_to_ready_consumers_is_not_refused_as_queue_full(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory("--mem-queue-size=2")
    consumer = await WireClient.connect(nsqd.tcp_address)
    producer = await WireClient.connect(nsqd.tcp_address)
    try:
        await consumer.subscribe("t", "c", rdy=100)
        await consumer.command(b"NOP")  # RDY is processed before the MPUB arrives on the other connection
        await wait_for_async(lambda: [c["ready_count"] for c in nsqd.channel_stats("t", "c")["clients"]] == [100],
                             what="the RDY in effect")
        producer.send(encode_mpub(b"t", [b"%d" % i for i in range(5)]))
        assert await producer.read_frame() == Frame(FRAME_TYPE_RESPONSE, b"OK")
        assert len(await consumer.read_messages(5)) == 5
    finally:
        await consumer.close()
        await producer.close()


async def test_failed_start_leaves_no_listener() -> None:
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    nsqd = NSQD(Options(tcp_address="127.0.0.1:0", http_address="127.0.0.1:%d" % busy.getsockname()[1]))
    try:
        with pytest.raises(OSError):
            await nsqd.start()
        with pytest.raises(OSError):
            _, writer = await asyncio.open_connection(*nsqd.tcp_address)
            writer.close()
            await writer.wait_closed()
    finally:
        busy.close()
        await nsqd.stop()


def test_flag_value_h_is_not_a_help_request(capsys: pytest.CaptureFixture[str]) -> None:
    nsqd_main(["--log-prefix", "h", "--version"])
    assert capsys.readouterr().out.startswith("nsqd v")


def test_slow_reader_that_fins_at_once_sees_no_timeouts(nsqd: NSQDProcess) -> None:
    count, body = 150, b"x" * 100_000  # a 15 MB window, read at 2 MB/s: 7.5 s, with a 5 s msg_timeout
    for _ in range(count):
        assert nsqd.http("POST", "/pub?topic=t", body)[0] == 200
    consumer = socket.create_connection(nsqd.tcp_address)
    try:
        identify = json.dumps({"msg_timeout": 5000}).encode()
        consumer.sendall(MAGIC_V2 + encode_command(b"IDENTIFY", body=identify) + b"SUB t c\nRDY %d\n" % count)
        buffer, received, read, started = b"", 0, 0, time.monotonic()
        while received < count and time.monotonic() - started < 30:
            if read > (time.monotonic() - started) * 2_000_000:
                time.sleep(0.005)
                continue
            data = consumer.recv(16384)
            read += len(data)
            buffer += data
            while len(buffer) >= 8 and len(buffer) >= 4 + int.from_bytes(buffer[:4], "big"):
                size, frame_type = int.from_bytes(buffer[:4], "big"), int.from_bytes(buffer[4:8], "big")
                frame, buffer = buffer[8:4 + size], buffer[4 + size:]
                if frame_type == 2:
                    received += 1
                    consumer.sendall(b"FIN " + frame[10:26] + b"\n")
        channel = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"][0]["channels"][0]
        assert channel["timeout_count"] == 0, channel
    finally:
        consumer.close()


def test_identify_with_invalid_utf8_is_accepted() -> None:
    identity = identify.negotiate(b'{"hostname": "caf\xe9"}', Options())
    assert identity.hostname == "caf\ufffd"
