"""This nsqd as an origin: what happens to its queues, as records, numbered and sent to each of its mirrors, and
a publish's acknowledgement held until its mirrors hold it.

A mirror is *in sync* while it holds every record of this origin's epoch that the origin has sent and
acknowledges them within ``--replication-timeout``. A publish is answered once every in-sync mirror acknowledged
it (publishes wait in one queue, answered as acknowledgements arrive); a mirror that does not in time falls out of
the set, and a publish that leaves fewer than ``--replication-min-in-sync`` copies (this nsqd's own included) is
refused (E_PUB_FAILED, HTTP 500), though this nsqd keeps it, as it keeps a publish refused half-way through its
channels: a retry makes a duplicate, never a loss. The set is recorded in etcd (``record_in_sync``): a mirror that
fell out is removed there before a publish it did not acknowledge is answered, and a publish is refused if that
record cannot be written, if another nsqd wrote it (``Fenced``: this origin's epoch is over, and nothing more is
acknowledged under it), or if this nsqd's lease in etcd may have ended (``lease_holds``), since the cluster may
then be adopting its messages.

A mirror that fell behind is sent what it missed (records stay buffered until every mirror has them, up to
``MAX_UNACKED_BYTES``) and counts again once it has everything. One that lacks records no longer buffered (it
joined late, restarted empty, or the buffer overflowed) is sent a snapshot instead: everything the origin has
outstanding as of its newest record, made on a thread, then the records that follow; it counts once it
acknowledged them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import cast

from nsqclient.addresses import split_host_port

from ..message import ATTEMPTS, ID, QueuedMessage
from ..topic import ReplicationError
from .in_sync import Fenced
from .wire import (
    MAGIC,
    Ack,
    Distribute,
    DropChannel,
    DropTopic,
    Finish,
    FrameReader,
    Hello,
    Messages,
    Publish,
    Record,
    Refuse,
    Requeue,
    Snapshot,
    SnapshotEnd,
    WireError,
    encode,
)

log = logging.getLogger("nsqd")

MAX_UNACKED_BYTES = 256 * 1024 * 1024
RECONNECT = 1.0  # seconds between attempts to reach a mirror


class MirrorLink:
    """The link to one mirror: records go out in order, and the mirror's acknowledgements say how far it holds
    them. The records of one turn of the event loop go out in one write."""

    def __init__(self, origin: str, epoch: int, mirror: str, address: str, next_sequence: int,
                 latest: Callable[[], int], on_change: Callable[[], None] = lambda: None,
                 on_in_sync: Callable[[], None] = lambda: None,
                 snapshot: Callable[[], Callable[[], list[bytes]]] = lambda: list) -> None:
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
        self._transport: asyncio.Transport | None = None  # once the mirror answered the hello (and has its snapshot)
        self._sending: asyncio.Future[None] | None = None  # a snapshot being made and sent
        # a snapshot went out (or is being made) and the mirror has not acknowledged anything since: a link that
        # breaks meanwhile sends it again
        self._snapshot_unconfirmed = False
        self._outbox: list[bytes] = []  # records of this turn, not written yet
        self._task: asyncio.Task[None] | None = None
        self._latest = latest  # the number of the origin's newest record
        self._on_change = on_change  # told when what the mirror acknowledged, or whether it is in sync, changed
        self._on_in_sync = on_in_sync
        # the origin's outstanding messages as of now, as a job that makes the snapshot's frames (on any thread)
        self._snapshot = snapshot

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mirror-link-{self.mirror}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})

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
        if self._transport is not None:
            if not self._outbox:
                asyncio.get_running_loop().call_soon(self._flush)
            self._outbox.append(frame)

    def _flush(self) -> None:
        outbox, self._outbox = self._outbox, []
        if self._transport is not None and outbox:
            self._transport.write(outbox[0] if len(outbox) == 1 else b"".join(outbox))

    def fall_out(self) -> None:
        if self.in_sync:
            log.warning("REPLICATION: %s out of sync (acknowledged %d)", self.mirror, self.acked)
        self.in_sync = False

    def _lose_records(self) -> None:
        self.complete = False
        self.in_sync = False
        self._unacked.clear()
        self._unacked_bytes = 0
        if self._transport is not None:
            self._transport.close()
        self._on_change()

    def _acked(self, sequence: int, latest: int) -> None:
        self._snapshot_unconfirmed = False  # a mirror acknowledges nothing until its snapshot is whole
        self.acked = max(self.acked, sequence)
        while self._unacked and self._unacked[0][0] <= sequence:
            self._unacked_bytes -= len(self._unacked.popleft()[1])
        if not self.in_sync and self.complete and self.acked >= latest:
            self.in_sync = True
            log.info("REPLICATION: %s in sync at record %d", self.mirror, self.acked)
            self._on_in_sync()
        self._on_change()

    async def _run(self) -> None:
        while True:
            try:
                await self._serve()
            except (OSError, WireError) as error:
                log.warning("REPLICATION: link to %s (%s): %s", self.mirror, self.address, error)
            finally:
                self._disconnected()
            await asyncio.sleep(RECONNECT)

    def _disconnected(self) -> None:
        self._transport, self._outbox, self.connected = None, [], False
        if self._snapshot_unconfirmed:
            self._snapshot_unconfirmed = False
            if self._sending is not None:
                self._sending.cancel()
            self._lose_records()
        if self.in_sync:
            self.fall_out()
            self._on_change()

    async def _serve(self) -> None:
        host, port = split_host_port(self.address)
        first = self._unacked[0][0] if self._unacked else self.acked + 1
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        transport, _ = await loop.create_connection(lambda: _LinkProtocol(self, first, ended), host, port)
        try:
            await ended
        finally:
            transport.close()

    def _resume(self, applied: int, first: int, transport: asyncio.Transport) -> None:
        """The mirror holds every record up to ``applied``: what it lacks is sent again, or, where it lacks records
        no longer buffered (or was never sent a snapshot), a snapshot."""
        if applied < first - 1:
            log.warning("REPLICATION: %s holds records up to %d only, %d and on are gone here: sending it a "
                        "snapshot", self.mirror, applied, applied + 1)
            self._lose_records()
        self.connected = True
        if not self.complete:
            job = self._snapshot()  # what memory holds is copied now; the disk queues are read by the job
            self.complete = True  # what follows is buffered, and sent after the snapshot
            self._snapshot_unconfirmed = True
            self._sending = asyncio.ensure_future(self._send_snapshot(job, transport))
            return
        self._transport = transport
        transport.write(b"".join(frame for sequence, frame in self._unacked if sequence > applied))
        log.info("REPLICATION: linked to %s (%s) from record %d", self.mirror, self.address, applied + 1)

    async def _send_snapshot(self, job: Callable[[], list[bytes]], transport: asyncio.Transport) -> None:
        """The snapshot, made on a thread so that reading the disk queues holds nothing else up, then every record
        since."""
        try:
            frames = await asyncio.get_running_loop().run_in_executor(None, job)
        except Exception as error:  # a disk that fails a read: the link starts over, and so does the snapshot
            log.error("REPLICATION: a snapshot for %s: %s", self.mirror, error)
            transport.close()
            return
        if transport.is_closing():
            return
        transport.write(b"".join(frames))
        transport.write(b"".join(frame for _, frame in self._unacked))
        self._transport = transport
        log.info("REPLICATION: linked to %s (%s), sent a snapshot (%d frames)", self.mirror, self.address,
                 len(frames))


class _LinkProtocol(asyncio.Protocol):
    """The link's connection: the hello out, the mirror's acknowledgements in; ``ended`` fails with what ended it."""

    def __init__(self, link: MirrorLink, first: int, ended: asyncio.Future[None]) -> None:
        self._link = link
        self._first = first
        self._ended = ended
        self._frames = FrameReader()
        self._answered = False
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        link = self._link
        self._transport.write(MAGIC + encode(Hello(link.origin, link.epoch, self._first)))

    def data_received(self, data: bytes) -> None:
        link = self._link
        try:
            for frame in self._frames.feed(data):
                if isinstance(frame, Refuse):
                    raise WireError(f"refused: {frame.reason}")
                if not isinstance(frame, Ack):
                    raise WireError(f"unexpected {type(frame).__name__}")
                if self._answered:
                    link._acked(frame.sequence, link._latest())
                else:  # the hello's answer: where the mirror got to
                    self._answered = True
                    assert self._transport is not None
                    link._resume(frame.sequence, self._first, self._transport)
        except WireError as error:
            self._end(error)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or OSError("closed by the mirror"))

    def _end(self, error: Exception) -> None:
        if not self._ended.done():
            self._ended.set_exception(error)
            self._link._disconnected()  # at once: publishes waiting for this mirror go on without it
        if self._transport is not None:
            self._transport.close()


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
        # what this nsqd has outstanding now, for a mirror's snapshot: a job, run on a thread, that lists it as
        # publishes (their sequence is ignored)
        self.outstanding: Callable[[], Callable[[], list[Publish]]] = lambda: list
        self.fenced = False  # another nsqd wrote the record: nothing more is acknowledged under this epoch
        self._recordings: set[asyncio.Task[None]] = set()
        # publishes waiting for their copies, oldest first: (sequence, answer, deadline on the loop's clock)
        self._waiting: deque[tuple[int, asyncio.Future[None], float]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def set_mirrors(self, mirrors: dict[str, str]) -> Iterable[Awaitable[None]]:
        """Links to ``mirrors`` (node: replication address) from now on; the links no longer wanted are closed
        (await what is returned)."""
        stopping = [self.links.pop(node).stop() for node in list(self.links) if node not in mirrors]
        for node, address in mirrors.items():
            if node not in self.links:
                link = MirrorLink(self.node, self.epoch, node, address, self.sequence + 1, lambda: self.sequence,
                                  self._links_changed, self._mirror_in_sync, self._snapshot)
                self.links[node] = link
                link.start()
        if stopping:
            self._release()
        return stopping

    def _snapshot(self) -> Callable[[], list[bytes]]:
        sequence, outstanding = self.sequence, self.outstanding()

        def frames() -> list[bytes]:
            return [encode(Snapshot(sequence, part)) for part in outstanding()] + [encode(SnapshotEnd(sequence))]
        return frames

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

    def requeued(self, topic: str, channel: str, entry: QueuedMessage, due: int) -> None:
        self._record(Requeue(self._next(), topic, channel, entry[ID], entry[ATTEMPTS], due))

    def record_publish(self, topic: str, channels: tuple[str, ...], defer_ms: int,
                       entries: list[QueuedMessage]) -> None:
        """Messages moved between queues (nothing waits for their copies)."""
        self._record(Publish(self._next(), topic, channels, defer_ms, Messages.of(entries)))

    def channel_dropped(self, topic: str, channel: str) -> None:
        self._record(DropChannel(self._next(), topic, channel))

    def topic_dropped(self, topic: str, held_only: bool) -> None:
        self._record(DropTopic(self._next(), topic, held_only))

    def _copies(self, sequence: int) -> asyncio.Future[None]:
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fenced:
            self._fail(answer, f"epoch {self.epoch} is over: another nsqd took this one's place")
            return answer
        in_sync = sum(link.in_sync for link in self.links.values())
        if in_sync + 1 < self.min_in_sync:
            self._fail(answer, f"{in_sync + 1} of {self.min_in_sync} in-sync replicas")
        elif in_sync:
            loop = asyncio.get_running_loop()
            self._waiting.append((sequence, answer, loop.time() + self.timeout))
            if self._timer is None:
                self._timer = loop.call_at(self._waiting[0][2], self._time_out)
        else:
            self._settle(sequence, answer, timed_out=False)
        return answer

    def _links_changed(self) -> None:
        """A mirror acknowledged more, or came into or fell out of sync: publishes may have their copies now."""
        if self._waiting:
            self._release()

    def _release(self) -> None:
        """Answers the publishes that every mirror in sync now holds (all of them, when none is in sync)."""
        waiting = self._waiting
        held = min((link.acked for link in self.links.values() if link.in_sync), default=self.sequence)
        while waiting and waiting[0][0] <= held:
            sequence, answer, _ = waiting.popleft()
            self._settle(sequence, answer, timed_out=False)

    def _time_out(self) -> None:
        """The oldest publishes waited ``timeout``: the mirrors in sync that do not hold them yet fall out."""
        self._timer = None
        waiting, loop = self._waiting, asyncio.get_running_loop()
        while waiting and waiting[0][2] <= loop.time():
            sequence, answer, _ = waiting.popleft()
            for link in self.links.values():
                if link.in_sync and link.acked < sequence:
                    link.fall_out()
            self._settle(sequence, answer, timed_out=True)
        self._release()
        if waiting:
            self._timer = loop.call_at(waiting[0][2], self._time_out)

    def _settle(self, sequence: int, answer: asyncio.Future[None], timed_out: bool) -> None:
        """Answers a publish whose mirrors in sync all hold it (or are gone from the set)."""
        if answer.done():  # the client went away
            return
        copies = 1 + sum(link.in_sync and link.acked >= sequence for link in self.links.values())
        if copies < self.min_in_sync:
            within = f" within {self.timeout:g}s" if timed_out else ""
            return self._fail(answer, f"{copies} of {self.min_in_sync} replicas acknowledged{within}")
        if self.record_in_sync is not None and not self._recorded_copies(sequence):
            # the set etcd holds (the mirrors that may take over) lacks it, or is too small: recorded anew first
            task = asyncio.ensure_future(self._record_then_settle(sequence, answer))
            self._recordings.add(task)
            task.add_done_callback(self._recordings.discard)
            return
        self._answer(answer)

    async def _record_then_settle(self, sequence: int, answer: asyncio.Future[None]) -> None:
        try:
            await self._record_in_sync()
        except Exception as error:
            return self._fail(answer, f"the in-sync set could not be recorded: {error}")
        if not self._recorded_copies(sequence):
            return self._fail(answer, f"{len(self.recorded) + 1} of {self.min_in_sync} recorded in-sync replicas")
        self._answer(answer)

    def _answer(self, answer: asyncio.Future[None]) -> None:
        if self.fenced:
            self._fail(answer, f"epoch {self.epoch} is over: another nsqd took this one's place")
        elif not self.lease_holds():
            self._fail(answer, "this nsqd's lease in etcd may have ended")
        elif not answer.done():
            answer.set_result(None)

    def _recorded_copies(self, sequence: int) -> bool:
        """Whether every mirror recorded in sync holds record ``sequence``, and they are enough copies."""
        links = self.links
        return len(self.recorded) + 1 >= self.min_in_sync and all(
            mirror in links and links[mirror].acked >= sequence for mirror in self.recorded)

    def _fail(self, answer: asyncio.Future[None], reason: str) -> None:
        self.refused += 1
        if not answer.done():
            answer.set_exception(ReplicationError(reason))

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
