"""Busy polling starts when requests come closer together than the window, stops when empty turns outrun the
requests they catch, and holds off after spells that caught little."""

from __future__ import annotations

import asyncio

from services.nsqd import busy_poll
from services.nsqd.busy_poll import BusyPoll


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def turns(count: int) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


async def test_requests_far_apart_never_poll() -> None:
    clock = Clock()
    poll = BusyPoll(window=0.0001, clock=clock)
    for _ in range(5):
        poll.activity()
        assert not poll.polling
        clock.now += 0.001


async def test_polling_lasts_while_requests_keep_coming_and_stops_when_empty_turns_run_out() -> None:
    clock = Clock()
    poll = BusyPoll(window=0.0001, clock=clock)
    poll.activity()
    clock.now += 0.00003
    poll.activity()
    assert poll.polling
    for _ in range(100):  # one request every few turns: polling pays, and goes on
        poll.activity()
        await turns(3)
        assert poll.polling
    await turns(busy_poll.MAX_CREDIT + 1)  # then nothing: the credit runs out within MAX_CREDIT empty turns
    assert not poll.polling
    clock.now += 0.00003
    poll.activity()  # a productive spell holds nothing off: the next close pair starts it again
    assert poll.polling


async def test_requests_too_far_apart_in_turns_stop_it_and_hold_it_off_longer_each_time() -> None:
    clock = Clock()
    poll = BusyPoll(window=0.0001, clock=clock)
    poll.activity()
    clock.now += 0.00005
    poll.activity()  # close enough in time to start it
    held_off: list[float] = []
    for _ in range(4):
        assert poll.polling
        await turns(busy_poll.TURNS_PER_REQUEST + 1)  # nothing more arrives: the spell caught nothing
        assert not poll.polling
        stopped = clock.now
        while not poll.polling:  # close pairs do not start it again until the back-off has passed
            clock.now += 0.00005
            poll.activity()
        held_off.append(clock.now - stopped)
    assert held_off[0] >= busy_poll.BACK_OFF
    assert all(later > 1.5 * earlier for earlier, later in zip(held_off, held_off[1:]))


async def test_many_arrivals_in_one_turn_stop_it_for_a_window() -> None:
    clock = Clock()
    poll = BusyPoll(window=0.0001, clock=clock)
    poll.activity()
    poll.activity()
    assert poll.polling
    for _ in range(3):  # three clients in one turn: the loop is busy without polling
        poll.activity()
    await turns(2)
    assert not poll.polling
    poll.activity()
    assert not poll.polling  # not again within the window
    clock.now += 0.00005
    poll.activity()
    assert not poll.polling
    clock.now += 0.00006
    poll.activity()
    assert poll.polling
