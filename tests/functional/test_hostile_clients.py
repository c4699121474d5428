"""Hostile clients against a real nsqd process: absurd sizes, half-sent commands, trickling, crowds of idle
connections and consumers that never read. After each, nsqd must still serve a well-behaved client promptly,
and its memory (VmRSS from /proc) must not follow what the hostile clients send.

Neighbouring cases are not repeated here: a number too long for a uint64, deeply nested JSON and a slow reader
closed by its read deadline (test_hardening.py); sizes just over the limits and a producer that does not read
its replies (test_protocol_v2.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import socket
import struct
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from harness.processes import NSQDProcess, wait_for, wait_for_async
from harness.wire import WireClient
from nsqclient.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_RESPONSE,
    MAGIC_V2,
    Frame,
    encode_command,
    encode_mpub,
)

OK = Frame(FRAME_TYPE_RESPONSE, b"OK")
MIB = 1 << 20


def size(n: int) -> bytes:
    return struct.pack(">I", n % 2**32)


def rss_mib(nsqd: NSQDProcess) -> float:
    """nsqd's resident memory, with its workers' (``--workers``)."""
    return sum(_rss_mib(pid) for pid in nsqd.pids())


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_fds(nsqd: NSQDProcess) -> int:
    """nsqd's open files, with its workers'."""
    return sum(len(os.listdir(f"/proc/{pid}/fd")) for pid in nsqd.pids())


def wait_for_fds(nsqd: NSQDProcess, accept: Callable[[int], bool], what: str) -> None:
    """Until ``accept`` takes the count of nsqd's open files."""
    wait_for(lambda: accept(open_fds(nsqd)), 10, lambda: f"{what} (nsqd has {open_fds(nsqd)} files open)")


def settled_fds(nsqd: NSQDProcess) -> int:
    """nsqd's open files once those of connections closed a moment ago are let go (unchanged for 0.3 s)."""
    counts: list[int] = []

    def unchanged() -> int | None:
        counts.append(open_fds(nsqd))
        return counts[-1] if len(counts) > 1 and counts[-1] == counts[-2] else None

    return wait_for(unchanged, 5, lambda: f"nsqd's open files settled, counted {counts}", interval=0.3)


def stats(nsqd: NSQDProcess) -> dict[str, object]:
    status, _, body = nsqd.http("GET", "/stats?format=json")
    assert status == 200
    document: dict[str, object] = json.loads(body)
    return document


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def round_trips(nsqd: NSQDProcess, topic: str, count: int = 50,
                      interval: float = 0) -> tuple[list[float], list[float]]:
    """A well-behaved producer and consumer: for each message, seconds from PUB to OK and from PUB to delivery;
    ``interval`` seconds apart."""
    consumer = await WireClient.connect(nsqd.tcp_address)
    producer = await WireClient.connect(nsqd.tcp_address)
    acks, deliveries = [], []
    try:
        await consumer.subscribe(topic, "c", rdy=10)
        await consumer.command(b"NOP")
        for i in range(count):
            started = time.perf_counter()
            await producer.command(b"PUB", topic.encode(), body=b"%d" % i)
            assert await producer.read_frame() == OK
            acks.append(time.perf_counter() - started)
            message = await consumer.read_message()
            deliveries.append(time.perf_counter() - started)
            assert message.body == b"%d" % i
            await consumer.command(b"FIN", message.id)
            await asyncio.sleep(interval)
    finally:
        await producer.close()
        await consumer.close()
    return acks, deliveries


def assert_prompt(label: str, acks: list[float], deliveries: list[float]) -> None:
    # generous: a loaded 2-CPU test machine; what matters is no second-long stall behind the hostile clients
    print(f"{label}: PUB->OK p50 {percentile(acks, 0.5) * 1000:.1f} ms, max {max(acks) * 1000:.1f} ms; "
          f"PUB->delivery p50 {percentile(deliveries, 0.5) * 1000:.1f} ms, max {max(deliveries) * 1000:.1f} ms")
    assert percentile(deliveries, 0.5) < 0.05 and max(deliveries) < 0.5, (label, deliveries)


def assert_no_internal_error(nsqd: NSQDProcess) -> None:
    assert not [line for line in nsqd.log_lines if "Traceback" in line or "failed to process" in line]


async def frames_until_closed(reader: asyncio.StreamReader, timeout: float = 5) -> list[Frame]:
    data = b""
    while chunk := await asyncio.wait_for(reader.read(65536), timeout):
        data += chunk
    frames = []
    while len(data) >= 8:
        length, frame_type = struct.unpack(">ii", data[:8])
        frames.append(Frame(frame_type, data[8:4 + length]))
        data = data[4 + length:]
    return frames


async def read_one_frame(reader: asyncio.StreamReader) -> Frame:
    length, frame_type = struct.unpack(">ii", await asyncio.wait_for(reader.readexactly(8), 5))
    return Frame(frame_type, await reader.readexactly(length - 4))


def published_to(nsqd: NSQDProcess, topic: str) -> int:
    for t in stats(nsqd)["topics"]:  # type: ignore[attr-defined]
        if t["topic_name"] == topic:
            return int(t["message_count"])
    return 0


# -- sizes no body could have ---------------------------------------------------------------------------------

OVERSIZED = [
    # 4 GiB - 1 does not fit NSQ's int32: it reads as -1
    (b"PUB t\n" + size(2**32 - 1), "E_BAD_MESSAGE PUB invalid message body size -1"),
    (b"PUB t\n" + size(2**31 - 1), "E_BAD_MESSAGE PUB message too big 2147483647 > 1048576"),
    (b"DPUB t 0\n" + size(2**31), "E_BAD_MESSAGE DPUB invalid message body size -2147483648"),
    (b"IDENTIFY\n" + size(2**31 - 1), "E_BAD_BODY IDENTIFY body too big 2147483647 > 5242880"),
    (b"MPUB t\n" + size(2**32 - 1), "E_BAD_BODY MPUB invalid body size -1"),
    (b"MPUB t\n" + size(2**31 - 1), "E_BAD_BODY MPUB body too big 2147483647 > 5242880"),
    # a body size within bounds, then a count no body of that size could hold
    (b"MPUB t\n" + size(100) + size(2**31 - 1), "E_BAD_BODY MPUB invalid message count 2147483647"),
    (b"MPUB t\n" + size(100) + size(1048576), "E_BAD_BODY MPUB invalid message count 1048576"),
    (b"MPUB t\n" + size(100) + size(2) + size(2**32 - 16), "E_BAD_MESSAGE MPUB invalid message(0) body size -16"),
    (b"MPUB t\n" + size(100) + size(2) + size(1) + b"a" + size(2**31 - 1),
     "E_BAD_MESSAGE MPUB message too big 2147483647 > 1048576"),
]


async def test_oversized_size_prefixes_are_answered_at_once_then_closed(nsqd: NSQDProcess) -> None:
    for prefix, expected in OVERSIZED:
        reader, writer = await asyncio.open_connection(*nsqd.tcp_address)
        # nothing follows the size: the error must not wait for a body that will never come
        writer.write(MAGIC_V2 + prefix)
        frames = await frames_until_closed(reader)
        writer.close()
        assert frames == [Frame(FRAME_TYPE_ERROR, expected.encode())], prefix
    assert all(t["message_count"] == 0 for t in stats(nsqd)["topics"])  # type: ignore[attr-defined]
    assert_prompt("after oversized sizes", *await round_trips(nsqd, "normal"))
    assert_no_internal_error(nsqd)


# -- commands cut short ---------------------------------------------------------------------------------------

TRUNCATED = [
    b" ",  # half the magic
    b"  V2PUB trunc",
    b"  V2PUB trunc\n\x00\x00",
    b"  V2PUB trunc\n" + size(100) + b"x" * 50,
    b"  V2DPUB trunc 10\n" + size(100) + b"x" * 99,
    b"  V2MPUB trunc\n" + size(100) + size(3) + size(5) + b"hello" + size(5) + b"wor",
    b"  V2IDENTIFY\n" + size(20) + b'{"client_id"',
    b"  V2SUB trunc c",
]


async def test_truncated_commands_then_close_have_no_effect(nsqd: NSQDProcess) -> None:
    idle_fds = settled_fds(nsqd)
    for abort in (False, True):
        for data in TRUNCATED:
            connection = socket.create_connection(nsqd.tcp_address)
            if abort:  # a reset instead of a FIN
                connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            connection.sendall(data)
            connection.close()
    wait_for_fds(nsqd, lambda count: count <= idle_fds, f"every connection released, {idle_fds} files open")
    # what came whole before the cut counts: one PUB, then half of another
    with socket.create_connection(nsqd.tcp_address) as connection:
        connection.sendall(MAGIC_V2 + encode_command(b"PUB", b"trunc", body=b"x") + b"PUB trunc\n" + size(1))
        assert connection.recv(10) == struct.pack(">ii", 6, FRAME_TYPE_RESPONSE) + b"OK"
    # a consumer holding a message sends half a FIN and goes: the message times out and is delivered again
    consumer = await WireClient.connect(nsqd.tcp_address)
    await consumer.subscribe("redeliver", "c", rdy=1, msg_timeout=1000)
    await consumer.command(b"NOP")
    await wait_for_async(lambda: [c["ready_count"] for c in nsqd.channel_stats("redeliver", "c")["clients"]] == [1],
                         what="the RDY in effect")
    assert nsqd.http("POST", "/pub?topic=redeliver", b"m")[0] == 200
    first = await consumer.read_message()
    consumer.send(b"FIN " + first.id[:7])
    await consumer.close()
    second = await WireClient.connect(nsqd.tcp_address)
    await second.subscribe("redeliver", "c", rdy=1)
    again = await second.read_message(timeout=10)
    assert (again.id, again.attempts) == (first.id, 2)
    await second.close()
    assert published_to(nsqd, "trunc") == 1
    assert_prompt("after truncated commands", *await round_trips(nsqd, "normal"))
    assert_no_internal_error(nsqd)


# -- slowloris ------------------------------------------------------------------------------------------------

async def test_clients_trickling_commands_do_not_slow_others_down(nsqd: NSQDProcess) -> None:
    command = encode_command(b"PUB", b"trickle", body=b"slow but valid")  # with the magic, 3.2 s at 1 byte/100 ms

    async def trickle() -> Frame:
        reader, writer = await asyncio.open_connection(*nsqd.tcp_address)
        try:
            for byte in MAGIC_V2 + command:
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(0.1)
            return await read_one_frame(reader)
        finally:
            writer.close()

    tricklers = [asyncio.create_task(trickle()) for _ in range(50)]
    try:
        await asyncio.sleep(0.5)  # all of them are mid-command
        acks, deliveries = await round_trips(nsqd, "normal", 100, interval=0.02)  # about 2 s
        assert not any(task.done() for task in tricklers)  # the measurement overlapped the trickling
        assert_prompt("with 50 tricklers", acks, deliveries)
        assert await asyncio.gather(*tricklers) == [OK] * 50  # slow is not wrong: every trickled PUB is accepted
    finally:
        for task in tricklers:
            task.cancel()
        await asyncio.gather(*tricklers, return_exceptions=True)
    assert published_to(nsqd, "trickle") == 50
    assert_no_internal_error(nsqd)


# -- a crowd of idle connections ------------------------------------------------------------------------------

@contextmanager
def open_files_limit(needed: int) -> Iterator[None]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= needed:
        yield
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        pytest.skip(f"needs {needed} open files, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_thousand_idle_connections(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    count = 1000
    with open_files_limit(2 * count + 256):
        nsqd = nsqd_factory()  # started under the raised limit, which it inherits
        await round_trips(nsqd, "warm-up", 10)
        idle_fds, baseline = settled_fds(nsqd), rss_mib(nsqd)
        connections: list[socket.socket] = []
        try:
            for i in range(count):
                connection = socket.create_connection(nsqd.tcp_address)
                connections.append(connection)
                # a third say nothing, a third only the magic, a third subscribe with RDY 0
                if i % 3 == 1:
                    connection.sendall(MAGIC_V2)
                elif i % 3 == 2:
                    connection.sendall(MAGIC_V2 + b"SUB idle c\nRDY 0\n")
            wait_for_fds(nsqd, lambda n: n >= idle_fds + count, f"{count} connections open")
            crowded = rss_mib(nsqd)
            acks, deliveries = await round_trips(nsqd, "normal", 100)
            print(f"{count} idle connections: nsqd RSS {baseline:.1f} -> {crowded:.1f} MiB "
                  f"(+{(crowded - baseline) * 1024 / count:.1f} KiB each)")
            assert_prompt(f"with {count} idle connections", acks, deliveries)
            assert crowded - baseline < 100
            assert nsqd.channel_stats("idle", "c")["client_count"] == count // 3
        finally:
            for connection in connections:
                connection.close()
        wait_for_fds(nsqd, lambda n: n <= idle_fds, f"every connection released, {idle_fds} files open")
        assert_no_internal_error(nsqd)


# -- consumers that never read --------------------------------------------------------------------------------

def never_reading_consumer(nsqd: NSQDProcess, commands: bytes) -> socket.socket:
    """A connection whose receive buffer is tiny and never read: nsqd's writes to it back up at once."""
    connection = socket.socket()
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect, so the window is small
    connection.connect(nsqd.tcp_address)
    connection.sendall(MAGIC_V2 + commands)
    return connection


async def test_consumer_that_never_reads_leaves_messages_in_its_channel(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    # a small memory queue sends the backlog to disk, so memory shows socket buffering alone
    nsqd = nsqd_factory("--mem-queue-size=10")
    body_size, count = 100_000, 2000  # 200 MB
    stuck = never_reading_consumer(nsqd, b"SUB flood stuck\nRDY 2500\n")
    reader = await WireClient.connect(nsqd.tcp_address)
    producer = await WireClient.connect(nsqd.tcp_address)
    reading: asyncio.Task[float] | None = None
    try:
        await reader.subscribe("flood", "reader", rdy=100)
        await reader.command(b"NOP")
        await asyncio.sleep(0.2)
        assert nsqd.channel_stats("flood", "stuck")["client_count"] == 1
        baseline = peak = rss_mib(nsqd)

        async def read_all() -> float:
            for _ in range(count):
                message = await reader.read_message(timeout=10)
                await reader.command(b"FIN", message.id)
            return time.perf_counter()

        reading = asyncio.create_task(read_all())
        started = time.perf_counter()
        batch = [b"x" * body_size] * 40  # 4 MB, within --max-body-size
        for _ in range(count // len(batch)):
            producer.send(encode_mpub(b"flood", batch))
            assert await producer.read_frame(timeout=10) == OK
            peak = max(peak, rss_mib(nsqd))
        published = time.perf_counter()
        finished = await asyncio.wait_for(reading, 30)
        peak = max(peak, rss_mib(nsqd))
        slow = nsqd.channel_stats("flood", "stuck")
        print(f"200 MB to a consumer that never reads: nsqd RSS {baseline:.1f} -> peak {peak:.1f} MiB; "
              f"published in {published - started:.1f} s, the other channel read all {finished - published:.2f} s "
              f"after; stuck channel: depth {slow['depth']}, in flight {slow['in_flight_count']}")
        # what nsqd could not send stays queued in the channel (on disk here), not in nsqd's buffers, and the
        # consumer is still there: being dropped would bound memory too, but is not what is tested
        assert slow["client_count"] == 1
        assert slow["in_flight_count"] * body_size < 8 * MIB
        assert slow["depth"] + slow["in_flight_count"] == count
        assert peak - baseline < 64, (baseline, peak)
    finally:
        if reading is not None:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        stuck.close()
        await producer.close()
        await reader.close()
    assert_no_internal_error(nsqd)


def test_subscriber_that_sends_but_never_reads_does_not_grow_nsqd_without_bound(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    """FINs for unknown messages each get an E_FIN_FAILED frame (not fatal), three times the FIN's size.

    NSQ writes each reply from the connection's read loop: once the socket is full the loop blocks in the write,
    so it stops reading, and after the write deadline (the heartbeat interval) it closes the connection. nsqd
    must likewise stop reading such a client, or close it.
    """
    nsqd = nsqd_factory()
    identify = json.dumps({"heartbeat_interval": 1000}).encode()
    flooder = never_reading_consumer(nsqd, encode_command(b"IDENTIFY", body=identify) + b"SUB t c\nRDY 1\n")
    flooder.settimeout(0.2)
    fins = b"FIN 0123456789abcdef\n" * 5000
    baseline, sent = rss_mib(nsqd), 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < 15:
            try:
                sent += flooder.send(fins)
            except TimeoutError:
                pass  # nsqd stopped reading: the behaviour wanted
            except OSError:
                break  # nsqd closed the connection: also fine
    finally:
        flooder.close()
    grown = rss_mib(nsqd) - baseline
    print(f"subscriber flooding FINs without reading: sent {sent / 1e6:.1f} MB in 15 s, nsqd RSS +{grown:.1f} MiB")
    # with --workers, the worker holding the socket buffers its share (what nsqd may send it ahead, and read ahead),
    # and each process's allocator keeps what the churn made it take: +6 to +12 MiB over 3 processes in 6 runs
    bound = 8 + 3 * (len(nsqd.pids()) - 1)
    assert grown < bound, f"nsqd grew {grown:.1f} MiB while a client that reads nothing sent {sent / 1e6:.1f} MB"
