"""Partitions, for real: nsqd and lookupd each in a network namespace of its own (harness.netns), the link between
them cut with iptables while the producers and consumers, in the root namespace, go on using nsqd. The scenario is
shared by tests/functional/test_partitions.py (one round) and bench/partitions.py (many).

A round (:func:`partition_round`): the nsqd<->lookupd link is cut; lookupd drops the node once it has not pinged
for ``--inactive-producer-timeout``; a topic and a channel are created meanwhile; the link heals and nsqd
registers again, all of it, on a new connection; the stale connection of before the cut then dies on lookupd's side
without taking the new connection's registrations with it. A consumer cut off in the middle of a batch
(:func:`cut_consumer_mid_batch`): its messages in flight time out and reach another consumer; nsqd drops the
silent client after two heartbeat intervals.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.netns import ROOT, Network
from harness.processes import FAST_SCAN, NSQDProcess, start_lookupd, start_nsqd, wait_for_async
from harness.wire import WireClient
from nsqclient import Consumer, Message, NSQError, Producer
from services.nsqd.lookup_peer import MAX_RECONNECT_DELAY

# longer than nsqd's ping interval (15 s), or lookupd would drop an nsqd that is fine
INACTIVE_PRODUCER_TIMEOUT = 20.0
MSG_TIMEOUT = 2.0  # nsqd's --msg-timeout: what a consumer cut off held comes back this soon
HEARTBEAT_INTERVAL = 2.0  # what the consumers cut off ask for in IDENTIFY: nsqd drops them after twice that
TOPIC, CHANNEL = "t", "c"
# After a heal, how soon lookupd closes the connection nsqd gave up during the partition (lookupd never writes
# unasked). nsqd's kernel resends its FIN for about 100 s (8 tries, from 0.2 s doubling): the next try after the
# heal closes it; past them, a keep-alive probe (every 15 s) meets a reset. At worst ~120 s after the heal.
STALE_CONNECTION_CLOSED = 150.0


@dataclass
class Cluster:
    net: Network
    nsqd: NSQDProcess
    lookupd: NSQDProcess

    def cut(self) -> None:
        self.net.cut("nsqd", "lookupd")

    def heal(self) -> None:
        self.net.heal("nsqd", "lookupd")


@contextmanager
def cluster(data_path: Path) -> Iterator[Cluster]:
    """nsqd and lookupd, each in its namespace; everything is stopped and deleted on the way out."""
    with Network("nsqd", "lookupd") as net:
        lookupd = start_lookupd(f"--inactive-producer-timeout={INACTIVE_PRODUCER_TIMEOUT:g}s",
                                host=net.address("lookupd"), program=net.python("lookupd", "services.lookupd"))
        try:
            nsqd = start_nsqd(*FAST_SCAN, f"--msg-timeout={MSG_TIMEOUT:g}s",
                              f"--lookupd-tcp-address={lookupd.host}:{lookupd.tcp_port}", data_path=data_path,
                              host=net.address("nsqd"), program=net.python("nsqd", "services.nsqd"))
            try:
                yield Cluster(net, nsqd, lookupd)
            finally:
                nsqd.stop()
        finally:
            lookupd.stop()


# -- what lookupd knows -------------------------------------------------------------------------------------------

def _json(service: NSQDProcess, path: str) -> Any:
    status, _, body = service.http("GET", path)
    assert status == 200, (path, status, body)
    return json.loads(body)


def nsqd_keys(nsqd: NSQDProcess) -> set[str]:
    """nsqd's topics and channels as lookupd's /debug names them: ``topic:t:``, ``channel:t:c``."""
    keys = set()
    for topic in _json(nsqd, "/stats?format=json")["topics"]:
        keys.add(f"topic:{topic['topic_name']}:")
        keys.update(f"channel:{topic['topic_name']}:{channel['channel_name']}" for channel in topic["channels"])
    return keys


def listed(cluster: Cluster) -> bool:
    """Whether lookupd lists the nsqd, in /nodes or as a producer of the topic in /lookup."""
    nodes = _json(cluster.lookupd, "/nodes")["producers"]
    producers = _json(cluster.lookupd, f"/lookup?topic={TOPIC}")["producers"]
    return any(node["tcp_port"] == cluster.nsqd.tcp_port for node in [*nodes, *producers])


def registered_connection(cluster: Cluster) -> str | None:
    """The remote address of the connection on which lookupd lists the nsqd as active with every topic and channel
    the nsqd has; None while there is none."""
    wanted = nsqd_keys(cluster.nsqd)
    debug = _json(cluster.lookupd, "/debug")
    for node in _json(cluster.lookupd, "/nodes")["producers"]:
        if node["tcp_port"] == cluster.nsqd.tcp_port and all(
                any(producer["id"] == node["remote_address"] for producer in debug.get(key, [])) for key in wanted):
            return str(node["remote_address"])
    return None


# -- traffic all along ---------------------------------------------------------------------------------------------

@dataclass
class Tally:
    acknowledged: list[bytes] = field(default_factory=list)
    received: list[bytes] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        self.acknowledged += other.acknowledged
        self.received += other.received

    @property
    def lost(self) -> int:
        return len(set(self.acknowledged) - set(self.received))

    @property
    def duplicated(self) -> int:
        return sum(count - 1 for count in Counter(self.received).values())


class Traffic:
    """A producer publishing to nsqd all along (a body counts once nsqd answered OK) and a consumer that found nsqd
    through lookupd, both in the root namespace."""

    def __init__(self, cluster: Cluster, interval: float = 0.01) -> None:
        self.cluster, self.interval = cluster, interval
        self.tally = Tally()
        self._producer = Producer(cluster.nsqd.tcp_address_text)
        self._consumer = Consumer(TOPIC, CHANNEL, self._handle,
                                  lookupd_http_addresses=[cluster.lookupd.http_address_text], max_in_flight=50,
                                  lookupd_poll_interval=0.5)
        self._publishing: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._consumer.start()
        self._publishing = asyncio.create_task(self._publish())
        await self.flowing("before the first cut")

    async def flowing(self, when: str) -> None:
        """Waits until a few more messages went all the way from the producer to the consumer."""
        target = len(self.tally.received) + 20
        await wait_for_async(lambda: len(self.tally.received) >= target, timeout=15,
                             what=f"messages flowing {when}")

    async def stop(self) -> None:
        """Stops publishing, waits for the consumer to have every acknowledged message, and stops it."""
        assert self._publishing is not None
        self._publishing.cancel()
        await asyncio.wait({self._publishing})
        acknowledged = set(self.tally.acknowledged)
        try:
            await wait_for_async(lambda: acknowledged <= set(self.tally.received), timeout=30,
                                 what=lambda: f"{len(acknowledged - set(self.tally.received))} acknowledged messages "
                                              "consumed")
        finally:
            await self._consumer.stop()
            await self._producer.close()

    async def _publish(self) -> None:
        for number in itertools.count():
            await asyncio.sleep(self.interval)
            body = b"p%d" % number
            try:
                await self._producer.publish(TOPIC, body)
            except NSQError:
                continue  # not acknowledged: it need not arrive
            self.tally.acknowledged.append(body)

    async def _handle(self, message: Message) -> None:
        self.tally.received.append(message.body)


# -- a round -------------------------------------------------------------------------------------------------------

@dataclass
class Round:
    dropped_after: float  # seconds from the cut until lookupd listed the nsqd no more
    registered_after: float  # seconds from the heal until lookupd had all of it again, on a new connection
    stale_closed_after: float  # seconds from the heal until lookupd closed the connection of before the cut


async def partition_round(cluster: Cluster, traffic: Traffic, number: int, heal_at_longest_wait: bool = False,
                          hold: float = 0.0, registered_within: float = 60.0, end_stale: bool = False) -> Round:
    """Cuts nsqd from lookupd until lookupd drops it, creates a topic and a channel meanwhile, heals (at once, or
    when nsqd has begun its longest wait between reconnections: the worst moment; at the earliest ``hold``
    seconds after the cut) and waits for nsqd to be registered again, all of it, within ``registered_within``.
    Then the connection of before the cut closes on lookupd's side (``end_stale``: at once, ended with ``ss -K``;
    else when TCP finds out, within ``STALE_CONNECTION_CLOSED``) and the new one's registrations stay."""
    stale = await wait_for_async(lambda: registered_connection(cluster), what="nsqd registered before the cut")
    log_start = len(cluster.nsqd.log_lines)
    cut_at = time.monotonic()
    cluster.cut()
    created = create_during_partition(cluster, number)
    await wait_for_async(lambda: not listed(cluster), timeout=INACTIVE_PRODUCER_TIMEOUT + 10,
                         what="lookupd dropping the nsqd it cannot hear", interval=0.1)
    dropped_after = time.monotonic() - cut_at
    await traffic.flowing("while lookupd cannot reach nsqd")
    if heal_at_longest_wait:
        await longest_wait_begun(cluster.nsqd, log_start)
    await asyncio.sleep(cut_at + hold - time.monotonic())
    healed_at = time.monotonic()
    cluster.heal()
    await registered_again(cluster, stale, created, registered_within)
    registered_after = time.monotonic() - healed_at
    if end_stale:
        kill_connection(cluster, stale)
    await stale_connection_dies(cluster, stale)
    stale_closed_after = time.monotonic() - healed_at
    await traffic.flowing("after the heal")
    return Round(dropped_after, registered_after, stale_closed_after)


async def longest_wait_begun(nsqd: NSQDProcess, log_start: int) -> None:
    """Waits for nsqd to log that it waits ``MAX_RECONNECT_DELAY`` before its next connection attempt."""
    longest = f"reconnecting in {MAX_RECONNECT_DELAY:.0f}s"
    await wait_for_async(lambda: any(longest in line for line in nsqd.log_lines[log_start:]), timeout=90,
                         what=f"nsqd {longest}", interval=0.01)


async def registered_again(cluster: Cluster, stale: str, created: set[str], within: float) -> None:
    fresh = await wait_for_async(lambda: registered_connection(cluster), timeout=within,
                                 what=lambda: f"nsqd registered again with {sorted(created)}", interval=0.1)
    assert fresh != stale, "lookupd lists the connection of before the cut"
    assert created <= nsqd_keys(cluster.nsqd)


def create_during_partition(cluster: Cluster, number: int) -> set[str]:
    """A new topic with a channel, and a new channel of the topic traffic goes through, created on nsqd while it
    cannot reach lookupd; their names as lookupd's /debug has them."""
    topic, channel = f"during{number}", f"during{number}"
    for path in (f"/topic/create?topic={topic}", f"/channel/create?topic={topic}&channel=c",
                 f"/channel/create?topic={TOPIC}&channel={channel}"):
        assert cluster.nsqd.http("POST", path)[0] == 200, path
    return {f"topic:{topic}:", f"channel:{topic}:c", f"channel:{TOPIC}:{channel}"}


def kill_connection(cluster: Cluster, remote_address: str) -> None:
    """Ends lookupd's side of a connection at once (``ss -K``)."""
    host, port = remote_address.rsplit(":", 1)
    cluster.net.run("lookupd", ["ss", "-K", "dst", host, "dport", "=", f":{port}"])


async def stale_connection_dies(cluster: Cluster, stale: str) -> None:
    """Waits for lookupd to close the connection of before the cut, then checks that what it registered went and
    what the new connection registered stayed."""
    await wait_for_async(lambda: any(f"[{stale}] exiting" in line for line in cluster.lookupd.log_lines),
                         timeout=STALE_CONNECTION_CLOSED, what=f"lookupd closing the stale connection {stale}",
                         interval=0.1)
    debug = _json(cluster.lookupd, "/debug")
    assert not [key for key, producers in debug.items() if any(p["id"] == stale for p in producers)]
    assert registered_connection(cluster), "the stale connection took the new one's registrations with it"


# -- a consumer cut off in the middle of a batch -------------------------------------------------------------------

@dataclass
class Batch:
    tally: Tally
    held: int  # messages in flight to the consumer cut off
    timed_out: int  # the channel's timeouts meanwhile
    dead_after: float  # seconds from the cut until nsqd's /stats listed the consumer no more


async def cut_consumer_mid_batch(cluster: Cluster, topic: str, messages: int = 40, rdy: int = 10,
                                 fin: int = 4) -> Batch:
    """``messages`` on ``topic``; consumer A (RDY ``rdy``) FINs ``fin`` of the first ``rdy`` it receives and is cut
    off (its connection's packets dropped in nsqd's namespace) holding the rest; consumer B then takes the
    channel's messages until every one was FINed by A or B."""
    bodies = [b"%s-%d" % (topic.encode(), n) for n in range(messages)]
    assert cluster.nsqd.http("POST", f"/mpub?topic={topic}", b"\n".join(bodies))[0] == 200
    a = await WireClient.connect(cluster.nsqd.tcp_address)
    b: WireClient | None = None
    try:
        await a.subscribe(topic, CHANNEL, rdy=rdy, heartbeat_interval=int(HEARTBEAT_INTERVAL * 1000))
        a_port = a.writer.get_extra_info("sockname")[1]
        received = await a.read_messages(rdy)
        for message in received[:fin]:
            await a.command(b"FIN", message.id)
        before = await wait_for_async(lambda: _settled(cluster.nsqd, topic, fin, rdy),
                                      what=f"nsqd counting {fin} finished and {rdy} in flight")
        cluster.net.cut("nsqd", ROOT, port=a_port)
        cut_at = time.monotonic()
        try:
            b = await WireClient.connect(cluster.nsqd.tcp_address)
            await b.subscribe(topic, CHANNEL, rdy=rdy)
            finished = {message.body for message in received[:fin]}
            tally = Tally(acknowledged=bodies, received=[message.body for message in received])
            dead_after = await _take_the_rest(cluster, b, topic, finished, tally, a_port, cut_at)
        finally:
            cluster.net.heal("nsqd", ROOT, port=a_port)
        after = cluster.nsqd.channel_stats(topic, CHANNEL)
        return Batch(tally, rdy, after["timeout_count"] - before["timeout_count"], dead_after)
    finally:
        a.writer.transport.abort()  # its peer is gone: nothing to flush
        if b is not None:
            await b.close()


async def _take_the_rest(cluster: Cluster, b: WireClient, topic: str, finished: set[bytes], tally: Tally,
                         a_port: int, cut_at: float) -> float:
    """B FINs what comes until every body is finished; returns when nsqd dropped A from /stats (measured from
    ``cut_at``), once both happened."""
    dead_after: float | None = None
    deadline = time.monotonic() + 30
    while not (finished >= set(tally.acknowledged) and dead_after is not None):
        assert time.monotonic() < deadline, (f"{len(set(tally.acknowledged) - finished)} messages not finished, "
                                             f"cut consumer still listed: {dead_after is None}")
        if dead_after is None and not _lists_client(cluster.nsqd, topic, a_port):
            dead_after = time.monotonic() - cut_at
        try:
            message = await b.read_message(timeout=0.1)
        except asyncio.TimeoutError:
            continue
        tally.received.append(message.body)
        finished.add(message.body)
        await b.command(b"FIN", message.id)
    return dead_after


def _settled(nsqd: NSQDProcess, topic: str, finished: int, in_flight: int) -> dict[str, Any] | None:
    stats = nsqd.channel_stats(topic, CHANNEL)
    done = stats and stats["message_count"] - stats["depth"] - stats["in_flight_count"] == finished
    return stats if done and stats["in_flight_count"] == in_flight else None


def _lists_client(nsqd: NSQDProcess, topic: str, port: int) -> bool:
    clients = nsqd.channel_stats(topic, CHANNEL).get("clients") or []
    return any(client["remote_address"].endswith(f":{port}") for client in clients)


def summary(figures: Iterable[float], digits: int = 1) -> str:
    values = sorted(figures)
    if not values:
        return "-"
    return (f"min {values[0]:.{digits}f} s, median {values[len(values) // 2]:.{digits}f} s, "
            f"max {values[-1]:.{digits}f} s")
