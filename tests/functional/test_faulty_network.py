"""Publishing through a faulty network (``tests.fault_proxy``): delays, bytes lost, a connection gone half-open or
cut on one side."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from shared.client import CommandTimeout, Producer, TransportError
from tests.fault_proxy import FaultProxy
from tests.processes import NSQDProcess


@asynccontextmanager
async def echo_server() -> AsyncIterator[tuple[str, int]]:
    """Sends back what it reads; closes once the client has said all it will."""
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()
        await server.wait_closed()


async def test_without_faults_the_proxy_forwards_every_byte_and_the_end_of_stream() -> None:
    rng = random.Random(5)
    sent = rng.randbytes(3_000_000)
    async with echo_server() as upstream, FaultProxy(upstream) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        position = 0
        while position < len(sent):  # writes of every size, up to several chunks
            size = rng.choice([1, 7, 1000, 65536, 300_000])
            writer.write(sent[position:position + size])
            position += size
        writer.write_eof()  # passed on to the echo server, which then closes: that comes back as the end
        received = await asyncio.wait_for(reader.read(), 20)
        writer.close()
    assert received == sent
    assert proxy.counts.damaged == 0


async def test_a_stall_forwards_nothing_until_resumed_and_a_cut_closes_one_side() -> None:
    async with echo_server() as upstream, FaultProxy(upstream) as proxy:
        reader, writer = await asyncio.open_connection(*proxy.address)
        proxy.stall()
        writer.write(b"held")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(4), 0.3)
        proxy.resume()
        assert await asyncio.wait_for(reader.readexactly(4), 5) == b"held"

        proxy.cut("server")  # the echo server sees its connection closed; the client sees nothing
        writer.write(b"unheard")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.read(1), 0.3)
        writer.close()

        reader, writer = await asyncio.open_connection(*proxy.address)
        writer.write(b"x")
        assert await asyncio.wait_for(reader.readexactly(1), 5) == b"x"
        proxy.cut("client")
        assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()


async def test_a_publish_on_a_half_open_connection_times_out_and_the_next_one_reconnects(
        nsqd: NSQDProcess) -> None:
    async with FaultProxy(nsqd.tcp_address) as proxy, Producer(proxy.address_text, command_timeout=0.5) as producer:
        await producer.publish("t", b"before")
        proxy.stall()
        async with asyncio.timeout(5):
            with pytest.raises(CommandTimeout, match="no answer within 0.5 s"):
                await producer.publish("t", b"unanswered")
        proxy.resume()
        await producer.publish("t", b"after")


async def test_closing_after_a_timeout_is_not_held_up_by_what_a_silent_nsqd_did_not_read(
        nsqd: NSQDProcess) -> None:
    """Megabytes of publishes wait in the socket when the connection goes silent: the timeout fails them all at
    once, and closing the producer does not wait for them to be written."""
    async with FaultProxy(nsqd.tcp_address) as proxy:
        producer = Producer(proxy.address_text, command_timeout=0.5)
        try:
            await producer.publish("t", b"before")
            proxy.stall()
            outcomes = await asyncio.wait_for(asyncio.gather(
                *(producer.publish("t", b"x" * 900_000) for _ in range(20)), return_exceptions=True), 5)
            assert all(isinstance(outcome, TransportError) for outcome in outcomes), outcomes
            assert sum(isinstance(outcome, CommandTimeout) for outcome in outcomes) >= 1
        finally:
            await asyncio.wait_for(producer.close(), 5)
