"""A topic: takes published messages and gives every channel its own copy.

With no channels, or while paused, messages wait in the topic's memory queue and, once it holds
``--mem-queue-size``, in its disk queue; the first channel to appear (or the unpause) receives that backlog, as in
NSQ. A deferred message (DPUB) starts its delay when it reaches a channel.

A publish the disk queue cannot take is refused as a whole (``E_PUB_FAILED``/``E_MPUB_FAILED``) and nothing of it
is queued. Nothing accepted is ever dropped, except by ephemeral topics and channels, which discard what their
memory queue cannot hold, as NSQ's do.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from itertools import repeat
from typing import TYPE_CHECKING, Any, Awaitable, Callable, TypeVar

from shared.names import is_ephemeral

from .channel import Channel
from .latency_window import DISABLED, summarize
from .guid import GuidFactory
from .message import TopicEntry, decode, encode

T = TypeVar("T")

if TYPE_CHECKING:
    from .disk_queue import Storage
    from .options import Options


log = logging.getLogger("nsqd")


class TopicError(Exception):
    """A publish the topic cannot take; the text follows NSQ's (``exiting``)."""


class Topic:
    def __init__(self, name: str, opts: Options, storage: Storage, on_channel_change: Callable[[Topic], None],
                 started: bool = True) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self._storage = storage
        self.backend = storage.open(name)
        self.memory: deque[TopicEntry] = deque()
        if self.backend is not None:
            # deferred messages that waited here for a channel; their delay has not started, so the file keeps
            # the delay itself (ms), where a channel's keeps due times
            self.memory.extend((msg_id, body, timestamp, defer_ms) for defer_ms, (msg_id, body, timestamp, _)
                               in ((delay, decode(payload)) for delay, payload in self.backend.take_deferred()))
        # a topic restored at start-up hands its backlog out only once all its channels exist again
        self.started = started
        self._started_event: asyncio.Event | None = None  # made only when someone waits for the start
        self.paused = False
        self.exiting = False
        # entries are (id, body, timestamp, defer ms); with defer 0 the same tuple is a channel entry
        # (id, body, timestamp, attempts 0), so fan-out shares it among channels without copying
        self.channels: dict[str, Channel] = {}
        self.message_count = 0
        self.message_bytes = 0
        self.dropped_count = 0
        self._opts = opts
        self._guid = GuidFactory(opts.node_id)
        self._on_channel_change = on_channel_change

    def __repr__(self) -> str:
        return f"Topic({self.name})"

    @property
    def depth(self) -> int:
        return len(self.memory) + self.backend_depth

    @property
    def backend_depth(self) -> int:
        return self.backend.depth if self.backend is not None else 0

    def publish(self, bodies: list[bytes], defer_ms: int = 0) -> None:
        """Accepts all of ``bodies`` or raises TopicError and accepts none."""
        if self.exiting:
            raise TopicError("exiting")
        count = len(bodies)
        timestamp = time.time_ns()
        if count == 1:  # one message per request, what most producers send
            entries = [(self._guid.next_id(), bodies[0], timestamp, defer_ms)]
        else:
            entries = list(zip(self._guid.next_ids(count), bodies, repeat(timestamp, count), repeat(defer_ms, count)))
        if self.paused or not self.channels or not self.started:
            self._hold(entries)
        else:
            self._distribute(entries, deferred=defer_ms > 0)
        self.message_count += count
        self.message_bytes += len(bodies[0]) if count == 1 else sum(map(len, bodies))

    def _hold(self, entries: list[TopicEntry]) -> None:
        """Memory while it has room, then disk; raises TopicError, holding none, if the disk refuses."""
        room = max(0, self._opts.mem_queue_size - len(self.memory))
        overflow = entries[room:]
        if overflow and self.backend is not None:
            try:
                # on disk a topic's message has no delay: it starts again when it reaches a channel (as NSQ's)
                self.backend.put([encode((msg_id, body, timestamp, 0)) for msg_id, body, timestamp, _ in overflow])
            except OSError as error:
                self._storage.health.write_failed(f"failed to write messages to {self.name}", error)
                raise TopicError(str(error)) from None
            self._storage.health.write_succeeded()
        elif overflow and self.ephemeral:
            self.dropped_count += len(overflow)
        else:
            room = len(entries)  # no disk at all: memory is all there is
        self.memory.extend(entries[:room])

    def _distribute(self, entries: list[TopicEntry], deferred: bool) -> None:
        """Every channel gets every entry; ``deferred`` says whether any of them has a delay."""
        if not deferred:
            for channel in self.channels.values():
                channel.put_new(entries)
            return
        now = time.monotonic()
        for msg_id, body, timestamp, defer_ms in entries:
            for channel in self.channels.values():
                if defer_ms:
                    channel.put_deferred((msg_id, body, timestamp, 0), defer_ms / 1000, now)
                else:
                    channel.put_new([(msg_id, body, timestamp, 0)])

    def _pump_backlog(self) -> None:
        """Hands the backlog to the channels: memory first, then the disk queue a batch per event-loop turn, so
        other clients are served while a large backlog moves."""
        if self.paused or not self.channels or not self.started or self.exiting:
            return
        if self.memory:
            backlog = list(self.memory)
            self.memory.clear()
            self._distribute(backlog, deferred=any(entry[3] for entry in backlog))
        while self.backend is not None and self.backend.depth:
            records = self.backend.read(4096, framed=True)
            if not records:
                break
            for channel in self.channels.values():
                channel.put_from_disk(records)
            if self.backend.depth and self._pump_later():
                return

    def _pump_later(self) -> bool:
        """Schedules the rest of the pump for the next event-loop turn; False where no loop runs (unit tests)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return False
        loop.call_soon(self._pump_backlog)
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
            channel = Channel(self.name, name, self._opts, self._storage, self._channel_lost_last_client)
            self.channels[name] = channel
            self._pump_backlog()
            self._on_channel_change(self)
        return channel

    def delete_channel(self, name: str) -> Channel | None:
        channel = self.channels.pop(name, None)
        if channel is not None:
            channel.delete()
            self._on_channel_change(self)
        return channel

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
        """Drops the topic's own queues, not its channels' (NSQ's /topic/empty)."""
        self.memory.clear()
        if self.backend is not None:
            self.backend.empty()

    def close(self) -> None:
        self.exiting = True
        for channel in list(self.channels.values()):
            channel.close_clients()

    def delete(self) -> None:
        """Closes the clients, then removes every channel, message and file."""
        self.close()
        for name in list(self.channels):
            self.delete_channel(name)
        self.empty()
        if self.backend is not None:
            self.backend.delete()
            self._storage.forget(self.backend)

    def flush_to_disk(self) -> None:
        """At exit: the topic's and its channels' messages go to their disk queues, which are closed."""
        for channel in self.channels.values():
            channel.flush_to_disk()
        if self.backend is None:
            return
        entries = list(self.memory)
        self.memory.clear()
        try:
            self.backend.put([encode((msg_id, body, timestamp, 0)) for msg_id, body, timestamp, defer_ms in entries
                              if not defer_ms])
            self.backend.save_deferred([(defer_ms, encode((msg_id, body, timestamp, 0)))
                                        for msg_id, body, timestamp, defer_ms in entries if defer_ms])
        except OSError as error:
            log.error("failed to flush the messages of %s to disk - %s", self.name, error)
        self.backend.close()

    # -- stats ----------------------------------------------------------------------------------------------

    def stats(self, channel_name: str | None, include_clients: bool, now: float) -> dict[str, Any]:
        names = sorted(self.channels) if channel_name is None else [channel_name]
        channels = [self.channels[name].stats(include_clients, now) for name in names]
        return {
            "topic_name": self.name, "channels": channels, "depth": self.depth, "backend_depth": self.backend_depth,
            "message_count": self.message_count, "message_bytes": self.message_bytes, "paused": self.paused,
            "e2e_processing_latency": self._e2e(now),
        }

    def _e2e(self, now: float) -> dict[str, Any]:
        windows = [channel.e2e for channel in self.channels.values() if channel.e2e is not None]
        if not windows:
            return DISABLED  # NSQ merges its channels' streams: with none there is nothing to report
        return summarize(self._opts.e2e_processing_latency_percentiles,
                         [part for window in windows for part in window.parts(now)])
