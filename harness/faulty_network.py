"""Publishing through a network that delays, corrupts and goes silent: the scenario behind
tests/functional/test_faulty_network.py (briefly) and bench/faulty_network.py (for as long as asked).

Publishers, each a ``Producer`` of its own with short timeouts, PUB and MPUB unique bodies to one topic through a
``FaultProxy`` in front of nsqd, while the proxy goes through its faults in turn: a delay on every chunk (at times
longer than the timeout), bytes dropped both ways, half-open (nothing forwarded, sockets kept open), the client's
side cut, nsqd's side cut. Every publish ends with OK, with an ``NSQError``, or, a bug, with neither within
``GUARD`` seconds. Meanwhile a client connected straight to nsqd publishes to a topic of its own, and must get
every OK: nsqd closes the damaged connections only. At the end the faults stop and every publisher must get an OK
again (its producer reconnects), then the topic's channel is drained straight from nsqd and compared with what was
published: an acknowledged message missing is lost; one that failed but is there is a "maybe" (a publish that
fails may or may not have been taken).

A lost byte can be noticed only because nsqd then reads a command cut short (it waits for the rest, and the
publish times out) or garbage (an error frame and a closed connection); nothing may come afterwards to complete a
damaged command into another one that nsqd would take. NSQ has no checksum of its own (TCP's protect it, and the
proxy drops bytes after them), so the scenario sees to that:

- one publish at a time per connection: the next command's bytes would complete a damaged one, and nsqd would
  take a corrupted body and answer OK;
- heartbeats off (IDENTIFY's -1): the NOP that answers one would do the same;
- a one-letter topic: ``PUB f`` missing a byte names no other topic;
- nsqd's ``--max-msg-size`` (``NSQD_FLAGS``) above a PUB's body and below an MPUB's (two bodies at least): an MPUB
  missing its "M" is refused as too large a PUB rather than taken as one message holding the batch;
- bodies of 100 bytes that begin with "p" (112): a size missing its last byte reads 112 bytes, more than follow.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from harness.fault_proxy import FaultProxy, Faults, Side
from harness.processes import Service
from harness.wire import WireClient
from nsqclient import Config, NSQError, NSQProtocolError, Producer
from nsqclient.protocol.frames import FRAME_TYPE_RESPONSE, Frame

TOPIC, CHANNEL, CONTROL_TOPIC = "f", "c", "control"
BODY_SIZE = 100
NSQD_FLAGS = ("--max-msg-size=128",)
CONFIG = Config(connect_timeout=1.0, command_timeout=1.0, heartbeat_interval=-1)
GUARD = 10.0  # seconds: a publish not over by then hangs (it should end within connect_timeout + command_timeout)
DROP = 0.2  # a chunk's chance to lose bytes in the drop phase
OK = Frame(FRAME_TYPE_RESPONSE, b"OK")

Phase = Callable[[FaultProxy, random.Random, float], Awaitable[None]]  # applies its faults for that many seconds


async def _delay(proxy: FaultProxy, rng: random.Random, seconds: float) -> None:
    proxy.to_server = proxy.to_client = Faults(delay=rng.uniform(0.01, 0.7))  # two chunks past 1 s time out
    await asyncio.sleep(seconds)


async def _drop(proxy: FaultProxy, rng: random.Random, seconds: float) -> None:
    proxy.to_server = proxy.to_client = Faults(drop=DROP)
    await asyncio.sleep(seconds)


async def _half_open(proxy: FaultProxy, rng: random.Random, seconds: float) -> None:
    proxy.stall()
    await asyncio.sleep(seconds)


def _cuts(side: Side) -> Phase:
    """Cuts ``side`` of every connection, again and again: each time the producers have reconnected."""
    async def cut(proxy: FaultProxy, rng: random.Random, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while (wait := rng.uniform(0.1, 0.5)) < deadline - time.monotonic():
            await asyncio.sleep(wait)
            proxy.cut(side)
        await asyncio.sleep(max(0.0, deadline - time.monotonic()))
    return cut


PHASES: list[tuple[str, Phase]] = [
    ("delay", _delay),
    ("drop", _drop),
    ("half-open", _half_open),
    ("cut client", _cuts("client")),
    ("cut server", _cuts("server")),
]
RECOVERY = CONFIG.connect_timeout + CONFIG.command_timeout  # seconds without faults before each phase


@dataclass
class Tally:
    """What the publishers saw, message by message."""

    phase: str = "before"  # the fault under way, or "after <fault>" while the publishers recover from one
    publishes: int = 0  # PUBs and MPUBs
    attempted: int = 0  # messages (an MPUB counts its bodies)
    acknowledged: list[bytes] = field(default_factory=list)
    failed: list[bytes] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)  # publishes, by "phase: error" (see record)
    hangs: int = 0
    longest: float = 0.0  # seconds, the slowest publish
    cleared_at: float = float("inf")  # when the faults stopped
    recovered: set[int] = field(default_factory=set)  # publishers acknowledged after that

    def record(self, worker: int, bodies: list[bytes], outcome: str, started: float, began: str) -> None:
        """A failure counts against the fault under way when the publish ended, else the one when it began (a
        fault can start or end while a publish is under way)."""
        self.publishes += 1
        self.attempted += len(bodies)
        self.longest = max(self.longest, time.monotonic() - started)
        if outcome == "OK":
            self.acknowledged += bodies
            if started >= self.cleared_at:
                self.recovered.add(worker)
            return
        self.failed += bodies
        phase = began if self.phase.startswith(("after ", "before")) else self.phase
        self.errors[f"{phase}: {outcome}"] += 1
        if outcome == "hang":
            self.hangs += 1


@dataclass(frozen=True)
class Figures:
    publishes: int
    attempted: int  # messages
    acknowledged: int
    failed: int  # messages whose publish raised an NSQError (or hung)
    errors: dict[str, int]  # failed publishes, by "phase: error"
    hangs: int
    longest: float
    lost: int  # acknowledged, not in nsqd
    duplicated: int  # in nsqd more than once
    maybe: int  # failed, yet in nsqd
    unknown: int  # in nsqd, never published: a corrupted body taken
    stray_topics: list[str]  # topics nsqd has that nobody published to: a corrupted topic name taken
    unrecovered: int  # publishers with no OK once the faults stopped
    control_acknowledged: int  # the direct client's publishes, each OK
    damaged_chunks: int

    @property
    def timeouts(self) -> int:
        return sum(count for kind, count in self.errors.items() if kind.endswith("CommandTimeout"))

    def lines(self) -> list[str]:
        failed = sum(self.errors.values())
        lines = [f"publishes attempted {self.publishes} ({self.attempted} messages), acknowledged "
                 f"{self.publishes - failed} ({self.acknowledged} messages), failed {failed} ({self.failed} "
                 f"messages): {failed - self.timeouts - self.hangs} errors and {self.timeouts} timeouts reported, "
                 f"{self.hangs} hangs; slowest publish {self.longest:.2f} s",
                 f"in nsqd: lost {self.lost}, duplicated {self.duplicated}, maybe (failed yet there) {self.maybe}, "
                 f"unknown bodies {self.unknown}, stray topics {self.stray_topics}",
                 f"publishers without an OK after the faults {self.unrecovered}; direct client's publishes, "
                 f"all acknowledged: {self.control_acknowledged}; chunks the proxy damaged {self.damaged_chunks}",
                 "failed publishes by fault and error:"]
        return lines + [f"  {count:6d} {kind}" for kind, count in sorted(self.errors.items())]


async def run(nsqd: Service, rounds: int, phase_seconds: float, publishers: int = 8, pause: float = 0.0,
              seed: int = 0) -> Figures:
    """Publishes through every phase ``rounds`` times, then drains nsqd and compares. Each publisher waits ``pause``
    seconds between publishes (0: as fast as it goes)."""
    rng = random.Random(seed)
    nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")  # so that the channel keeps everything
    tally = Tally()
    stop = asyncio.Event()
    async with FaultProxy(nsqd.tcp_address, seed) as proxy:
        producers = [Producer(proxy.address_text, config=CONFIG) for _ in range(publishers)]
        tasks = [asyncio.create_task(_publish_until(stop, producer, worker, tally, random.Random(seed + worker),
                                                    pause))
                 for worker, producer in enumerate(producers)]
        control = asyncio.create_task(_control(nsqd.tcp_address, stop))
        try:
            await _drive(proxy, tally, rounds, phase_seconds, rng)
            await _recover(tally, publishers)
        finally:
            stop.set()
            await asyncio.gather(*tasks)
            control_acknowledged = await control
            for producer in producers:
                await producer.close()
    received = await drain(nsqd.tcp_address, TOPIC, CHANNEL)
    return _compare(nsqd, tally, received, publishers, control_acknowledged, proxy.counts.damaged)


async def _drive(proxy: FaultProxy, tally: Tally, rounds: int, phase_seconds: float, rng: random.Random) -> None:
    for _ in range(rounds):
        for name, phase in PHASES:
            await asyncio.sleep(RECOVERY)  # the publishers the previous phase left waiting reconnect
            tally.phase = name
            await phase(proxy, rng, phase_seconds)
            proxy.clear()
            tally.phase = f"after {name}"
    tally.cleared_at = time.monotonic()


async def _recover(tally: Tally, publishers: int, timeout: float = 20.0) -> None:
    """Until every publisher got an OK again, or ``timeout`` s (the figures tell which did not)."""
    deadline = time.monotonic() + timeout
    while len(tally.recovered) < publishers and time.monotonic() < deadline:
        await asyncio.sleep(0.1)


async def _publish_until(stop: asyncio.Event, producer: Producer, worker: int, tally: Tally,
                         rng: random.Random, pause: float) -> None:
    number = 0
    while not stop.is_set():
        count = 1 if rng.random() < 0.5 else rng.randint(2, 5)  # PUB, or MPUB of 2 to 5
        bodies = [b"p%d-%d-" % (worker, number + n) for n in range(count)]
        bodies = [body.ljust(BODY_SIZE, b".") for body in bodies]
        number += count
        started, began = time.monotonic(), tally.phase
        tally.record(worker, bodies, await _publish(producer, bodies), started, began)
        await asyncio.sleep(pause)


async def _publish(producer: Producer, bodies: list[bytes]) -> str:
    """"OK", "hang", or the error the publish raised (anything but an NSQError is a bug, raised)."""
    try:
        async with asyncio.timeout(GUARD) as guard:
            if len(bodies) == 1:
                await producer.publish(TOPIC, bodies[0])
            else:
                await producer.multi_publish(TOPIC, bodies)
    except NSQError as error:
        return type(error).__name__ + (f" {error.code}" if isinstance(error, NSQProtocolError) else "")
    except TimeoutError:
        if guard.expired():
            return "hang"
        raise
    return "OK"


async def _control(address: tuple[str, int], stop: asyncio.Event) -> int:
    """PUBs straight to nsqd while the others are damaged: every one must get OK on the same connection."""
    client = await WireClient.connect(address)
    published = 0
    try:
        while not stop.is_set():
            await client.command(b"PUB", CONTROL_TOPIC.encode(), body=b"c%d" % published)
            frame = await client.read_frame(timeout=GUARD)
            assert frame == OK, f"a client nsqd should not have minded got {frame}"
            published += 1
            await asyncio.sleep(0.05)
    finally:
        await client.close()
    return published


async def drain(address: tuple[str, int], topic: str, channel: str, quiet: float = 2.0) -> list[bytes]:
    """Every message of the channel, until none came for ``quiet`` s."""
    consumer = await WireClient.connect(address)
    await consumer.subscribe(topic, channel, rdy=2500)
    bodies = []
    try:
        while True:
            message = await consumer.read_message(timeout=quiet)
            bodies.append(message.body)
            consumer.send(b"FIN " + message.id + b"\n")
    except TimeoutError:
        return bodies
    finally:
        await consumer.close()


def _compare(nsqd: Service, tally: Tally, received: list[bytes], publishers: int, control_acknowledged: int,
             damaged_chunks: int) -> Figures:
    present = set(received)
    published = set(tally.acknowledged) | set(tally.failed)
    topics = json.loads(nsqd.http("GET", "/stats?format=json")[2])["topics"] or []
    return Figures(
        publishes=tally.publishes, attempted=tally.attempted, acknowledged=len(tally.acknowledged),
        failed=len(tally.failed), errors=dict(tally.errors), hangs=tally.hangs, longest=tally.longest,
        lost=len(set(tally.acknowledged) - present), duplicated=len(received) - len(present),
        maybe=len(set(tally.failed) & present), unknown=len(present - published),
        stray_topics=sorted({topic["topic_name"] for topic in topics} - {TOPIC, CONTROL_TOPIC}),
        unrecovered=publishers - len(tally.recovered), control_acknowledged=control_acknowledged,
        damaged_chunks=damaged_chunks)
