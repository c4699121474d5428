"""Busy polling starts when requests come closer together than the window and stops after a quiet window."""

from __future__ import annotations

import asyncio

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


async def test_a_burst_polls_until_a_quiet_window() -> None:
    clock = Clock()
    poll = BusyPoll(window=0.0001, clock=clock)
    poll.activity()
    clock.now += 0.00003
    poll.activity()
    assert poll.polling
    await turns(5)
    assert poll.polling  # no time passed: still within the window
    clock.now += 0.0002
    await turns(2)
    assert not poll.polling
    poll.activity()  # the first after a quiet spell does not start it again
    assert not poll.polling


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
