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

from ..message import ATTEMPTS, ID, QueuedMessage
from ..topic import ReplicationError
from .in_sync import Fenced
from .mirror_link import MirrorLink
from .wire import (
    Distribute,
    DropChannel,
    DropTopic,
    Finish,
    Messages,
    Publish,
    Record,
    Requeue,
    Snapshot,
    SnapshotEnd,
    encode,
)

log = logging.getLogger("nsqd")


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
        self._flushing = False  # the links write this turn's records at its end

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
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        """This turn's records out, one write per mirror."""
        self._flushing = False
        for link in self.links.values():
            link.flush()

    def _next(self) -> int:
        self.sequence += 1
        return self.sequence

    # -- what happens to the queues ---------------------------------------------------------------------------

    def published(self, topic: str, channels: tuple[str, ...], defer_ms: int, entries: list[QueuedMessage],
                  retain: tuple[int, int] | None = None) -> Awaitable[None]:
        """Done once enough copies hold the publish; ReplicationError if there are too few. ``retain``: the topic
        retains it (its retention time in nanoseconds and bytes), and so do the mirrors."""
        sequence = self._next()
        self._record(Publish(sequence, topic, channels, defer_ms, Messages.of(entries), retain))
        return self._copies(sequence)

    def record_history(self, topic: str, retain: tuple[int, int], defer_ms: int, entries: list[QueuedMessage]) -> None:
        """Messages the topic retains, to be retained by the mirrors too, in no queue (a lost nsqd's history), and
        how long after their timestamp a deferred publish among them is due."""
        self._record(Publish(self._next(), topic, (), defer_ms, Messages.of(entries), retain, history=True))

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
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[None] = loop.create_future()
        if self.fenced:
            self._fail(answer, f"epoch {self.epoch} is over: another nsqd took this one's place")
            return answer
        in_sync = sum(link.in_sync for link in self.links.values())
        if in_sync + 1 < self.min_in_sync:
            self._fail(answer, f"{in_sync + 1} of {self.min_in_sync} in-sync replicas")
        elif in_sync:
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
