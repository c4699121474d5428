"""A disk that fills up, for real: nsqd's ``--data-path`` on a tmpfs of a few MB. The scenario shared by
tests/functional/test_full_disk.py (a fill and a drain, and a short round) and bench/full_disk.py (many rounds).

A round (:func:`full_disk_round`): one consumer subscribed to the channel, taking nothing; producers publish all
along on four routes (PUB and MPUB over TCP, /pub and /mpub over HTTP), one publish every 10 ms each, every
message's name kept with the answer it got (:class:`Ledger`). Each cycle waits until every route's latest
publish was refused and /ping answers NOK, keeps the disk full a while, then the consumer takes a batch, all in
flight at once, and finishes it: the seconds from its start to the first publish accepted again and to /ping
answering OK are the cycle's figures. At the end the producers stop, the consumer drains everything, every route
must publish once more, and what the consumer got is compared with what was acknowledged.

Bodies repeat their message's name (:func:`body`), so one that arrives changed, or cut, is told apart.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import json
import os
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp

from harness.processes import FAST_SCAN, NSQDProcess, start_nsqd, wait_for_async
from harness.wire import WireClient
from nsqclient.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, encode_command, encode_mpub

DISK_MB = 6
BODY_SIZE = 1024
BATCH = 20  # messages per MPUB and per /mpub
TOPIC, CHANNEL = "t", "c"
# segments of 1 MB: a disk of a few MB frees space each time a segment is read to its end (a segment larger than
# the disk would never be deleted, here as in NSQ)
NSQD_FLAGS = (*FAST_SCAN, "--sync-every=1", "--max-bytes-per-file=1048576")
# between two publishes of a route: the room a drain makes fills in a few tenths of a second, not before /ping
# has been asked (it answers OK from the first write that succeeds to the next the disk refuses)
PAUSE = 0.01


# -- the disk --------------------------------------------------------------------------------------------------

def unavailable() -> str | None:
    """Why a tmpfs cannot be mounted here (not root, mount refused), or None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root"
    with tempfile.TemporaryDirectory(prefix="full-disk-probe-") as probe:
        mounted = _mount(Path(probe), 1)
        if mounted.returncode:
            return f"cannot mount a tmpfs here: {mounted.stderr.strip()}"
        subprocess.run(["umount", "-l", probe], check=True)
    return None


@contextmanager
def tmpfs(path: Path, size_mb: int = DISK_MB) -> Iterator[Path]:
    """``path`` (made if need be) as a tmpfs of ``size_mb`` MB, unmounted on the way out."""
    path.mkdir(exist_ok=True)
    mounted = _mount(path, size_mb)
    if mounted.returncode:
        raise RuntimeError(f"cannot mount a tmpfs on {path}: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def _mount(path: Path, size_mb: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                          capture_output=True, text=True)


def fill(disk: Path) -> Path:
    """A file taking every byte left on ``disk``."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass  # full
    finally:
        os.close(fd)
    return filler


# -- bodies ----------------------------------------------------------------------------------------------------

def body(name: bytes, size: int = BODY_SIZE) -> bytes:
    """``name.`` over and over: a body changed or cut on the way no longer matches its name."""
    unit = name + b"."
    return (unit * (size // len(unit) + 1))[:size]


def name_of(received: bytes) -> bytes:
    return received.split(b".", 1)[0]


# -- one producer, one consumer ----------------------------------------------------------------------------------

async def publish_until_refused(nsqd: NSQDProcess, limit: int = 100_000) -> tuple[list[bytes], bytes]:
    """MPUBs of BATCH messages until one is refused: the messages acknowledged, and the refusal."""
    producer = await WireClient.connect(nsqd.tcp_address)
    acknowledged: list[bytes] = []
    try:
        while len(acknowledged) < limit:
            bodies = [body(b"%d" % (len(acknowledged) + i)) for i in range(BATCH)]
            producer.send(encode_mpub(TOPIC.encode(), bodies))
            frame = await producer.read_frame()
            if frame.frame_type != FRAME_TYPE_RESPONSE:
                assert frame.frame_type == FRAME_TYPE_ERROR
                assert await producer.closed()  # NSQ's E_MPUB_FAILED is fatal
                return acknowledged, frame.data
            acknowledged += bodies
        raise AssertionError(f"nsqd acknowledged {limit} messages of {BODY_SIZE} B on a {DISK_MB} MB disk")
    finally:
        await producer.close()


async def drain(consumer: WireClient, expected: set[bytes], timeout: float = 10) -> Counter[bytes]:
    """What the consumer receives (FINning each) until it has every one of ``expected`` and nothing more comes for
    0.3 s, or nothing comes for ``timeout`` s (what it misses then is lost)."""
    received: Counter[bytes] = Counter()
    missing = set(expected)
    consumer.send(b"RDY 2500\n")
    try:
        while True:
            message = await consumer.read_message(timeout=timeout if missing else 0.3)
            received[message.body] += 1
            missing.discard(message.body)
            consumer.send(b"FIN " + message.id + b"\n")
    except asyncio.TimeoutError:
        return received


async def take(consumer: WireClient, count: int) -> list[bytes]:
    """Exactly ``count`` messages (at most nsqd's --max-rdy-count, 2500), finished once all have come."""
    consumer.send(b"RDY %d\n" % count)
    messages = await consumer.read_messages(count, timeout=10)
    # RDY 0 first: the FINs free the window, and nothing more may come
    consumer.send(b"RDY 0\n" + b"".join(b"FIN " + message.id + b"\n" for message in messages))
    return [message.body for message in messages]


async def ping(session: aiohttp.ClientSession, nsqd: NSQDProcess) -> tuple[int, bytes]:
    async with session.get(nsqd.http_url("/ping")) as response:
        return response.status, await response.read()


# -- producers that keep trying ----------------------------------------------------------------------------------

@dataclass
class Ledger:
    """What the producers were told, by message name, and when each route was last refused and accepted."""

    acknowledged: set[bytes] = field(default_factory=set)
    refused: set[bytes] = field(default_factory=set)
    unanswered: set[bytes] = field(default_factory=set)  # the connection failed first: maybe in, maybe not
    refusals: Counter[str] = field(default_factory=Counter)  # publishes refused, by "route error"
    refused_at: dict[str, float] = field(default_factory=dict)
    accepted_at: dict[str, float] = field(default_factory=dict)
    accepted_times: list[float] = field(default_factory=list)  # every acceptance, in order

    def record(self, route: str, names: list[bytes], refusal: str | None) -> None:
        now = time.monotonic()
        if refusal is None:
            self.acknowledged.update(names)
            self.accepted_at[route] = now
            self.accepted_times.append(now)
        else:
            self.refused.update(names)
            self.refusals[f"{route} {refusal}"] += 1
            self.refused_at[route] = now

    def refusing(self, routes: list[str], since: float) -> bool:
        """Whether every route's latest publish was refused, after ``since``."""
        return all(self.refused_at.get(route, 0.0) > max(since, self.accepted_at.get(route, 0.0))
                   for route in routes)

    def first_accepted_after(self, since: float) -> float | None:
        index = bisect.bisect_right(self.accepted_times, since)
        return self.accepted_times[index] if index < len(self.accepted_times) else None


class Route(Protocol):
    name: str
    batch: int

    async def publish(self, bodies: list[bytes]) -> str | None:
        """None once nsqd acknowledged ``bodies``, else its refusal; raises if no answer came."""

    async def close(self) -> None: ...


class TCPRoute:
    """PUB or MPUB on a connection of its own; nsqd closes it after a refusal (E_PUB_FAILED and E_MPUB_FAILED are
    fatal), and the next publish opens another."""

    def __init__(self, nsqd: NSQDProcess, command: str) -> None:
        self.name, self.batch = command, BATCH if command == "MPUB" else 1
        self._address = nsqd.tcp_address
        self._client: WireClient | None = None

    async def publish(self, bodies: list[bytes]) -> str | None:
        if self._client is None:
            self._client = await WireClient.connect(self._address)
        if self.batch == 1:
            self._client.send(encode_command(b"PUB", TOPIC.encode(), body=bodies[0]))
        else:
            self._client.send(encode_mpub(TOPIC.encode(), bodies))
        frame = await self._client.read_frame(timeout=10)
        if frame.frame_type == FRAME_TYPE_RESPONSE:
            return None
        await self.close()
        return frame.data.split(b" ", 1)[0].decode()

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.close()


class HTTPRoute:
    """/pub or /mpub (bodies a line each)."""

    def __init__(self, nsqd: NSQDProcess, session: aiohttp.ClientSession, path: str) -> None:
        self.name, self.batch = path, BATCH if path == "/mpub" else 1
        self._url = nsqd.http_url(f"{path}?topic={TOPIC}")
        self._session = session

    async def publish(self, bodies: list[bytes]) -> str | None:
        async with self._session.post(self._url, data=b"\n".join(bodies),
                                      timeout=aiohttp.ClientTimeout(total=10)) as response:
            answer = await response.read()
        if response.status == 200:
            return None
        return f"HTTP {response.status} {json.loads(answer).get('message')}"

    async def close(self) -> None:
        pass


class Producers:
    """One task per route, publishing all along from ``async with`` until :meth:`stop` (a publish under way is
    finished first, so the ledger knows the answer of every publish made); the connections close on the way out."""

    def __init__(self, nsqd: NSQDProcess, session: aiohttp.ClientSession) -> None:
        self.ledger = Ledger()
        self.routes: list[Route] = [TCPRoute(nsqd, "PUB"), TCPRoute(nsqd, "MPUB"), HTTPRoute(nsqd, session, "/pub"),
                                    HTTPRoute(nsqd, session, "/mpub")]
        self._numbers = itertools.count()
        self._stopping = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> Producers:
        self._tasks = [asyncio.create_task(self._keep_publishing(route)) for route in self.routes]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()
        for route in self.routes:
            await route.close()

    @property
    def route_names(self) -> list[str]:
        return [route.name for route in self.routes]

    async def publish(self, route: Route) -> str | None:
        """One publish of ``route.batch`` new messages, recorded; its refusal, or "unanswered"."""
        number = next(self._numbers)
        names = [b"%s%d-%d" % (route.name.strip("/").encode(), number, index) for index in range(route.batch)]
        try:
            refusal = await route.publish([body(name) for name in names])
        except (ConnectionError, OSError, asyncio.TimeoutError, aiohttp.ClientError):
            self.ledger.unanswered.update(names)
            await route.close()
            return "unanswered"
        self.ledger.record(route.name, names, refusal)
        return refusal

    async def _keep_publishing(self, route: Route) -> None:
        while not self._stopping.is_set():
            await self.publish(route)
            await asyncio.sleep(PAUSE)

    async def stop(self) -> None:
        self._stopping.set()
        await asyncio.gather(*self._tasks)


# -- a round -----------------------------------------------------------------------------------------------------

@dataclass
class RoundResult:
    acknowledged: int
    refusals: Counter[str]  # publishes refused, by route and error
    unanswered: int  # messages whose publish got no answer
    received: int  # deliveries
    lost: int  # acknowledged, never received intact
    duplicated: int  # deliveries beyond the first of a message
    corrupted: int  # bodies that are not what was sent
    refused_yet_delivered: int  # messages of a refused publish: a publish partly accepted
    publish_recovered: list[float]  # per cycle: seconds from the consumer starting to the first publish accepted
    ping_recovered: list[float]  # ... and to /ping answering OK
    recovered_at_end: bool  # every route accepted a publish, and /ping answered OK, once drained
    nsqd_running: bool  # nsqd never exited


async def full_disk_round(disk: Path, mem_queue_size: int | None, takes: list[int],
                          full_for: float = 0.0) -> RoundResult:
    """nsqd on ``disk`` (``mem_queue_size`` None: nsqd's default), filled once per item of ``takes``; kept full
    ``full_for`` s while the producers keep trying, then the consumer takes that many messages (at least a
    segment's, about 1000, so that at --mem-queue-size=0 one is freed; at most 2500)."""
    flags = [*NSQD_FLAGS] if mem_queue_size is None else [*NSQD_FLAGS, f"--mem-queue-size={mem_queue_size}"]
    nsqd = start_nsqd(*flags, data_path=disk)
    try:
        assert nsqd.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")[0] == 200
        consumer = await WireClient.connect(nsqd.tcp_address)
        try:
            await consumer.subscribe(TOPIC, CHANNEL, rdy=0)  # taking nothing: everything waits in the channel
            async with aiohttp.ClientSession() as session:
                return await _cycles(nsqd, session, consumer, takes, full_for)
        finally:
            await consumer.close()
    finally:
        nsqd.stop()


async def _cycles(nsqd: NSQDProcess, session: aiohttp.ClientSession, consumer: WireClient, takes: list[int],
                  full_for: float) -> RoundResult:
    received: Counter[bytes] = Counter()
    publish_recovered, ping_recovered = [], []
    async with Producers(nsqd, session) as producers:
        for count in takes:
            await _refusing(nsqd, session, producers)
            await asyncio.sleep(full_for)
            accepted_after, ping_ok_after = await _free_space(nsqd, session, consumer, producers.ledger, count,
                                                              received)
            publish_recovered.append(accepted_after)
            ping_recovered.append(ping_ok_after)
        await producers.stop()
        recovered_at_end = await _drain_and_publish_again(nsqd, session, consumer, producers, received)
    return _result(producers.ledger, received, publish_recovered, ping_recovered, recovered_at_end,
                   nsqd.process.poll() is None)


async def _refusing(nsqd: NSQDProcess, session: aiohttp.ClientSession, producers: Producers) -> None:
    """Waits until every route's latest publish was refused and /ping answers NOK."""
    since = time.monotonic()
    await wait_for_async(lambda: producers.ledger.refusing(producers.route_names, since), timeout=60,
                         what="every route refused")
    status, answer = await ping(session, nsqd)
    assert status == 500 and answer.startswith(b"NOK - "), f"/ping while every publish is refused: {answer!r}"


async def _free_space(nsqd: NSQDProcess, session: aiohttp.ClientSession, consumer: WireClient, ledger: Ledger,
                      count: int, received: Counter[bytes]) -> tuple[float, float]:
    """The consumer takes ``count`` messages; the seconds from its start to the first publish accepted again and to
    /ping answering OK."""
    started = time.monotonic()
    taking = asyncio.create_task(take(consumer, count))
    try:
        ping_ok = await _ping_ok(nsqd, session)
        accepted = await wait_for_async(lambda: ledger.first_accepted_after(started), timeout=30,
                                        what="a publish accepted again after the consumer took messages")
    except BaseException:
        taking.cancel()
        await asyncio.wait({taking})
        raise
    received.update(await taking)
    return accepted - started, ping_ok - started


async def _ping_ok(nsqd: NSQDProcess, session: aiohttp.ClientSession, timeout: float = 30) -> float:
    """When /ping answered OK (asked every 10 ms)."""
    deadline = time.monotonic() + timeout
    while (answer := await ping(session, nsqd))[0] != 200:
        assert time.monotonic() < deadline, f"/ping still NOK after {timeout} s: {answer[1]!r}"
        await asyncio.sleep(0.01)
    return time.monotonic()


async def _drain_and_publish_again(nsqd: NSQDProcess, session: aiohttp.ClientSession, consumer: WireClient,
                                   producers: Producers, received: Counter[bytes]) -> bool:
    """Drains everything; then every route publishes once more: whether all were accepted and /ping said OK."""
    expected = {body(name) for name in producers.ledger.acknowledged}
    received.update(await drain(consumer, expected - received.keys()))
    refusals = [await producers.publish(route) for route in producers.routes]
    status, _ = await ping(session, nsqd)
    before = set(received)
    expected = {body(name) for name in producers.ledger.acknowledged}
    received.update(await drain(consumer, expected - before))
    return refusals == [None] * len(refusals) and status == 200


def _result(ledger: Ledger, received: Counter[bytes], publish_recovered: list[float], ping_recovered: list[float],
            recovered_at_end: bool, nsqd_running: bool) -> RoundResult:
    names: Counter[bytes] = Counter()
    corrupted = 0
    sent = ledger.acknowledged | ledger.refused | ledger.unanswered
    for received_body, times in received.items():
        name = name_of(received_body)
        if received_body != body(name) or name not in sent:
            corrupted += times
        else:
            names[name] += times
    return RoundResult(
        acknowledged=len(ledger.acknowledged), refusals=ledger.refusals, unanswered=len(ledger.unanswered),
        received=sum(received.values()), lost=len(ledger.acknowledged - names.keys()),
        duplicated=sum(times - 1 for times in names.values()), corrupted=corrupted,
        refused_yet_delivered=len(ledger.refused & names.keys()), publish_recovered=publish_recovered,
        ping_recovered=ping_recovered, recovered_at_end=recovered_at_end, nsqd_running=nsqd_running)
