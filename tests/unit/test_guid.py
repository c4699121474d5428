"""Message IDs: 16 lowercase hex characters of ((ts - twepoch) << 22) | (node << 12) | sequence.

The factory reads its clock (``time.time_ns`` unless given another); tests give it one they move by hand.
"""

from __future__ import annotations

import re
import time

import pytest

from services.nsqd.guid import TWEPOCH, GuidFactory

ID = re.compile(rb"[0-9a-f]{16}")
# a tick is 2**20 ns, about a millisecond
START_TICK = (1_700_000_000 * 10**9) >> 20


class Clock:
    def __init__(self, tick: int) -> None:
        self.tick = tick

    def time_ns(self) -> int:
        # somewhere inside the tick, so rounding cannot hide an off-by-one
        return (self.tick << 20) + 12345


@pytest.fixture
def clock() -> Clock:
    return Clock(START_TICK)


def fields(msg_id: bytes) -> tuple[int, int, int]:
    """(tick, node, sequence) of an ID."""
    value = int(msg_id, 16)
    return (value >> 22) + TWEPOCH, (value >> 12) & 0x3FF, value & 0xFFF


def test_id_is_16_lowercase_hex_bytes() -> None:
    msg_id = GuidFactory(1023).next_id()
    assert type(msg_id) is bytes
    assert ID.fullmatch(msg_id)


def test_real_clock_ids_decode_to_about_now() -> None:
    before = time.time_ns() >> 20
    msg_id = GuidFactory(5).next_id()
    after = time.time_ns() >> 20
    tick, node, _ = fields(msg_id)
    assert before <= tick <= after
    assert node == 5


@pytest.mark.parametrize("node_id", [0, 1, 511, 1023])
def test_layout_decodes_back(clock: Clock, node_id: int) -> None:
    ids = GuidFactory(node_id, clock.time_ns).next_ids(3)
    assert [fields(msg_id) for msg_id in ids] == [(START_TICK, node_id, sequence) for sequence in range(3)]
    expected = ((START_TICK - TWEPOCH) << 22) | (node_id << 12)
    assert ids[0] == f"{expected:016x}".encode()


def test_ids_strictly_increase_with_a_real_clock() -> None:
    factory = GuidFactory(7)
    ids = [factory.next_id() for _ in range(5000)] + factory.next_ids(5000) + [factory.next_id()]
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert all(ID.fullmatch(msg_id) for msg_id in ids)


def test_more_than_4096_in_one_tick_are_unique_and_increasing(clock: Clock) -> None:
    factory = GuidFactory(3, clock.time_ns)
    ids = factory.next_ids(4096 * 3 + 10)
    assert len(set(ids)) == len(ids)
    assert all(a < b for a, b in zip(ids, ids[1:]))
    # once a tick's 4096 sequences are used the next tick is borrowed, without waiting for the clock
    ticks = [fields(msg_id)[0] for msg_id in ids]
    assert ticks[4095] == START_TICK and ticks[4096] == START_TICK + 1
    assert ticks[-1] == START_TICK + 3
    assert {fields(msg_id)[1] for msg_id in ids} == {3}


def test_one_at_a_time_past_a_full_tick(clock: Clock) -> None:
    factory = GuidFactory(3, clock.time_ns)
    ids = [factory.next_id() for _ in range(5000)]
    assert all(a < b for a, b in zip(ids, ids[1:]))
    assert fields(ids[4096]) == (START_TICK + 1, 3, 0)


def test_sequence_restarts_on_a_new_tick(clock: Clock) -> None:
    factory = GuidFactory(9, clock.time_ns)
    first = factory.next_ids(10)
    clock.tick += 1
    second = factory.next_ids(2)
    assert [fields(msg_id) for msg_id in second] == [(START_TICK + 1, 9, 0), (START_TICK + 1, 9, 1)]
    assert first[-1] < second[0]


def test_clock_going_backwards_keeps_ids_increasing(clock: Clock) -> None:
    factory = GuidFactory(2, clock.time_ns)
    first = factory.next_ids(5)
    clock.tick -= 1000
    second = factory.next_ids(5)
    assert first[-1] < second[0]
    assert [fields(msg_id)[2] for msg_id in second] == [5, 6, 7, 8, 9]


def test_borrowed_ticks_are_not_reused_when_the_clock_catches_up(clock: Clock) -> None:
    factory = GuidFactory(4, clock.time_ns)
    borrowed = factory.next_ids(4096 * 2 + 1)  # ends in START_TICK + 2
    clock.tick += 1  # the clock reaches a tick already used up
    later = factory.next_ids(3)
    assert borrowed[-1] < later[0]
    assert len(set(borrowed) | set(later)) == len(borrowed) + len(later)
    clock.tick += 10  # and then passes it
    assert fields(factory.next_id()) == (START_TICK + 11, 4, 0)


def test_factories_with_different_nodes_never_collide(clock: Clock) -> None:
    a, b = GuidFactory(1, clock.time_ns), GuidFactory(2, clock.time_ns)
    ids_a, ids_b = a.next_ids(5000), b.next_ids(5000)
    assert not set(ids_a) & set(ids_b)


def test_each_factory_counts_on_its_own(clock: Clock) -> None:
    # NSQ has one factory per topic: IDs are unique per (node, topic), not across topics
    a, b = GuidFactory(1, clock.time_ns), GuidFactory(1, clock.time_ns)
    assert a.next_ids(2) == b.next_ids(2)


def test_zero_ids(clock: Clock) -> None:
    factory = GuidFactory(1, clock.time_ns)
    assert factory.next_ids(0) == []
    assert fields(factory.next_id())[2] == 0


def test_next_id_continues_the_sequence_of_next_ids(clock: Clock) -> None:
    one_by_one, batched = GuidFactory(5, clock.time_ns), GuidFactory(5, clock.time_ns)
    assert [one_by_one.next_id() for _ in range(9000)] == batched.next_ids(9000)
