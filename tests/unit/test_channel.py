"""Channel semantics driven directly, with time as a parameter (no sleeping)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from services.nsqd import topology
from services.nsqd.channel import Channel, ChannelError
from services.nsqd.client import Client
from services.nsqd.storage import Storage
from services.nsqd.message import InFlightMessage, QueuedMessage
from services.nsqd.recorder import NULL_CHANNEL
from services.nsqd.stats import channel_stats
from tests.unit.nsqd_fixtures import RecordingTransport, make_client, options


def entry(n: int) -> QueuedMessage:
    return (b"%016d" % n, b"body%d" % n, time.time_ns(), 0)


def make_channel(name: str = "c", **opts: object) -> tuple[Channel, list[Channel]]:
    gone: list[Channel] = []
    settings = options(**opts)
    return Channel("t", name, settings, Storage(None, settings), NULL_CHANNEL, gone.append), gone


def subscribe(channel: Channel, client_id: int = 1, ready: int = 1,
              msg_timeout: float = 60.0) -> tuple[Client, RecordingTransport]:
    client, transport = make_client(client_id, 0, msg_timeout)
    client.subscribe(channel)
    client.set_ready(ready)
    return client, transport


def test_messages_wait_until_a_client_has_room() -> None:
    channel, _ = make_channel()
    channel.put_held([entry(1), entry(2), entry(3)])
    assert channel.depth == 3 and channel.message_count == 3
    client, transport = subscribe(channel, ready=2)
    assert [m.body for m in transport.messages()] == [b"body1", b"body2"]
    assert channel.depth == 1 and len(channel.in_flight) == 2 and client.in_flight_count == 2


def test_fin_frees_the_window() -> None:
    channel, _ = make_channel()
    channel.put_held([entry(1), entry(2)])
    client, transport = subscribe(channel, ready=1)
    first = transport.messages()[0]
    channel.finish(client, first.id)
    channel.update_ready(client)
    second = transport.messages()
    assert [m.body for m in second] == [b"body2"] and client.finish_count == 1
    with pytest.raises(ChannelError, match="ID not in flight"):
        channel.finish(client, first.id)


def test_only_the_owner_can_acknowledge() -> None:
    channel, _ = make_channel()
    owner, transport = subscribe(channel, 1)
    other, _ = subscribe(channel, 2)
    channel.put(entry(1))
    msg = transport.messages()[0]
    actions: list[Callable[[], object]] = [lambda: channel.finish(other, msg.id),
                                           lambda: channel.requeue(other, msg.id, 0),
                                           lambda: channel.touch(other, msg.id)]
    for action in actions:
        with pytest.raises(ChannelError, match="client does not own message"):
            action()


def test_timeout_redelivers_with_attempts_incremented() -> None:
    channel, _ = make_channel()
    client, transport = subscribe(channel, ready=1, msg_timeout=10)
    start = time.monotonic()
    channel.put(entry(1))
    assert transport.messages()[0].attempts == 1
    assert not channel.process_in_flight(start + 9.9)
    assert channel.process_in_flight(start + 10.5)
    again = transport.messages()
    assert again[0].attempts == 2 and channel.timeout_count == 1 and channel.requeue_count == 0
    assert client.in_flight_count == 1


def test_touch_extends_the_deadline_up_to_max_msg_timeout() -> None:
    channel, _ = make_channel(max_msg_timeout=30.0)
    client, transport = subscribe(channel, ready=1, msg_timeout=10)
    start = time.monotonic()
    channel.put(entry(1))
    msg = transport.messages()[0]
    channel.touch(client, msg.id)
    assert not channel.process_in_flight(start + 9.5)
    assert channel.in_flight.get(msg.id) is not None
    deadline = channel.in_flight.get(msg.id).deadline  # type: ignore[union-attr]
    assert deadline <= start + 30 + 0.5
    assert channel.process_in_flight(start + 40)


def test_requeue_now_and_with_a_delay() -> None:
    channel, _ = make_channel()
    client, transport = subscribe(channel, ready=1)
    channel.put(entry(1))
    msg = transport.messages()[0]
    channel.requeue(client, msg.id, 0)
    channel.update_ready(client)
    assert transport.messages()[0].attempts == 2
    now = time.monotonic()
    channel.requeue(client, msg.id, 5.0)
    channel.update_ready(client)
    assert transport.messages() == [] and len(channel.deferred) == 1
    assert not channel.process_deferred(now + 4.9)
    assert channel.process_deferred(now + 5.1)
    assert transport.messages()[0].attempts == 3 and channel.requeue_count == 2


def test_deferred_messages_count_when_deferred() -> None:
    channel, _ = make_channel()
    now = time.monotonic()
    channel.put_deferred(entry(1), 2.0, now)
    assert channel.message_count == 1 and channel.depth == 0 and len(channel.deferred) == 1
    assert channel.process_deferred(now + 2.0) and channel.depth == 1


def test_pause_holds_and_unpause_delivers() -> None:
    channel, _ = make_channel()
    client, transport = subscribe(channel, ready=5)
    channel.pause()
    channel.put_held([entry(1), entry(2)])
    assert transport.messages() == [] and channel.depth == 2
    channel.unpause()
    assert len(transport.messages()) == 2


def test_consumers_share_round_robin() -> None:
    channel, _ = make_channel()
    _, first = subscribe(channel, 1, ready=10)
    _, second = subscribe(channel, 2, ready=10)
    channel.put_held([entry(n) for n in range(10)])
    assert len(first.messages()) == 5 and len(second.messages()) == 5


def test_empty_drops_everything() -> None:
    channel, _ = make_channel()
    client, transport = subscribe(channel, ready=1)
    channel.put_held([entry(1), entry(2)])
    channel.put_deferred(entry(3), 10, time.monotonic())
    channel.empty()
    assert (channel.depth, len(channel.in_flight), len(channel.deferred), client.in_flight_count) == (0, 0, 0, 0)


def test_disconnected_clients_messages_stay_in_flight_until_timeout() -> None:
    channel, _ = make_channel()
    client, transport = subscribe(channel, ready=1, msg_timeout=5)
    channel.put(entry(1))
    channel.remove_client(client)
    assert len(channel.in_flight) == 1
    channel.process_in_flight(time.monotonic() + 6)
    assert channel.depth == 1


def test_max_channel_consumers() -> None:
    channel, _ = make_channel(max_channel_consumers=1)
    subscribe(channel, 1)
    with pytest.raises(ChannelError, match="consumers for t:c exceeds limit of 1"):
        subscribe(channel, 2)


def test_ephemeral_channel_reports_its_last_client_and_drops_overflow() -> None:
    channel, gone = make_channel("tail#ephemeral", mem_queue_size=2)
    client, _ = subscribe(channel, ready=0)
    channel.put_held([entry(n) for n in range(5)])
    assert channel.depth == 2 and channel.dropped_count == 3 and channel.message_count == 5
    channel.remove_client(client)
    assert gone == [channel]


def test_sampling_keeps_about_the_rate() -> None:
    channel, _ = make_channel()
    client, transport = subscribe(channel, ready=2500)
    client.sample_rate = 49
    channel.put_held([entry(n) for n in range(2000)])
    kept = len(transport.messages())
    assert 800 < kept < 1200  # keep probability is (rate + 1) / 100


def test_messages_past_the_ttl_are_dropped_as_they_are_taken_to_be_delivered() -> None:
    channel, _ = make_channel(msg_ttl=60.0)
    old = (b"%016d" % 1, b"old", time.time_ns() - 61 * 10**9, 0)
    channel.put_held([old, entry(2), old[:1] + (b"old too",) + old[2:], entry(4)])
    assert channel.depth == 4  # counted until taken
    client, transport = subscribe(channel, ready=1)  # one at a time
    assert [m.body for m in transport.messages()] == [b"body2"]
    channel.finish(client, b"%016d" % 2)
    channel.update_ready(client)
    assert [m.body for m in transport.messages()] == [b"body4"]
    assert channel.expired_count == 2 and channel.depth == 0
    assert channel_stats(channel, options(msg_ttl=60.0), False, time.monotonic())["expired_count"] == 2


def test_a_batch_delivery_leaves_out_what_is_past_the_ttl() -> None:
    channel, _ = make_channel(msg_ttl=60.0)
    old = (b"%016d" % 9, b"old", time.time_ns() - 61 * 10**9, 0)
    channel.put_held([entry(1), old, entry(3)])
    _, transport = subscribe(channel, ready=10)
    assert [m.body for m in transport.messages()] == [b"body1", b"body3"] and channel.expired_count == 1


def test_a_message_delivered_max_attempts_times_is_parked_then_replayed_with_attempts_reset() -> None:
    channel, _ = make_channel(max_attempts=2)
    client, transport = subscribe(channel, ready=1)
    channel.put(entry(1))
    for attempts in (1, 2):
        msg = transport.messages()[0]
        assert msg.attempts == attempts
        channel.requeue(client, msg.id, 0)
        channel.update_ready(client)
    assert transport.messages() == []  # a third delivery would pass the limit
    assert (channel.dead_letter_count, len(channel.dead_letters), channel.depth) == (1, 1, 0)
    channel.set_max_attempts(0)  # the channel's own: none
    assert channel.replay(10) == 1 and len(channel.dead_letters) == 0
    assert transport.messages()[0].attempts == 1
    assert channel_stats(channel, options(max_attempts=2), False, time.monotonic())["dead_letter_count"] == 1


class WindowConsumer:
    """The least a channel needs of a consumer (``Consumer``): a window, and somewhere to send messages."""

    msg_timeout = 60.0
    sample_rate = 0
    output_buffer_size = 16 * 1024

    def __init__(self, consumer_id: int, ready: int, locality: int = topology.ELSEWHERE) -> None:
        self.id = consumer_id
        self.locality = locality
        self.ready, self.in_flight = ready, 0
        self.received: list[bytes] = []
        self.paused_by_send = False  # a full socket: the send that fills it pauses the consumer

    @property
    def room(self) -> int:
        return 0 if self.paused_by_send else max(0, self.ready - self.in_flight)

    def send_message(self, msg: InFlightMessage) -> None:
        self.send_messages([msg])

    def send_messages(self, messages: list[InFlightMessage]) -> None:
        self.in_flight += len(messages)
        self.received += [msg.body for msg in messages]

    def finished(self, count: int) -> None:
        self.in_flight -= count

    def requeued(self) -> None:
        self.in_flight -= 1

    def timed_out(self) -> None:
        self.in_flight -= 1

    def emptied(self) -> None:
        self.in_flight = 0

    def close(self) -> None:
        pass

    def stats(self) -> dict[str, object]:
        return {}


def test_a_channel_needs_of_its_consumers_only_the_consumer_view() -> None:
    channel, _ = make_channel()
    first, second = WindowConsumer(1, ready=2), WindowConsumer(2, ready=1)
    for consumer in (first, second):
        channel.add_client(consumer)
        channel.update_ready(consumer)
    channel.put_held([entry(n) for n in range(5)])
    assert (first.received, second.received) == ([b"body0", b"body2"], [b"body1"])  # round robin, each its window
    assert channel.depth == 2
    channel.finish(second, channel.in_flight.values()[1].id)
    channel.update_ready(second)
    assert second.received == [b"body1", b"body3"] and channel.depth == 1


def test_topology_aware_delivery_prefers_the_zone_then_the_region_and_never_holds_a_message_back() -> None:
    channel, _ = make_channel(enable_experiment=[topology.EXPERIMENT], topology_zone="z1", topology_region="r1")
    far, region, zone, zone_too = (WindowConsumer(1, 10, topology.ELSEWHERE), WindowConsumer(2, 10, topology.REGION),
                                   WindowConsumer(3, 2, topology.ZONE), WindowConsumer(4, 1, topology.ZONE))
    for consumer in (far, region, zone, zone_too):
        channel.add_client(consumer)
        channel.update_ready(consumer)
    channel.put_held([entry(n) for n in range(5)])
    # the zone's consumers while they have room (round robin between them), then the region's
    assert (zone.received, zone_too.received) == ([b"body0", b"body2"], [b"body1"])
    assert region.received == [b"body3", b"body4"] and far.received == []
    region.ready = 2  # the region's full too: whoever has room gets the rest
    channel.put_held([entry(5)])
    assert far.received == [b"body5"]
    stats = channel_stats(channel, options(), False, time.monotonic())
    assert (stats["zone_local_msg_count"], stats["region_local_msg_count"], stats["global_msg_count"]) == (3, 2, 1)


def test_without_the_experiment_every_consumer_is_equal_and_deliveries_are_global() -> None:
    channel, _ = make_channel(topology_zone="z1", topology_region="r1")
    far, zone = WindowConsumer(1, 10), WindowConsumer(2, 10)  # what IDENTIFY makes of any client then
    for consumer in (far, zone):
        channel.add_client(consumer)
        channel.update_ready(consumer)
    channel.put_held([entry(n) for n in range(4)])
    assert len(far.received) == len(zone.received) == 2
    stats = channel_stats(channel, options(), False, time.monotonic())
    assert stats["global_msg_count"] == 4 and "zone_local_msg_count" not in stats


def test_a_consumer_that_loses_its_room_in_a_send_gets_nothing_more() -> None:
    channel, _ = make_channel()
    consumer = WindowConsumer(1, ready=10)
    channel.add_client(consumer)
    channel.update_ready(consumer)
    channel.put_held([entry(0)])
    consumer.paused_by_send = True  # its socket's buffer filled: the channel is not told until it has room again
    channel.put_held([entry(1), entry(2)])
    assert consumer.received == [b"body0"] and channel.depth == 2
    consumer.paused_by_send = False
    channel.update_ready(consumer)
    assert consumer.received == [b"body0", b"body1", b"body2"] and channel.depth == 0


def test_timed_out_messages_refill_their_consumers_window_once() -> None:
    channel, _ = make_channel()
    consumer = WindowConsumer(1, ready=2)
    channel.add_client(consumer)
    channel.update_ready(consumer)
    channel.put_held([entry(n) for n in range(4)])
    assert consumer.received == [b"body0", b"body1"]
    assert channel.process_in_flight(time.monotonic() + 61)
    # the two timed out go back to the queue, behind the two waiting: the freed window takes the oldest waiting
    assert consumer.received[2:] == [b"body2", b"body3"] and channel.depth == 2
    assert channel.timeout_count == 2 and consumer.in_flight == 2
