"""A topic: takes published messages and gives every channel its own copy.

With no channels, or while paused, messages wait in the topic's memory queue; the first channel to appear (or
the unpause) receives that backlog, as in NSQ. A deferred message (DPUB) starts its delay when it reaches a
channel.

Admission: a publish is accepted only if every queue it lands in stays within ``--mem-queue-size``; otherwise
it is refused as a whole (``E_PUB_FAILED``/``E_MPUB_FAILED``) and nothing is queued. Nothing accepted is ever
dropped, except by ephemeral topics and channels, which discard overflow as NSQ's do.
"""

from __future__ import annotations

import time
from collections import deque
from itertools import repeat
from typing import TYPE_CHECKING, Any, Callable

from shared.names import is_ephemeral

from .channel import Channel
from .e2e import DISABLED, summarize
from .guid import GuidFactory
from .message import TopicEntry

if TYPE_CHECKING:
    from .options import Options


class TopicError(Exception):
    """A publish the topic cannot take; the text follows NSQ's (``exiting``)."""


class Topic:
    def __init__(self, name: str, opts: Options, on_channel_change: Callable[[Topic], None]) -> None:
        self.name = name
        self.ephemeral = is_ephemeral(name)
        self.paused = False
        self.exiting = False
        # entries are (id, body, timestamp, defer ms); with defer 0 the same tuple is a channel entry
        # (id, body, timestamp, attempts 0), so fan-out shares it among channels without copying
        self.memory: deque[TopicEntry] = deque()
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
        return len(self.memory)

    def publish(self, bodies: list[bytes], defer_ms: int = 0) -> None:
        """Accepts all of ``bodies`` or raises TopicError and accepts none."""
        if self.exiting:
            raise TopicError("exiting")
        count = len(bodies)
        self._admit(count)
        timestamp = time.time_ns()
        entries = list(zip(self._guid.next_ids(count), bodies, repeat(timestamp, count), repeat(defer_ms, count)))
        self.message_count += count
        self.message_bytes += sum(map(len, bodies))
        if self.paused or not self.channels:
            self._hold(entries)
        else:
            self._distribute(entries, deferred=defer_ms > 0)

    def _admit(self, count: int) -> None:
        limit = self._opts.mem_queue_size
        if self.paused or not self.channels:
            if not self.ephemeral and len(self.memory) + count > limit:
                raise TopicError(f"queue full: topic depth would exceed --mem-queue-size={limit}")
            return
        for channel in self.channels.values():
            if not channel.ephemeral and channel.depth + count > limit \
                    and channel.depth + count - channel.room_in_clients() > limit:
                raise TopicError(f"queue full: channel {channel.name} depth would exceed --mem-queue-size={limit}")

    def _hold(self, entries: list[TopicEntry]) -> None:
        room = len(entries) if not self.ephemeral else max(0, self._opts.mem_queue_size - len(self.memory))
        self.memory.extend(entries[:room])
        self.dropped_count += len(entries) - room

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
        if self.paused or not self.channels or not self.memory:
            return
        backlog = list(self.memory)
        self.memory.clear()
        self._distribute(backlog, deferred=any(entry[3] for entry in backlog))

    # -- channels -------------------------------------------------------------------------------------------

    def get_channel(self, name: str) -> Channel:
        """The channel, created if it does not exist yet (it then receives the topic's backlog)."""
        channel = self.channels.get(name)
        if channel is None:
            channel = Channel(self.name, name, self._opts, self._channel_lost_last_client)
            self.channels[name] = channel
            self._pump_backlog()
            self._on_channel_change(self)
        return channel

    def delete_channel(self, name: str) -> Channel | None:
        channel = self.channels.pop(name, None)
        if channel is not None:
            channel.close_clients()
            channel.empty()
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
        """Drops the topic's own queue, not its channels' (NSQ's /topic/empty)."""
        self.memory.clear()

    def close(self) -> None:
        self.exiting = True
        for channel in list(self.channels.values()):
            channel.close_clients()

    # -- stats ----------------------------------------------------------------------------------------------

    def stats(self, channel_name: str | None, include_clients: bool, now: float) -> dict[str, Any]:
        names = sorted(self.channels) if channel_name is None else [channel_name]
        channels = [self.channels[name].stats(include_clients, now) for name in names]
        return {
            "topic_name": self.name, "channels": channels, "depth": self.depth, "backend_depth": 0,
            "message_count": self.message_count, "message_bytes": self.message_bytes, "paused": self.paused,
            "e2e_processing_latency": self._e2e(now),
        }

    def _e2e(self, now: float) -> dict[str, Any]:
        windows = [channel.e2e for channel in self.channels.values() if channel.e2e is not None]
        if not windows:
            return DISABLED  # NSQ merges its channels' streams: with none there is nothing to report
        return summarize(self._opts.e2e_processing_latency_percentiles,
                         [part for window in windows for part in window.parts(now)])
