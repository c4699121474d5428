"""A channel's consumers as it sees them (``Consumer``: what ``client.Client`` is to it), and the ones it may deliver
to next (``ReadyConsumers``).

The ready ones are the subscribed consumers that had room when they last told the channel, so delivery never scans
all consumers; one that lost its room since is dropped when delivery comes to it (a consumer says when it gains room,
not when it loses it). They take turns, round robin; with topology-aware delivery the nearest with room goes first.
Deliveries are counted by how near their consumer was: NSQ's ``global_msg_count``, and with topology-aware delivery
its ``zone_local_msg_count`` and ``region_local_msg_count``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Hashable, Protocol

from . import topology

if TYPE_CHECKING:
    from .message import InFlightMessage


class Consumer(Hashable, Protocol):
    """A subscribed client as its channel sees it (``client.Client``)."""

    id: int
    msg_timeout: float
    sample_rate: int
    output_buffer_size: int
    locality: int  # how near it is (topology.py)

    @property
    def room(self) -> int:
        """How many more messages it may receive now."""

    def send_message(self, msg: InFlightMessage) -> None: ...

    def send_messages(self, messages: list[InFlightMessage]) -> None: ...

    def finished(self, count: int) -> None: ...

    def requeued(self) -> None: ...

    def timed_out(self) -> None: ...

    def emptied(self) -> None:
        """The channel dropped every message, the ones in flight to it included."""

    def close(self) -> None: ...

    def stats(self) -> dict[str, Any]:
        """Its object in /stats."""


class ReadyConsumers:
    def __init__(self, topology_aware: bool) -> None:
        self._ready: dict[Consumer, None] = {}
        self._topology_aware = topology_aware
        self.delivered_count = 0
        self.zone_local_count = 0
        self.region_local_count = 0

    def __len__(self) -> int:
        return len(self._ready)

    def add(self, consumer: Consumer) -> None:
        self._ready[consumer] = None

    def discard(self, consumer: Consumer) -> None:
        self._ready.pop(consumer, None)

    def room(self) -> int:
        """How many messages they would take right now."""
        return sum(consumer.room for consumer in self._ready)

    def next(self) -> Consumer | None:
        """The consumer whose turn it is, if any has room."""
        if self._topology_aware:
            return self._nearest()
        ready = self._ready
        while ready:
            consumer = next(iter(ready))
            if consumer.room > 0:
                return consumer
            del ready[consumer]
        return None

    def _nearest(self) -> Consumer | None:
        ready, nearest = self._ready, None
        for consumer in list(ready):
            if consumer.room <= 0:
                del ready[consumer]
            elif nearest is None or consumer.locality > nearest.locality:
                nearest = consumer
                if consumer.locality == topology.ZONE:
                    break
        return nearest

    def delivered(self, consumer: Consumer, count: int) -> None:
        """``consumer`` was sent ``count`` messages: counted, and its turn passes to the next."""
        locality = consumer.locality
        if locality == topology.ELSEWHERE:
            self.delivered_count += count
        elif locality == topology.ZONE:
            self.zone_local_count += count
        else:
            self.region_local_count += count
        ready = self._ready
        if len(ready) > 1 and consumer in ready:
            del ready[consumer]
            ready[consumer] = None


# a message frame's bytes besides the body: size, frame type, timestamp, attempts, ID
_FRAME_OVERHEAD = 4 + 4 + 8 + 2 + 16


def per_output_buffer(consumer: Consumer, body_size: int) -> int:
    """How many messages of ``body_size`` fill the consumer's output buffer (at least one)."""
    return max(1, consumer.output_buffer_size // (_FRAME_OVERHEAD + body_size))


def sampled_out(consumer: Consumer) -> bool:
    """NSQ's sampling: whether the message about to go to a consumer that samples is left out (for the whole
    channel). ``random`` is loaded only once a consumer samples."""
    from random import randrange

    return randrange(100) > consumer.sample_rate
