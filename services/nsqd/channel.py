"""A channel: its own copy of every message of its topic, shared out among the consumers subscribed to it.

Invariants:
- a message is in exactly one place: the memory queue, the disk queue (once the memory queue holds
  ``--mem-queue-size``), in flight (delivered, owned by one client) or deferred;
- a client receives only while ``in_flight_count < ready_count`` (RDY is a window, not a counter);
- ``_ready`` holds exactly the subscribed clients with room, so delivery never scans all clients, and the queues
  only hold messages while no client has room (or the channel is paused).
Depth counts the message queue (memory and disk); in-flight and deferred messages are reported separately, as NSQ
does. A publish the disk refuses is refused (see topic.py); a message accepted earlier (requeued, timed out, from
the topic's backlog) that the disk refuses stays in memory, and nsqd reports itself unhealthy: nothing accepted is
dropped, except by ephemeral channels, which discard what their memory queue cannot hold, as NSQ's do.

With a message TTL (``ttl_ns``: ``--msg-ttl`` or the topic's own), a message older than it is never delivered: it
is dropped and counted (``expired_count``) when it is taken from the queue to be delivered. With an attempts limit
(``max_attempts``: ``--max-attempts`` or the channel's own), a message delivered that many times already is parked
in the channel's dead-letter queue instead (as is an expired one), a message queue of its own (memory, then disk,
as durable as the channel's), until it is replayed or emptied.

At ``--mem-queue-size=0`` (``_on_disk``) every message reaches a consumer through the disk queue, never handed
over directly, and stays there until it is finished (see message_queue.py), and a deferred message (a DPUB's,
or one requeued with a delay) is in the disk queue's deferred file with its due time until it is queued again: a
crash loses nothing in flight, requeued or deferred, and delivers deferred messages when they are due.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from shared.protocol.names import is_ephemeral

from .deadline_queue import DeadlineQueue
from .latency_window import LatencyWindow
from .message import QueuedMessage, DeferredMessage, InFlightMessage, decode, encode

if TYPE_CHECKING:
    from .client import Client
    from .message_queue import Storage
    from .options import Options


class ChannelError(Exception):
    """FIN/REQ/TOUCH on a message the client cannot act on, or a SUB the channel refuses."""


class Channel:
    def __init__(self, topic_name: str, name: str, opts: Options, storage: Storage,
                 on_last_client_gone: Callable[[Channel], None]) -> None:
        self.topic_name = topic_name
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.queue = storage.open(f"{topic_name}:{name}", channel=True)
        # "t:dead:c": no channel's name has a colon, so nothing mistakes it for one
        self.dead_letters = storage.open(f"{topic_name}:dead:{name}")
        self.max_attempts = opts.max_attempts
        self.own_max_attempts: int | None = None  # kept in nsqd.dat; None: --max-attempts
        self._on_disk = self.queue.holds_until_finished
        self.paused = False
        self.exiting = False
        self.in_flight: DeadlineQueue[InFlightMessage] = DeadlineQueue()
        self.deferred: DeadlineQueue[DeferredMessage] = DeadlineQueue()
        self.clients: dict[int, Client] = {}
        self._ready: dict[Client, None] = {}
        self.message_count = 0
        self.requeue_count = 0
        self.timeout_count = 0
        self.expired_count = 0
        self.dead_letter_count = 0
        self.ttl_ns = round(opts.msg_ttl * 1e9)  # the topic sets its own
        # deliveries to consumers; NSQ reports them as global_msg_count (not zone- or region-local)
        self.delivered_count = 0
        self._opts = opts
        self._on_last_client_gone = on_last_client_gone
        self.e2e: LatencyWindow | None = None
        if opts.e2e_processing_latency_percentiles:
            self.e2e = LatencyWindow(opts.e2e_processing_latency_percentiles,
                                     opts.e2e_processing_latency_window_time, time.monotonic())
        self._restore_deferred()

    def _restore_deferred(self) -> None:
        """Deferred messages saved at the last exit wait out what is left of their delay."""
        now, now_ns = time.monotonic(), time.time_ns()
        for due_ns, payload in self.queue.backend.take_deferred(keep=self.queue.keeps_deferred):
            self.deferred.push(DeferredMessage(decode(payload), now + max(0, due_ns - now_ns) / 1e9))

    def __repr__(self) -> str:
        return f"Channel({self.topic_name}:{self.name})"

    @property
    def depth(self) -> int:
        return len(self.queue)

    @property
    def backend_depth(self) -> int:
        return self.queue.backend_depth

    @property
    def dropped_count(self) -> int:
        return self.queue.dropped_count

    # -- messages in ---------------------------------------------------------------------------------------

    def put_new(self, entries: list[QueuedMessage], keep_refused: bool = True) -> None:
        """Messages from the topic: delivered, or queued. If the disk refuses the ones to queue, they stay in
        memory, or with ``keep_refused=False`` (a publish, not acknowledged yet) OSError is raised and they are
        not this channel's."""
        if self._on_disk:
            self._through_disk(entries, keep_refused)
            self.message_count += len(entries)
            return
        delivered = self._deliver_now(entries)
        self.message_count += delivered
        if delivered < len(entries):
            rest = entries[delivered:] if delivered else entries
            self.queue.put(rest, keep_refused)
            self.message_count += len(rest)

    def _deliver_now(self, entries: list[QueuedMessage]) -> int:
        """Delivers ``entries`` in order while a client has room; how many it delivered."""
        ready = self._ready
        if not ready or self.paused:
            return 0
        now, deliver = time.monotonic(), self._deliver
        for index, entry in enumerate(entries):
            if not ready:
                return index
            deliver(next(iter(ready)), entry, now)
        return len(entries)

    def put_from_disk(self, records: list[bytes]) -> None:
        """Messages from the topic's disk queue, as records (size prefix included). What the consumers can take now
        or memory can hold is decoded; the rest goes to this channel's disk queue as it is, never decoded."""
        room = self.queue.room + (0 if self._on_disk else self.room_in_clients())
        if room:
            self.put_new([decode(record, 4) for record in records[:room]])
        if len(records) > room:
            self.message_count += len(records) - room
            self.queue.put_records(records[room:])
            if self._on_disk:
                self._drain()

    def put_deferred(self, entry: QueuedMessage, delay: float, now: float, keep_refused: bool = True) -> None:
        """A DPUB's copy, delivered once ``delay`` is over. If the disk refuses it (at ``--mem-queue-size=0``),
        it is kept in memory, or with ``keep_refused=False`` OSError is raised and it is not this channel's."""
        self._defer(entry, now + delay, keep_refused)
        self.message_count += 1

    def _defer(self, entry: QueuedMessage, deadline: float, keep_refused: bool = True) -> None:
        if self.queue.keeps_deferred:
            due_ns = time.time_ns() + int((deadline - time.monotonic()) * 1e9)
            self.queue.defer([(due_ns, entry)], keep_refused)
        self.deferred.push(DeferredMessage(entry, deadline))

    def put(self, entry: QueuedMessage) -> None:
        """A message accepted earlier (requeued, timed out, due): delivered, or queued."""
        entries = [entry]
        if self._on_disk:
            self._through_disk(entries)
        elif not self._deliver_now(entries):
            self.queue.put(entries, keep_refused=True)

    def _through_disk(self, entries: list[QueuedMessage], keep_refused: bool = True) -> None:
        """At ``--mem-queue-size=0``: to the disk queue, and from there to the consumers with room."""
        self.queue.put(entries, keep_refused)
        self._drain()

    def _deliver(self, client: Client, entry: QueuedMessage, now: float) -> None:
        if client.sample_rate and _percentile() > client.sample_rate:
            self.queue.release(entry[0])
            return  # NSQ's sampling: the message is gone for the whole channel
        if (self.ttl_ns or self.max_attempts) and not self._deliverable([entry]):
            return
        msg = InFlightMessage(entry, client, now, now + client.msg_timeout)
        self.delivered_count += 1
        self.in_flight.push(msg)
        client.send_message(msg)
        ready = self._ready
        if client not in ready:
            return  # the send filled its socket's buffer, which paused it
        if client.in_flight_count >= client.ready_count:
            del ready[client]
        elif len(ready) > 1:
            del ready[client]
            ready[client] = None  # round robin among clients with room

    def _deliverable(self, entries: list[QueuedMessage]) -> list[QueuedMessage]:
        """``entries`` but the ones past the TTL (dropped, or parked with an attempts limit) and the ones delivered
        ``max_attempts`` times already (parked)."""
        oldest = time.time_ns() - self.ttl_ns if self.ttl_ns else 0
        limit = self.max_attempts or 1 << 16
        kept = [entry for entry in entries if entry[2] >= oldest and entry[3] < limit]
        if len(kept) < len(entries):
            for entry in entries:
                expired = entry[2] < oldest
                if expired:
                    self.expired_count += 1
                if entry[3] >= limit or (expired and self.max_attempts):
                    self._park(entry)
                elif expired:
                    self.queue.release(entry[0])
        return kept

    def _park(self, entry: QueuedMessage) -> None:
        self.dead_letter_count += 1
        self.dead_letters.put([entry], keep_refused=True)
        self.queue.release(entry[0])  # at --mem-queue-size=0: safe in the dead-letter queue now

    def set_max_attempts(self, attempts: int | None) -> None:
        """The channel's own attempts limit (0: none), or None for ``--max-attempts``."""
        self.own_max_attempts = attempts
        self.max_attempts = self._opts.max_attempts if attempts is None else attempts

    def replay(self, count: int) -> int:
        """Moves up to ``count`` dead letters back to the channel's queue, oldest first, their attempts reset; how
        many it moved."""
        dead, moved = self.dead_letters, 0
        while moved < count and (dead.memory or dead.fill_memory(min(1024, count - moved))):
            while moved < count and dead.memory:
                msg_id, body, timestamp, _ = dead.memory.popleft()
                self.put((msg_id, body, timestamp, 0))
                moved += 1
        return moved

    def room_in_clients(self) -> int:
        """How many messages the consumers with room would take right now."""
        if self.paused:
            return 0
        return sum(client.ready_count - client.in_flight_count for client in self._ready)

    def _drain(self) -> None:
        memory, ready = self.queue.memory, self._ready
        if self.paused:
            return
        now = time.monotonic()
        while ready:
            # from disk, what the clients with room can take (up to 1024)
            if not memory and not self.queue.fill_memory(min(1024, max(1, self.room_in_clients()))):
                break
            client = next(iter(ready))
            if len(ready) == 1 and not client.sample_rate:
                self._deliver_batch(client, now)
            else:
                self._deliver(client, memory.popleft(), now)

    def _deliver_batch(self, client: Client, now: float) -> None:
        """The only client with room gets what its window takes from the memory queue, an output buffer's worth
        at a time: a socket that stops draining pauses delivery between batches, so a message's timeout does
        not start long before the client can read it."""
        memory = self.queue.memory
        per_buffer = max(1, client.output_buffer_size // (_FRAME_OVERHEAD + len(memory[0][1])))
        count = min(client.ready_count - client.in_flight_count, len(memory), per_buffer)
        deadline = now + client.msg_timeout
        if self.ttl_ns or self.max_attempts:
            entries = self._deliverable([memory.popleft() for _ in range(count)])
            if not entries:
                return
            count = len(entries)
            messages = [InFlightMessage(entry, client, now, deadline) for entry in entries]
        else:
            messages = [InFlightMessage(memory.popleft(), client, now, deadline) for _ in range(count)]
        self.delivered_count += count
        self.in_flight.push_all(messages)
        client.send_messages(messages)  # may pause writing, which takes the client out of the ready ones
        if client.in_flight_count >= client.ready_count:
            self._ready.pop(client, None)

    # -- clients ---------------------------------------------------------------------------------------------

    def add_client(self, client: Client) -> None:
        if self.exiting:
            raise ChannelError("exiting")
        limit = self._opts.max_channel_consumers
        if limit and len(self.clients) >= limit:
            raise ChannelError(f"consumers for {self.topic_name}:{self.name} exceeds limit of {limit}")
        self.clients[client.id] = client

    def remove_client(self, client: Client) -> None:
        """The client's messages in flight stay in flight and time out (NSQ does the same)."""
        if self.clients.pop(client.id, None) is None:
            return
        self._ready.pop(client, None)
        if self.ephemeral and not self.clients and not self.exiting:
            self._on_last_client_gone(self)

    def update_ready(self, client: Client) -> None:
        """Call after anything that changes whether ``client`` may receive (RDY, FIN, REQ, CLS, timeout)."""
        if client.has_room and client.id in self.clients:
            if client not in self._ready:
                self._ready[client] = None
            if self.queue:
                self._drain()
        else:
            self._ready.pop(client, None)

    # -- acknowledgements -----------------------------------------------------------------------------------

    def _owned(self, client: Client, msg_id: bytes) -> InFlightMessage:
        msg = self.in_flight.get(msg_id)
        if msg is None:
            raise ChannelError("ID not in flight")
        if msg.client is not client:
            raise ChannelError("client does not own message")
        return msg

    # finish and requeue leave the client's readiness to the caller, which calls update_ready once after a run of
    # acknowledgements: the freed window is then refilled in one pass instead of one delivery per FIN

    def finish(self, client: Client, msg_id: bytes) -> None:
        msg = self.in_flight.get(msg_id)
        if msg is None or msg.client is not client:
            raise ChannelError("ID not in flight" if msg is None else "client does not own message")
        self.in_flight.pop(msg_id)
        if self._on_disk:
            self.queue.release(msg_id)
        client.finished()
        if self.e2e is not None:
            self.e2e.add(time.time_ns() - msg.timestamp, time.monotonic())

    def requeue(self, client: Client, msg_id: bytes, delay: float) -> None:
        msg = self._owned(client, msg_id)
        self.in_flight.pop(msg_id)
        client.requeued()
        self.requeue_count += 1
        if delay > 0:
            self._defer(msg.entry(), time.monotonic() + delay)
        else:
            self.put(msg.entry())

    def touch(self, client: Client, msg_id: bytes) -> None:
        msg = self._owned(client, msg_id)
        now = time.monotonic()
        deadline = min(now + client.msg_timeout, msg.delivered_at + self._opts.max_msg_timeout)
        self.in_flight.reschedule(msg, deadline)

    # -- timers (driven by the queue-scan loop; ``now`` is a time.monotonic() value) -------------------------

    def process_in_flight(self, now: float) -> bool:
        """Redeliver messages whose deadline passed; True if there were any."""
        expired = self.in_flight.pop_expired(now)
        for msg in expired:
            self.timeout_count += 1
            self.put(msg.entry())
            msg.client.timed_out()
        return bool(expired)

    def process_deferred(self, now: float) -> bool:
        due = self.deferred.pop_expired(now)
        for deferred in due:
            self.put(deferred.entry)
        if due and self.queue.keeps_deferred:
            self.queue.deferred_left(len(self.deferred), self._deferred_with_due_times)
        return bool(due)

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
        self.deferred.clear()
        for client in self.clients.values():
            client.emptied()

    def delete(self) -> None:
        """Closes the clients and removes every message and file."""
        self.close_clients()
        self.empty()
        self.queue.delete()
        self.dead_letters.delete()

    def flush_to_disk(self) -> None:
        """At exit: every message still in memory or in flight goes to the disk queue (redelivered after a
        restart, as NSQ does), deferred ones to a file with their due times (where NSQ would lose the delay)."""
        deferred = self._deferred_with_due_times()
        in_flight = [msg.entry() for msg in self.in_flight.values()]
        self.in_flight.clear()
        self.deferred.clear()
        self.queue.flush_to_disk(in_flight, deferred)
        self.dead_letters.flush_to_disk([], [])

    def _deferred_with_due_times(self) -> list[tuple[int, bytes]]:
        """The deferred messages as their file keeps them: due time (unix ns), message."""
        now, now_ns = time.monotonic(), time.time_ns()
        return [(now_ns + int((item.deadline - now) * 1e9), encode(item.entry)) for item in self.deferred.values()]

    def close_clients(self) -> None:
        self.exiting = True
        for client in list(self.clients.values()):
            client.close()


# a message frame's bytes besides the body: size, frame type, timestamp, attempts, ID
_FRAME_OVERHEAD = 4 + 4 + 8 + 2 + 16


def _percentile() -> int:
    """A random integer in [0, 100), for clients that sample (random is loaded only once one does)."""
    from random import randrange

    return randrange(100)
