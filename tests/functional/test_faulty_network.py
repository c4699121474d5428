"""Publishing through a faulty network (``harness.fault_proxy``): delays, bytes lost, a connection gone half-open or
cut on one side. What a producer got OK for is in nsqd; every other publish raised an error of the client library's
within its timeouts, never hung; nsqd closes only the damaged connections. The scenario itself is
``harness.faulty_network`` (``bench.faulty_network`` runs it longer)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import nsq  # type: ignore[import-untyped]  # pynsq 0.9.1: no stubs or py.typed
import pytest

from harness import faulty_network
from harness.fault_proxy import FaultProxy, Faults
from harness.processes import NSQDProcess
from harness.pynsq import PynsqLoop
from nsqclient import CommandTimeout, Producer, TransportError


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


async def test_publishing_through_faults_loses_nothing_acknowledged(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(*faulty_network.NSQD_FLAGS)
    figures = await faulty_network.run(nsqd, rounds=1, phase_seconds=2.0, pause=0.002)
    print("\n".join(figures.lines()))
    assert figures.hangs == 0 and figures.lost == 0 and figures.unrecovered == 0
    assert figures.unknown == 0 and figures.stray_topics == [] and figures.duplicated == 0
    assert figures.acknowledged > 1000 and figures.control_acknowledged > 100
    # the faults no publisher gets through without an error: lost bytes are noticed one way or another, silence
    # by the command's timeout
    assert "drop" in {kind.split(": ")[0] for kind in figures.errors}
    assert "half-open: CommandTimeout" in figures.errors and "cut server: CommandTimeout" in figures.errors
    assert nsqd.process.poll() is None
    logged = "\n".join(nsqd.log_lines)
    assert "Traceback" not in logged and "failed to process" not in logged
    for kind in figures.errors:  # nsqd logged the errors it answered corrupted streams with
        if "NSQProtocolError" in kind:
            assert kind.rsplit(" ", 1)[-1] in logged


async def test_pynsq_through_delays_and_connections_cut_under_it(nsqd: NSQDProcess) -> None:
    """pynsq 0.9.1's Writer has no read timeout: behind a half-open connection or lost bytes its publish waits for
    ever (the harness gives up after 5 s), so it meets only the faults it can notice: delays, and its connection
    closed under it. What it got OK for is in nsqd; every other publish was answered with an ``nsq.Error``."""
    nsqd.http("POST", "/channel/create?topic=py&channel=c")
    pynsq = PynsqLoop()
    pynsq.start()
    acknowledged, failed = [], []
    try:
        async with FaultProxy(nsqd.tcp_address) as proxy:
            writer = await asyncio.to_thread(pynsq.writer, proxy.address, reconnect_interval=0.2)
            proxy.to_server = proxy.to_client = Faults(delay=0.01)
            for number in range(120):
                if number % 30 == 15:
                    proxy.cut("client")
                bodies = [b"py%d-%d" % (number, n) for n in range(1 + number % 3)]
                if len(bodies) == 1:
                    answer = await asyncio.to_thread(writer.pub, "py", bodies[0])
                else:
                    answer = await asyncio.to_thread(writer.mpub, "py", bodies)
                if answer == b"OK":
                    acknowledged += bodies
                else:
                    assert isinstance(answer, nsq.Error), answer
                    failed += bodies
                    await asyncio.sleep(0.3)  # it reconnects after its reconnect_interval
    finally:
        pynsq.take_problems()  # the connections it lost, as it logs them
        pynsq.stop()
    received = await faulty_network.drain(nsqd.tcp_address, "py", "c", quiet=1.0)
    print(f"pynsq: {len(acknowledged)} messages acknowledged, {len(failed)} failed, "
          f"{len(set(failed) & set(received))} of those in nsqd")
    assert set(acknowledged) <= set(received) and len(received) == len(set(received))
    assert failed and len(acknowledged) > 100
