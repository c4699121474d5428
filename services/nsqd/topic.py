"""A topic: takes published messages and gives every channel its own copy.

With no channels, or while paused, messages wait in the topic's message queue (memory, then disk once memory
holds ``--mem-queue-size``); the first channel to appear (or the unpause) receives that backlog, as in NSQ. They
wait as the channels will receive them (``QueuedMessage``, no attempt yet). A deferred message (DPUB) starts its
delay when it reaches a channel: while it waits here it is in the queue's deferred store with its delay.

A publish that the topic's disk queue, or a channel's, cannot take is refused (``E_PUB_FAILED``/``E_MPUB_FAILED``,
HTTP 500) before it is acknowledged: with ``--mem-queue-size=0`` an OK means the message is on disk in every
channel. Nothing acknowledged is ever dropped, except by ephemeral topics and channels, which discard what their
memory queue cannot hold, as NSQ's do. nsqd reports itself unhealthy from a refused write until a write or a
publish succeeds again. A publish a queue's ``--max-bytes-per-queue`` refuses is refused too (``TopicFull``), and
checked against every channel first, so that no channel takes it then.

What happens to the topic's messages is told to its recorder (recorder.py), which storage chose for it.
"""

from __future__ import annotations

import asyncio
import time
from itertools import repeat
from typing import TYPE_CHECKING, Awaitable, Callable, TypeVar

from nsqclient.protocol.names import is_ephemeral

from .channel import Channel
from .guid import GuidFactory
from .message import QueuedMessage
from .queue_cap import QueueFull
from .recorder import Outstanding

T = TypeVar("T")

if TYPE_CHECKING:
    from .options import Options
    from .recorder import TopicRecorder
    from .storage import Storage


class TopicError(Exception):
    """A publish the topic cannot take; the text follows NSQ's (``exiting``)."""


class TopicFull(TopicError):
    """A publish the topic's disk queue, or a channel's, refuses at its ``--max-bytes-per-queue``."""


class ReplicationError(TopicError):
    """Too few copies of a publish to acknowledge it (what a replicated publish waits for fails with it)."""


class Topic:
    def __init__(self, name: str, opts: Options, storage: Storage, on_channel_change: Callable[[Topic], None],
                 started: bool = True) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self._storage = storage
        self._health = storage.health
        self.queue = storage.open_topic(name)
        # a topic restored at start-up hands its backlog out only once all its channels exist again
        self.started = started
        self._started_event: asyncio.Event | None = None  # made only when someone waits for the start
        self.paused = False
        self.exiting = False
        self.ttl: float | None = None  # seconds; None: --msg-ttl's
        self.channels: dict[str, Channel] = {}
        self.message_count = 0
        self.message_bytes = 0
        self._opts = opts
        self._guid = GuidFactory(opts.node_id)
        self._on_channel_change = on_channel_change
        self.recorder = storage.topic_recorder(name)
        self.queue.report_drops(self._dropped)

    def __repr__(self) -> str:
        return f"Topic({self.name})"

    @property
    def depth(self) -> int:
        return len(self.queue) + len(self.queue.deferred)

    @property
    def backend_depth(self) -> int:
        return self.queue.backend_depth

    @property
    def dropped_count(self) -> int:
        return self.queue.dropped_count

    def publish(self, bodies: list[bytes], defer_ms: int = 0) -> Awaitable[None] | None:
        """Accepts all of ``bodies``, or raises TopicError: the publish is then not acknowledged, though with several
        channels the ones before the refusing one may have taken it (a retry makes duplicates there, never a loss).
        What the acknowledgement waits for, if anything (the recorder's: with replication, done once enough
        mirrors hold the publish, or ReplicationError)."""
        if self.exiting:
            raise TopicError("exiting")
        count = len(bodies)
        timestamp = time.time_ns()
        # one tuple per message, shared by every channel's queue
        if count == 1:  # one message per request, what most producers send
            entries = [(self._guid.next_id(), bodies[0], timestamp, 0)]
        else:
            entries = list(zip(self._guid.next_ids(count), bodies, repeat(timestamp, count), repeat(0, count)))
        return self.take(entries, defer_ms, len(bodies[0]) if count == 1 else sum(map(len, bodies)))

    def take(self, entries: list[QueuedMessage], defer_ms: int, size: int) -> Awaitable[None] | None:
        """``publish`` once the messages have their IDs (``new_ids``; or taken over from a lost nsqd): held, or
        handed to every channel; TopicError if refused."""
        held = self.paused or not self.channels or not self.started
        try:
            if held:
                self._hold(entries, defer_ms)
            else:
                self._distribute(entries, defer_ms)
        except OSError as error:
            raise TopicError(str(error)) from None
        except QueueFull as error:
            raise TopicFull(str(error)) from None
        self.message_count += len(entries)
        self.message_bytes += size
        if self._health.error is not None:  # taken again: nsqd no longer refuses what it is sent
            self._health.write_succeeded()
        return self.recorder.published(held, defer_ms, entries)

    def _dropped(self, ids: list[bytes]) -> None:
        """The cap dropped the oldest it held (drop-oldest)."""
        self.recorder.dropped(ids)

    def new_ids(self, count: int) -> list[bytes]:
        return self._guid.next_ids(count)

    def _hold(self, entries: list[QueuedMessage], defer_ms: int) -> None:
        """Until a channel takes them; OSError (QueueFull) if the queue refuses them, none held then."""
        if not defer_ms:
            self.queue.accept(entries)
            return
        for entry in entries:
            self.queue.defer_published(entry, defer_ms / 1000)

    def _distribute(self, entries: list[QueuedMessage], defer_ms: int) -> None:
        """Every channel takes every entry, or OSError (QueueFull) is raised by the first that refuses them: the
        publish is not acknowledged, though the channels before that one took it. A cap is checked with every
        channel first, so that a full queue leaves the publish with none."""
        channels = self.channels.values()
        if defer_ms:
            now = time.monotonic()
            for channel in channels:
                for entry in entries:
                    channel.publish_deferred(entry, defer_ms / 1000, now)
            return
        if self._opts.max_bytes_per_queue:
            for channel in channels:
                channel.queue.check_room(entries)
        for channel in channels:
            channel.publish(entries)

    def _pump_backlog(self, continuing: bool = False) -> None:
        """Hands the backlog to the channels: memory first, then the disk queue a batch per event-loop turn, so
        other clients are served while a large backlog moves."""
        if self.paused or not self.channels or not self.started or self.exiting:
            return
        if not continuing and (len(self.queue) or len(self.queue.deferred)):
            self.recorder.distributed()
        channels = self.channels.values()
        if self.queue.memory:
            entries = self.queue.take_memory()
            for channel in channels:
                channel.put_held(entries)
        now = time.monotonic()

        def to_channels(entry: QueuedMessage, delay: float) -> None:
            for channel in channels:
                channel.put_deferred(entry, delay, now)

        self.queue.deferred.pop_all(to_channels)
        while self.queue.backend_depth:
            records = self.queue.read_records(4096)
            if not records:
                break
            for channel in channels:
                channel.put_from_disk(records)
            if self.queue.backend_depth and self._pump_later():
                return

    def _pump_later(self) -> bool:
        """Schedules the rest of the pump for the next event-loop turn; False where no loop runs (unit tests)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        loop.call_soon(self._pump_backlog, True)
        return True

    def start(self) -> None:
        self.started = True
        if self._started_event is not None:
            self._started_event.set()
        self._pump_backlog()

    def when_started(self, answer: T) -> T | Awaitable[T]:
        """``answer`` now if the topic has started, else once it has. As NSQ answers the command that created a
        topic only after the channels lookupd knows for it exist, so that what it published reaches all of them."""
        if self.started:
            return answer

        async def later() -> T:
            if not self.started:  # it may have started before this ran
                if self._started_event is None:
                    self._started_event = asyncio.Event()
                await self._started_event.wait()
            return answer

        return later()

    # -- channels -------------------------------------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """The channel, created if it does not exist yet (it then receives the topic's backlog)."""
        channel = self.channels.get(name)
        if channel is None:
            channel = Channel(self.name, name, self._opts, self._storage,
                              self._storage.channel_recorder(self.recorder, name), self._channel_lost_last_client)
            channel.ttl_ns = self.ttl_ns
            self.channels[name] = channel
            self._pump_backlog()
            self._on_channel_change(self)
        return channel

    def set_ttl(self, seconds: float | None) -> None:
        """The topic's own message TTL (0: none), or None for ``--msg-ttl``."""
        self.ttl = seconds
        for channel in self.channels.values():
            channel.ttl_ns = self.ttl_ns

    @property
    def ttl_ns(self) -> int:
        return round((self._opts.msg_ttl if self.ttl is None else self.ttl) * 1e9)

    def delete_channel(self, name: str) -> Channel | None:
        channel = self.channels.pop(name, None)
        if channel is not None:
            channel.delete()
            self._on_channel_change(self)
        return channel

    def record_with(self, recorder: TopicRecorder) -> None:
        """Tells ``recorder`` from now on what happens to the topic and its channels (the storage's choice)."""
        self.recorder = recorder
        for name, channel in self.channels.items():
            channel.recorder = self._storage.channel_recorder(recorder, name)

    def outstanding(self) -> Outstanding:
        """What the topic holds (its channels have their own): read on the event loop, the disk by the jobs."""
        queue = self.queue
        return Outstanding(queue.peek_job(len(queue)), queue.deferred.delayed(), list)

    def _channel_lost_last_client(self, channel: Channel) -> None:
        if self.channels.get(channel.name) is channel:
            self.delete_channel(channel.name)

    # -- operator actions -----------------------------------------------------------------------------------

    def pause(self) -> None:
        self.paused = True

    def unpause(self) -> None:
        self.paused = False
        self._pump_backlog()

    def empty(self) -> None:
        """Drops the topic's own queue, not its channels' (NSQ's /topic/empty)."""
        self.queue.empty()
        self.recorder.emptied()

    def close(self) -> None:
        self.exiting = True
        for channel in list(self.channels.values()):
            channel.close_clients()

    def delete(self) -> None:
        """Closes the clients, then removes every channel, message and file."""
        self.close()
        for name in list(self.channels):
            self.delete_channel(name)
        self.queue.delete()
        self.recorder.deleted()

    def flush_to_disk(self) -> None:
        """At exit: the topic's and its channels' messages go to their disk queues, which are closed."""
        for channel in self.channels.values():
            channel.flush_to_disk()
        self.queue.flush_to_disk([])
