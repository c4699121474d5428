"""A channel: its own copy of every message of its topic, shared out among the consumers subscribed to it.

Invariants:
- a message is in exactly one place: the channel's queue (memory, then disk), in flight (delivered, owned by one
  consumer) or deferred (in the queue's deferred store);
- a consumer receives only while it has room (``Consumer.room``: RDY is a window, not a counter);
- delivery goes to the ``ready`` consumers (consumers.py), never a scan of all of them.
Depth counts the queue (memory and disk) and what a rewind under way still puts back (rewind_cursor.py, read once
the queue is empty); in-flight and deferred messages are reported apart, as NSQ does. What the queue does with a
message is its kind's business (message_queue.py): the channel never asks which kind it has.

A message older than the TTL (``ttl_ns``: ``--msg-ttl`` or the topic's) is dropped and counted (``expired_count``)
when it is taken to be delivered; one delivered ``max_attempts`` times already (``--max-attempts`` or the channel's
own) is parked in the channel's dead-letter queue instead, as an expired one is with an attempts limit, until it is
replayed or emptied. The channel sees its consumers only as ``Consumer``, which tells it when it gains room
(``update_ready``); what becomes of its messages is told to its recorder (recorder.py), which storage chose.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from nsqclient.protocol.names import is_ephemeral

from . import topology
from .consumers import Consumer, ReadyConsumers, per_output_buffer, sampled_out
from .deadline_queue import DeadlineQueue
from .latency_window import LatencyWindow
from .message import ATTEMPTS, BODY, ID, TIMESTAMP, InFlightMessage, QueuedMessage, decode
from .recorder import Outstanding
from .rewind_cursor import NO_REWIND

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from .options import Options
    from .recorder import ChannelRecorder
    from .rewind_cursor import RewindCursor, Rewinding
    from .storage import Storage


class ChannelError(Exception):
    """FIN/REQ/TOUCH on a message the client cannot act on, or a SUB the channel refuses."""


class Channel:
    def __init__(self, topic_name: str, name: str, opts: Options, storage: Storage, recorder: ChannelRecorder,
                 on_last_client_gone: Callable[[Channel], None]) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.queue = storage.open_channel(f"{topic_name}:{name}")
        self.deferred = self.queue.deferred
        # "t:dead:c": no channel's name has a colon, so nothing mistakes it for one
        self.dead_letters = storage.open_dead_letters(f"{topic_name}:dead:{name}")
        self.max_attempts = opts.max_attempts
        self.own_max_attempts: int | None = None  # kept in nsqd.dat; None: --max-attempts
        self.paused = False
        self.exiting = False
        self.in_flight: DeadlineQueue[InFlightMessage] = DeadlineQueue()
        self.rewinding: Rewinding = NO_REWIND  # what a rewind still puts back once the queue is empty
        self.clients: dict[int, Consumer] = {}
        self.ready = ReadyConsumers(topology.enabled(opts))
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.expired_count = 0
        self.dead_letter_count = 0
        self.ttl_ns = round(opts.msg_ttl * 1e9)  # the topic sets its own
        self._opts = opts
        self._on_last_client_gone = on_last_client_gone
        self.recorder = recorder
        # what a cap with drop-oldest drops is done with, as a finish is
        self.queue.report_drops(lambda ids: self.recorder.finished(ids))
        self.dead_letters.report_drops(lambda ids: self.recorder.dead_letters_dropped(ids))
        self.e2e: LatencyWindow | None = None
        if opts.e2e_processing_latency_percentiles:
            self.e2e = LatencyWindow(opts.e2e_processing_latency_percentiles,
                                     opts.e2e_processing_latency_window_time, time.monotonic())

    def __repr__(self) -> str:
        return f"Channel({self.topic_name}:{self.name})"

    @property
    def depth(self) -> int:
        return len(self.queue) + self.rewinding.remaining

    @property
    def backend_depth(self) -> int:
        return self.queue.backend_depth

    @property
    def dropped_count(self) -> int:
        return self.queue.dropped_count

    # -- messages in ---------------------------------------------------------------------------------------

    def publish(self, entries: list[QueuedMessage]) -> None:
        """A publish's copies, not acknowledged yet: delivered, or queued; if the queue refuses them, OSError (or
        QueueFull) is raised and they are not this channel's."""
        queued = self.queue.accept(entries, self._deliver_now)
        self.message_count += len(entries)
        if queued and self.ready:
            self._drain()  # what was queued goes to the consumers with room (a disk-through queue's: all of it)

    def publish_deferred(self, entry: QueuedMessage, delay: float, now: float) -> None:
        """A DPUB's copy, not acknowledged yet, delivered once ``delay`` is over; OSError if the disk refuses it."""
        self.queue.defer_published(entry, now + delay)
        self.message_count += 1

    def put_held(self, entries: list[QueuedMessage]) -> None:
        """Messages the topic held (acknowledged already): delivered, or queued."""
        self.message_count += len(entries)
        self._put_all(entries)

    def put_deferred(self, entry: QueuedMessage, delay: float, now: float) -> None:
        """A DPUB's copy the topic held, delivered once ``delay`` is over."""
        self.queue.defer(entry, now + delay)
        self.message_count += 1

    def put_from_disk(self, records: list[bytes]) -> None:
        """Messages from the topic's disk queue, as records (size prefix included). What the consumers can take now
        or memory can hold is decoded; the rest goes to this channel's disk queue as it is, never decoded."""
        room = self.queue.room + self.room_in_clients()
        if room:
            self.put_held([decode(record, 4) for record in records[:room]])
        if len(records) > room:
            self.message_count += len(records) - room
            self.queue.put_records(records[room:])
            self._drain()

    def add(self, entries: list[QueuedMessage], defer_ms: int) -> Awaitable[None] | None:
        """Messages nsqd puts into the channel itself (taken over from a lost nsqd, put back from history): queued,
        or deferred ``defer_ms``; what their acknowledgement waits for, if anything (the recorder's)."""
        if defer_ms:
            now = time.monotonic()
            for entry in entries:
                self.put_deferred(entry, defer_ms / 1000, now)
        else:
            self.put_held(entries)
        return self.recorder.added(entries, defer_ms)

    def add_dead_letters(self, entries: list[QueuedMessage]) -> Awaitable[None] | None:
        """Dead letters nsqd puts there itself (taken over from a lost nsqd)."""
        self.dead_letters.put(entries)
        return self.recorder.dead_letters_added(entries)

    def put(self, entry: QueuedMessage) -> None:
        """A message accepted earlier (requeued, timed out, due): delivered, or queued."""
        self._put_all([entry])

    def _put_all(self, entries: list[QueuedMessage]) -> None:
        """Messages accepted earlier: delivered, or queued."""
        if self.queue.put(entries, self._deliver_now) and self.ready:
            self._drain()

    def _deliver_now(self, entries: list[QueuedMessage]) -> int:
        """Delivers ``entries`` in order while a consumer has room; how many it delivered."""
        ready = self.ready
        if not ready or self.paused:
            return 0
        now, deliver = time.monotonic(), self._deliver
        for index, entry in enumerate(entries):
            consumer = ready.next()
            if consumer is None:
                return index
            deliver(consumer, entry, now)
        return len(entries)

    def _deliver(self, consumer: Consumer, entry: QueuedMessage, now: float) -> None:
        if consumer.sample_rate and sampled_out(consumer):
            self.queue.release(entry[ID])
            self.recorder.finished([entry[ID]])
            return  # NSQ's sampling: the message is gone for the whole channel
        if (self.ttl_ns or self.max_attempts) and not self._deliverable([entry]):
            return
        msg = InFlightMessage(entry, consumer, now, now + consumer.msg_timeout)
        self.ready.delivered(consumer, 1)
        self.in_flight.push(msg)
        consumer.send_message(msg)

    def _deliverable(self, entries: list[QueuedMessage]) -> list[QueuedMessage]:
        """``entries`` but the ones past the TTL (dropped, or parked with an attempts limit) and the ones delivered
        ``max_attempts`` times already (parked)."""
        oldest = time.time_ns() - self.ttl_ns if self.ttl_ns else 0
        limit = self.max_attempts or 1 << 16
        kept = [entry for entry in entries if entry[TIMESTAMP] >= oldest and entry[ATTEMPTS] < limit]
        if len(kept) < len(entries):
            dropped: list[bytes] = []
            for entry in entries:
                expired = entry[TIMESTAMP] < oldest
                if expired:
                    self.expired_count += 1
                if entry[ATTEMPTS] >= limit or (expired and self.max_attempts):
                    self._park(entry)
                elif expired:
                    self.queue.release(entry[ID])
                    dropped.append(entry[ID])
            if dropped:
                self.recorder.finished(dropped)
        return kept

    def _park(self, entry: QueuedMessage) -> None:
        self.dead_letter_count += 1
        self.dead_letters.put([entry])
        self.queue.release(entry[ID])  # safe in the dead-letter queue now
        self.recorder.parked([entry])

    def set_max_attempts(self, attempts: int | None) -> None:
        """The channel's own attempts limit (0: none), or None for ``--max-attempts``."""
        self.own_max_attempts = attempts
        self.max_attempts = self._opts.max_attempts if attempts is None else attempts

    def replay(self, count: int) -> int:
        """Moves up to ``count`` dead letters back to the channel's queue, oldest first, their attempts reset; how
        many it moved."""
        dead, moved = self.dead_letters, 0
        while moved < count and (dead.memory or dead.fill_memory(min(1024, count - moved))):
            replayed: list[QueuedMessage] = []
            while moved < count and dead.memory:
                msg_id, body, timestamp, _ = dead.memory.popleft()
                replayed.append((msg_id, body, timestamp, 0))
                moved += 1
            self.recorder.replayed(replayed)
            self._put_all(replayed)
        return moved

    def empty_dead_letters(self) -> None:
        self.dead_letters.empty()
        self.recorder.dead_letters_emptied()

    def room_in_clients(self) -> int:
        """How many messages the consumers with room would take right now."""
        return 0 if self.paused else self.ready.room()

    def _drain(self) -> None:
        """Consumers with room take from the queue (memory, then disk) until none has room or it is empty."""
        ready = self.ready
        if not ready or self.paused:
            return
        memory = self.queue.memory
        now = time.monotonic()
        while (consumer := ready.next()) is not None:
            if not memory and not self._refill(min(1024, max(1, self.room_in_clients()))):
                break
            if len(ready) == 1 and not consumer.sample_rate:
                self._deliver_batch(consumer, now)
            else:
                self._deliver(consumer, memory.popleft(), now)

    def _refill(self, count: int) -> bool:
        """Memory gets up to ``count`` messages from the disk queue, else from a rewind under way; False: none."""
        while not self.queue.memory and not self.queue.fill_memory(count):
            if self.rewinding.done:
                return False
            self.rewinding = self.rewinding.put_back(self, count)
        return True

    def rewind(self, cursor: RewindCursor) -> None:
        """Puts back what ``cursor`` reads, behind what the queue has (rewind_cursor.py)."""
        self.rewinding = cursor.merged(self.rewinding)
        self._drain()

    def _deliver_batch(self, consumer: Consumer, now: float) -> None:
        """The only consumer with room gets what its window takes from the memory queue, an output buffer's worth
        at a time: a socket that stops draining pauses delivery between batches, so a message's timeout does
        not start long before the consumer can read it."""
        memory = self.queue.memory
        per_buffer = per_output_buffer(consumer, len(memory[0][BODY]))
        count = min(consumer.room, len(memory), per_buffer)
        deadline = now + consumer.msg_timeout
        if self.ttl_ns or self.max_attempts:
            entries = self._deliverable([memory.popleft() for _ in range(count)])
            if not entries:
                return
            count = len(entries)
            messages = [InFlightMessage(entry, consumer, now, deadline) for entry in entries]
        else:
            messages = [InFlightMessage(memory.popleft(), consumer, now, deadline) for _ in range(count)]
        self.ready.delivered(consumer, count)
        self.in_flight.push_all(messages)
        consumer.send_messages(messages)

    # -- consumers -------------------------------------------------------------------------------------------

    def add_client(self, consumer: Consumer) -> None:
        if self.exiting:
            raise ChannelError("exiting")
        limit = self._opts.max_channel_consumers
        if limit and len(self.clients) >= limit:
            raise ChannelError(f"consumers for {self.topic_name}:{self.name} exceeds limit of {limit}")
        self.clients[consumer.id] = consumer

    def remove_client(self, consumer: Consumer) -> None:
        """The consumer's messages in flight stay in flight and time out (NSQ does the same)."""
        if self.clients.pop(consumer.id, None) is None:
            return
        self.ready.discard(consumer)
        if self.ephemeral and not self.clients and not self.exiting:
            self._on_last_client_gone(self)

    def update_ready(self, consumer: Consumer) -> None:
        """Call after anything that changes ``consumer``'s room (RDY, CLS, FIN, REQ, a drained socket): with room it
        takes what the queue holds, without it leaves the ready ones."""
        if consumer.room > 0 and consumer.id in self.clients:
            self.ready.add(consumer)
            if self.queue or not self.rewinding.done:
                self._drain()
        else:
            self.ready.discard(consumer)

    # -- acknowledgements -----------------------------------------------------------------------------------

    def _owned(self, consumer: Consumer, msg_id: bytes) -> InFlightMessage:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise ChannelError("ID not in flight")
        if msg.client is not consumer:
            raise ChannelError("client does not own message")
        return msg

    # finish and requeue leave the consumer's readiness to the caller, which calls update_ready once after a run
    # of acknowledgements: the freed window is then refilled in one pass instead of one delivery per FIN

    def finish(self, consumer: Consumer, msg_id: bytes) -> None:
        def refuse(msg_id: bytes, reason: str) -> None:
            raise ChannelError(reason)

        self.finish_all(consumer, [msg_id], refuse)

    def finish_all(self, consumer: Consumer, msg_ids: list[bytes], refuse: Callable[[bytes, str], None]) -> None:
        """A run of FINs: each message the consumer owns is done; ``refuse(id, reason)`` is told of each other one,
        in order."""
        in_flight, release, e2e = self.in_flight, self.queue.release, self.e2e
        refused: list[bytes] = []
        for msg_id in msg_ids:
            msg = in_flight.get(msg_id)
            if msg is None or msg.client is not consumer:
                refuse(msg_id, "ID not in flight" if msg is None else "client does not own message")
                refused.append(msg_id)
                continue
            in_flight.pop(msg_id)
            release(msg_id)
            if e2e is not None:
                e2e.add(time.time_ns() - msg.timestamp, time.monotonic())
        if len(refused) < len(msg_ids):
            consumer.finished(len(msg_ids) - len(refused))
            self.recorder.finished(_without(msg_ids, refused) if refused else msg_ids)

    def requeue(self, consumer: Consumer, msg_id: bytes, delay: float) -> None:
        msg = self._owned(consumer, msg_id)
        self.in_flight.pop(msg_id)
        consumer.requeued()
        self.requeue_count += 1
        self.recorder.requeued(msg.entry(), time.time_ns() + int(delay * 1e9) if delay > 0 else 0)
        if delay > 0:
            self.queue.defer(msg.entry(), time.monotonic() + delay)
        else:
            self.put(msg.entry())

    def touch(self, consumer: Consumer, msg_id: bytes) -> None:
        msg = self._owned(consumer, msg_id)
        now = time.monotonic()
        deadline = min(now + consumer.msg_timeout, msg.delivered_at + self._opts.max_msg_timeout)
        self.in_flight.reschedule(msg, deadline)

    # -- timers (driven by the queue-scan loop; ``now`` is a time.monotonic() value) -------------------------

    def process_in_flight(self, now: float) -> bool:
        """Redeliver messages whose deadline passed; True if there were any."""
        expired = self.in_flight.pop_expired(now)
        for msg in expired:
            self.timeout_count += 1
            self.recorder.requeued(msg.entry(), 0)  # its attempts so far
            self.put(msg.entry())
            msg.client.timed_out()
        for consumer in {msg.client: None for msg in expired}:
            self.update_ready(consumer)
        return bool(expired)

    def process_deferred(self, now: float) -> bool:
        """Queue the deferred messages due by ``now``; True if there were any."""
        return self.deferred.pop_due(now, self._put_due)

    def _put_due(self, entry: QueuedMessage, deadline: float) -> None:
        self.put(entry)

    # -- operator actions -----------------------------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._drain()

    def empty(self) -> None:
        """Drop every queued, in-flight and deferred message, as NSQ's /channel/empty does."""
        self.queue.empty()
        self.in_flight.clear()
        self.rewinding.ended()  # dropped with the rest
        self.rewinding = NO_REWIND
        self.recorder.emptied()
        for consumer in list(self.clients.values()):
            consumer.emptied()
            self.update_ready(consumer)

    def delete(self) -> None:
        """Closes the consumers and removes every message and file."""
        self.close_clients()
        self.in_flight.clear()
        self.rewinding = NO_REWIND
        self.queue.delete()
        self.dead_letters.delete()
        self.recorder.deleted()

    def outstanding(self) -> Outstanding:
        """Every message the channel has: queued, in flight, deferred, dead letters. What memory holds is read now,
        on the event loop; the disk queues by the jobs, on any thread."""
        queue, dead = self.queue, self.dead_letters
        in_flight, peek = [msg.entry() for msg in self.in_flight.values()], queue.peek_job(len(queue))
        return Outstanding(lambda: peek() + in_flight, queue.deferred.delayed(), dead.peek_job(len(dead)))

    def flush_to_disk(self) -> None:
        """At exit: every message still in memory or in flight goes to the disk queue (redelivered after a
        restart, as NSQ does), deferred ones to a file with their due times (where NSQ would lose the delay)."""
        in_flight = [msg.entry() for msg in self.in_flight.values()]
        self.in_flight.clear()
        self.queue.flush_to_disk(in_flight)
        self.dead_letters.flush_to_disk([])

    def close_clients(self) -> None:
        self.exiting = True
        for consumer in list(self.clients.values()):
            consumer.close()



def _without(ids: list[bytes], refused: list[bytes]) -> list[bytes]:
    """``ids`` less the first occurrence of each of ``refused``, which are among them in the same order."""
    kept, at = [], 0
    for msg_id in ids:
        if at < len(refused) and msg_id == refused[at]:
            at += 1
        else:
            kept.append(msg_id)
    return kept
