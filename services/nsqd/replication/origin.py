"""This nsqd as an origin: what happens to its queues, as records, numbered and sent to each of its mirrors, and
a publish's acknowledgement held until its mirrors hold it.

A mirror is *in sync* while it holds every record of this origin's epoch that the origin has sent and
acknowledges them within ``--replication-timeout``. A publish is answered once every in-sync mirror acknowledged
it; a mirror that does not in time falls out of the set, and a publish that leaves fewer than
``--replication-min-in-sync`` copies (this nsqd's own included) is refused (E_PUB_FAILED, HTTP 500), though this
nsqd keeps it, as it keeps a publish refused half-way through its channels today: a retry makes a duplicate,
never a loss. The set is recorded in etcd (``record_in_sync``): a mirror that fell out is removed there before a
publish it did not acknowledge is answered, and a publish is refused if that record cannot be written, if another
nsqd wrote it (``Fenced``: this origin's epoch is over, and nothing more is acknowledged under it), or if this
nsqd's lease in etcd may have ended (``lease_holds``), since the cluster may then be adopting its messages. A mirror that fell behind is sent what it missed (records stay buffered until every mirror has them,
up to ``MAX_UNACKED_BYTES``) and counts again once it has everything. One that lacks records no longer buffered
(it joined late, restarted empty, or the buffer overflowed) is sent a snapshot instead: everything the origin has
outstanding as of its newest record, then the records that follow; it counts once it acknowledged them.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import NoReturn

from shared.addresses import split_host_port

from ..message import QueuedMessage
from .in_sync import Fenced
from .wire import (MAGIC, Ack, Distribute, DropChannel, DropTopic, Finish, FrameReader, Hello, Messages, Publish,
                   Record, Refuse, Snapshot, SnapshotEnd, WireError, encode)

log = logging.getLogger("nsqd")

MAX_UNACKED_BYTES = 256 * 1024 * 1024
RECONNECT = 1.0  # seconds between attempts to reach a mirror


class ReplicationError(Exception):
    """Too few copies to acknowledge a publish."""


class MirrorLink:
    """The link to one mirror: records go out in order, and the mirror's acknowledgements say how far it holds
    them."""

    def __init__(self, origin: str, epoch: int, mirror: str, address: str, next_sequence: int,
                 latest: Callable[[], int], on_in_sync: Callable[[], None] = lambda: None,
                 snapshot: Callable[[], list[bytes]] = lambda: []) -> None:
        self.origin = origin
        self.epoch = epoch
        self.mirror = mirror
        self.address = address
        self.acked = next_sequence - 1
        # whether the mirror can have everything outstanding here: not until it was sent a snapshot, since even
        # at an epoch's first record this nsqd may hold messages (from its disk, or from before the epoch)
        self.complete = False
        self.in_sync = False
        self.connected = False
        self._unacked: deque[tuple[int, bytes]] = deque()
        self._unacked_bytes = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_count = 0
        self._writer: asyncio.StreamWriter | None = None
        self._task: asyncio.Task[None] | None = None
        self._latest = latest  # the number of the origin's newest record
        self._on_in_sync = on_in_sync
        self._snapshot = snapshot  # the origin's outstanding messages as of now, as frames ending the snapshot

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mirror-link-{self.mirror}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
        self._fail_waiters()

    def send(self, sequence: int, frame: bytes) -> None:
        if not self.complete:
            return
        self._unacked.append((sequence, frame))
        self._unacked_bytes += len(frame)
        if self._unacked_bytes > MAX_UNACKED_BYTES:
            log.error("REPLICATION: %s is %d bytes behind: no longer a complete mirror of this epoch",
                      self.mirror, self._unacked_bytes)
            self._lose_records()
            return
        if self._writer is not None:
            self._writer.write(frame)

    def acknowledged(self, sequence: int) -> asyncio.Future[None]:
        """Done once the mirror holds every record up to ``sequence``."""
        waiter = asyncio.get_running_loop().create_future()
        if self.acked >= sequence:
            waiter.set_result(None)
        else:
            self._waiter_count += 1
            heapq.heappush(self._waiters, (sequence, self._waiter_count, waiter))
        return waiter

    def fall_out(self) -> None:
        if self.in_sync:
            log.warning("REPLICATION: %s out of sync (acknowledged %d)", self.mirror, self.acked)
        self.in_sync = False

    def _lose_records(self) -> None:
        self.complete = False
        self.in_sync = False
        self._unacked.clear()
        self._unacked_bytes = 0
        self._fail_waiters()
        if self._writer is not None:
            self._writer.close()

    def _fail_waiters(self) -> None:
        for _, _, waiter in self._waiters:
            if not waiter.done():
                waiter.cancel()
        self._waiters.clear()

    def _acked(self, sequence: int, latest: int) -> None:
        self.acked = max(self.acked, sequence)
        while self._unacked and self._unacked[0][0] <= sequence:
            self._unacked_bytes -= len(self._unacked.popleft()[1])
        while self._waiters and self._waiters[0][0] <= sequence:
            waiter = heapq.heappop(self._waiters)[2]
            if not waiter.done():
                waiter.set_result(None)
        if not self.in_sync and self.complete and self.acked >= latest:
            self.in_sync = True
            log.info("REPLICATION: %s in sync at record %d", self.mirror, self.acked)
            self._on_in_sync()

    async def _run(self) -> None:
        while True:
            try:
                await self._serve()
            except (OSError, WireError, asyncio.IncompleteReadError) as error:
                log.warning("REPLICATION: link to %s (%s): %s", self.mirror, self.address, error)
            finally:
                self._writer, self.connected = None, False
                self.fall_out()
            await asyncio.sleep(RECONNECT)

    async def _serve(self) -> None:
        host, port = split_host_port(self.address)
        reader, writer = await asyncio.open_connection(host, port)
        try:
            first = self._unacked[0][0] if self._unacked else self.acked + 1
            writer.write(MAGIC + encode(Hello(self.origin, self.epoch, first)))
            frames = FrameReader()
            hello_answered = False
            while True:
                data = await reader.read(65536)
                if not data:
                    raise OSError("closed by the mirror")
                for frame in frames.feed(data):
                    if isinstance(frame, Refuse):
                        raise WireError(f"refused: {frame.reason}")
                    if not isinstance(frame, Ack):
                        raise WireError(f"unexpected {type(frame).__name__}")
                    if not hello_answered:
                        hello_answered = True
                        if self._resume(frame.sequence, first, writer):
                            continue  # the mirror's next acknowledgement is the snapshot's
                    self._acked(frame.sequence, self._latest())
        finally:
            writer.close()

    def _resume(self, applied: int, first: int, writer: asyncio.StreamWriter) -> bool:
        """The mirror holds every record up to ``applied``: what it lacks is sent again, or, where it lacks records
        no longer buffered (or was never sent a snapshot), a snapshot; whether it was."""
        if applied < first - 1:
            log.warning("REPLICATION: %s holds records up to %d only, %d and on are gone here: sending it a "
                        "snapshot", self.mirror, applied, applied + 1)
            self._lose_records()
        self.connected = True
        self._writer = writer
        if not self.complete:
            frames = self._snapshot()
            writer.write(b"".join(frames))
            self.complete = True  # what follows is buffered and sent after the snapshot
            log.info("REPLICATION: linked to %s (%s), sent a snapshot (%d frames)", self.mirror, self.address,
                     len(frames))
            return True
        for sequence, frame in self._unacked:
            if sequence > applied:
                writer.write(frame)
        log.info("REPLICATION: linked to %s (%s) from record %d", self.mirror, self.address, applied + 1)
        return False


class Origin:
    def __init__(self, node: str, epoch: int, min_in_sync: int, timeout: float) -> None:
        self.node = node
        self.epoch = epoch
        self.min_in_sync = min_in_sync
        self.timeout = timeout
        self.sequence = 0
        self.links: dict[str, MirrorLink] = {}
        self.refused = 0  # publishes refused for want of copies
        # where the in-sync set is recorded (etcd), and whether this nsqd is surely still a member of the cluster
        self.record_in_sync: Callable[[int, frozenset[str]], Awaitable[None]] | None = None
        self.lease_holds: Callable[[], bool] = lambda: True
        self.recorded: frozenset[str] = frozenset()  # the in-sync set as last recorded
        # what this nsqd has outstanding now, as publishes (their sequence is ignored), for a mirror's snapshot
        self.outstanding: Callable[[], list[Publish]] = lambda: []
        self.fenced = False  # another nsqd wrote the record: nothing more is acknowledged under this epoch
        self._recordings: set[asyncio.Task[None]] = set()

    def set_mirrors(self, mirrors: dict[str, str]) -> Iterable[Awaitable[None]]:
        """Links to ``mirrors`` (node: replication address) from now on; the links no longer wanted are closed
        (await what is returned)."""
        stopping = [self.links.pop(node).stop() for node in list(self.links) if node not in mirrors]
        for node, address in mirrors.items():
            if node not in self.links:
                link = MirrorLink(self.node, self.epoch, node, address, self.sequence + 1, lambda: self.sequence,
                                  self._mirror_in_sync, self._snapshot)
                self.links[node] = link
                link.start()
        return stopping

    def _snapshot(self) -> list[bytes]:
        sequence = self.sequence
        return [encode(Snapshot(sequence, part)) for part in self.outstanding()] + [encode(SnapshotEnd(sequence))]

    def _record(self, record: Record) -> None:
        frame = encode(record)
        for link in self.links.values():
            link.send(record.sequence, frame)

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    # -- what happens to the queues ---------------------------------------------------------------------------

    def published(self, topic: str, channels: tuple[str, ...], defer_ms: int,
                  entries: list[QueuedMessage]) -> Awaitable[None]:
        """Done once enough copies hold the publish; ReplicationError if there are too few."""
        sequence = self._next()
        self._record(Publish(sequence, topic, channels, defer_ms, Messages.of(entries)))
        return self._copies(sequence)

    def distributed(self, topic: str, channels: tuple[str, ...]) -> None:
        self._record(Distribute(self._next(), topic, channels))

    def finished(self, topic: str, channel: str, ids: list[bytes]) -> None:
        self._record(Finish(self._next(), topic, channel, tuple(ids)))

    def channel_dropped(self, topic: str, channel: str) -> None:
        self._record(DropChannel(self._next(), topic, channel))

    def topic_dropped(self, topic: str, held_only: bool) -> None:
        self._record(DropTopic(self._next(), topic, held_only))

    async def _copies(self, sequence: int) -> None:
        if self.fenced:
            self._refuse(f"epoch {self.epoch} is over: another nsqd took this one's place")
        in_sync = [link for link in self.links.values() if link.in_sync]
        if len(in_sync) + 1 < self.min_in_sync:
            self._refuse(f"{len(in_sync) + 1} of {self.min_in_sync} in-sync replicas")
        acknowledged: set[str] = set()
        if in_sync:
            waits = {link.acknowledged(sequence): link for link in in_sync}
            done, late = await asyncio.wait(waits, timeout=self.timeout)
            for waiter in late:
                waiter.cancel()
                waits[waiter].fall_out()
            acknowledged = {waits[waiter].mirror for waiter in done if not waiter.cancelled()}  # cancelled: closed
            if len(acknowledged) + 1 < self.min_in_sync:
                self._refuse(f"{len(acknowledged) + 1} of {self.min_in_sync} replicas acknowledged within "
                             f"{self.timeout:g}s")
        if self.record_in_sync is not None and not self._recorded_copies(sequence):
            # the set etcd holds (the mirrors that may take over) lacks it, or is too small: recorded anew first
            try:
                await self._record_in_sync()
            except Exception as error:
                self._refuse(f"the in-sync set could not be recorded: {error}")
            if not self._recorded_copies(sequence):
                self._refuse(f"{len(self.recorded) + 1} of {self.min_in_sync} recorded in-sync replicas")
        if not self.lease_holds():
            self._refuse("this nsqd's lease in etcd may have ended")

    def _recorded_copies(self, sequence: int) -> bool:
        """Whether every mirror recorded in sync holds record ``sequence``, and they are enough copies."""
        links = self.links
        return len(self.recorded) + 1 >= self.min_in_sync and all(
            mirror in links and links[mirror].acked >= sequence for mirror in self.recorded)

    def _refuse(self, reason: str) -> NoReturn:
        self.refused += 1
        raise ReplicationError(reason)

    async def _record_in_sync(self) -> None:
        """Records the links in sync now (if the record is not that already)."""
        if self.record_in_sync is None:  # nowhere to record it (tests of the links alone)
            return
        in_sync = frozenset(link.mirror for link in self.links.values() if link.in_sync)
        if in_sync == self.recorded:
            return
        try:
            await self.record_in_sync(self.epoch, in_sync)
        except Fenced:
            if not self.fenced:
                log.error("REPLICATION: the in-sync set of %s was written by another nsqd: epoch %d is over, "
                          "nothing more is acknowledged under it", self.node, self.epoch)
            self.fenced = True
            raise
        self.recorded = in_sync

    def _mirror_in_sync(self) -> None:
        """A mirror caught up: recorded in the set, in the background (it only adds a copy)."""
        task = asyncio.ensure_future(self._record_quietly())
        self._recordings.add(task)
        task.add_done_callback(self._recordings.discard)

    async def _record_quietly(self) -> None:
        try:
            await self._record_in_sync()
        except Exception as error:
            log.warning("REPLICATION: recording the in-sync set of %s: %s", self.node, error)

    async def restart(self, epoch: int) -> None:
        """A new epoch (this nsqd registered again): every link starts over, and records are numbered from 1."""
        await asyncio.gather(*self.set_mirrors({}))
        for task in list(self._recordings):
            await asyncio.wait({task})
        self.epoch = epoch
        self.sequence = 0
        self.fenced = False
        self.recorded = frozenset()
