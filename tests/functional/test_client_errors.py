"""What the client library raises when the network fails it: its own errors (``nsqclient.errors``), with the
socket's error as the cause, never OSError or TimeoutError. The peers here are small servers that misbehave on
purpose: nsqd does not drop connections mid-answer."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from harness.processes import free_port, start_nsqd, wait_for_async
from nsqclient import CommandTimeout, ConnectError, ConnectionClosed, Consumer, NSQError, Producer, TransportError
from nsqclient.protocol.compression import DeflateCodec
from nsqclient.protocol.frames import FRAME_TYPE_RESPONSE, MAGIC_V2, encode_frame

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
IDENTIFIED = encode_frame(FRAME_TYPE_RESPONSE, json.dumps({"max_rdy_count": 2500}).encode())


@asynccontextmanager
async def peer(handle: Handler) -> AsyncIterator[str]:
    """A server running ``handle`` for every connection; its address."""
    connections: list[asyncio.StreamWriter] = []

    async def run(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        try:
            await handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away first
        finally:
            writer.close()

    server = await asyncio.start_server(run, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for writer in connections:
            writer.close()
        await server.wait_closed()


async def identify(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads the magic and IDENTIFY and answers it as nsqd does."""
    assert await reader.readexactly(4) == MAGIC_V2
    await reader.readline()
    await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
    writer.write(IDENTIFIED)


async def test_a_port_nothing_listens_on_is_a_connect_error() -> None:
    with pytest.raises(ConnectError) as raised:
        await Producer(f"127.0.0.1:{free_port()}").publish("t", b"x")
    assert isinstance(raised.value.__cause__, ConnectionRefusedError)


async def test_a_peer_that_closes_before_answering_identify() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)

    async with peer(handle) as address:
        with pytest.raises(ConnectError, match="identifying") as raised:
            await Producer(address).publish("t", b"x")
    assert isinstance(raised.value.__cause__, ConnectionClosed)


async def test_a_peer_that_never_answers_identify_times_out() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # until the client gives up

    async with peer(handle) as address:
        with pytest.raises(ConnectError, match=r"identifying: no answer within 0.3 s") as raised:
            await Producer(address, connect_timeout=0.3).publish("t", b"x")
    assert isinstance(raised.value.__cause__, TimeoutError)


async def test_an_identify_answer_that_is_not_json() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        writer.write(encode_frame(FRAME_TYPE_RESPONSE, b"{not json"))
        await reader.read()

    async with peer(handle) as address:
        with pytest.raises(ConnectError) as raised:
            await Producer(address).publish("t", b"x")
    assert isinstance(raised.value.__cause__, ValueError)


async def test_a_connection_dropped_in_the_middle_of_an_answer() -> None:
    """The PUB's OK is cut after its first bytes: the publish fails with ConnectionClosed (it may or may not have
    been taken), and the next publish opens a new connection."""
    answers = [encode_frame(FRAME_TYPE_RESPONSE, b"OK")[:5], encode_frame(FRAME_TYPE_RESPONSE, b"OK")]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await identify(reader, writer)
        await reader.readline()
        await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
        writer.write(answers.pop(0))
        await writer.drain()
        if answers:  # the first connection ends here, mid-frame
            return
        await reader.read()

    async with peer(handle) as address:
        async with Producer(address) as producer:
            with pytest.raises(ConnectionClosed):
                await producer.publish("t", b"lost answer")
            await producer.publish("t", b"answered")


async def test_an_unreadable_stream_ends_the_connection_with_connection_closed() -> None:
    """Deflate is agreed on, then the peer sends what does not inflate."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)
        await reader.readline()
        await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
        writer.write(encode_frame(FRAME_TYPE_RESPONSE, json.dumps({"deflate": True, "deflate_level": 6}).encode()))
        writer.write(DeflateCodec(6).compress(encode_frame(FRAME_TYPE_RESPONSE, b"OK")))
        await reader.read(1)  # the PUB
        writer.write(b"\xff" * 64)
        await reader.read()

    async with peer(handle) as address:
        async with Producer(address, deflate=True) as producer:
            with pytest.raises(ConnectionClosed, match="cannot be read: deflate"):
                await producer.publish("t", b"x")


@pytest.mark.parametrize("answer", [
    # a heartbeat that lost bytes on the way, run into the OK after it: a response, but not one a publish can get
    encode_frame(FRAME_TYPE_RESPONSE, b"_hea" + encode_frame(FRAME_TYPE_RESPONSE, b"OK")[:7]),
    encode_frame(7, b"OK"),  # no such frame type
])
async def test_an_answer_no_publish_can_get_ends_the_connection(answer: bytes) -> None:
    """A publish is answered OK or with an error frame: anything else is a stream that cannot be read, not a
    success, and what comes after it on that connection answers nothing."""
    answers = [answer + encode_frame(FRAME_TYPE_RESPONSE, b"OK"), encode_frame(FRAME_TYPE_RESPONSE, b"OK")]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await identify(reader, writer)
        await reader.readline()
        await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
        writer.write(answers.pop(0))
        await reader.read()

    async with peer(handle) as address:
        async with Producer(address) as producer:
            with pytest.raises(ConnectionClosed, match="cannot be read"):
                await producer.publish("t", b"garbled answer")
            await producer.publish("t", b"answered")  # on a new connection


async def test_a_publish_never_answered_times_out_even_behind_one_with_a_longer_timeout() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await identify(reader, writer)
        await reader.read()  # and never answers

    async with peer(handle) as address:
        async with Producer(address, command_timeout=0.3) as producer:
            pipeline = producer.pipeline(timeout=30)
            await pipeline.publish("t", b"patient")
            started = time.monotonic()
            with pytest.raises(CommandTimeout, match="no answer within 0.3 s"):
                await producer.publish("t", b"impatient")
            assert time.monotonic() - started < 5
            with pytest.raises(ConnectionClosed, match="no answer within 0.3 s"):  # the connection ended with it
                await pipeline.flush()
            pipeline.abandon()


async def test_every_failure_is_an_nsq_error() -> None:
    """What callers catch: one family, whatever failed."""
    assert issubclass(TransportError, NSQError)
    for error in (ConnectError, ConnectionClosed):
        assert issubclass(error, TransportError) and not issubclass(error, OSError)


async def test_a_consumer_logs_connect_errors_and_tries_again(caplog: pytest.LogCaptureFixture) -> None:
    attempts = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal attempts
        attempts += 1
        await reader.readexactly(4)  # then closes before IDENTIFY's answer

    async def ignore(_: object) -> None:
        pass

    caplog.set_level(logging.ERROR, "nsq.client")
    async with peer(handle) as address:
        consumer = Consumer("t", "c", ignore, nsqd_tcp_addresses=[address])
        await consumer.start()
        try:
            for _ in range(100):
                if attempts >= 2:
                    break
                await asyncio.sleep(0.05)
        finally:
            await consumer.stop()
    assert attempts >= 2
    assert f"nsqd {address}: identifying: connection closed" in caplog.text
    assert consumer.unreachable == {address: "identifying: connection closed by nsqd"}


async def test_a_consumer_says_what_it_cannot_reach_until_it_answers(tmp_path: Path) -> None:
    async def ignore(_: object) -> None:
        pass

    port = free_port()
    nsqd, lookupd = f"127.0.0.1:{port}", f"127.0.0.1:{free_port()}"
    consumer = Consumer("t", "c", ignore, nsqd_tcp_addresses=[nsqd], lookupd_http_addresses=[lookupd])
    await consumer.start()
    try:
        await wait_for_async(lambda: len(consumer.unreachable) == 2 or None, 5, "both attempts failed")
        assert consumer.unreachable[lookupd] == "lookupd did not answer"
        assert "Connect call failed" in consumer.unreachable[nsqd]
        started = start_nsqd(f"--tcp-address={nsqd}", data_path=tmp_path)
        try:
            await wait_for_async(lambda: consumer.connections or None, 10, "the consumer connected")
            assert consumer.unreachable.keys() == {lookupd}
        finally:
            started.stop()
    finally:
        await consumer.stop()
