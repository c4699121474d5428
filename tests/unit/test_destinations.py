"""Destinations: the address(es) each message of a relay goes to, by mode, and hostpool's retries."""

from __future__ import annotations

import pytest

from apps.destinations import Destinations

A, B, C = "a", "b", "c"


def picks(destinations: Destinations, count: int, now: float = 0.0) -> list[str]:
    return [name for _ in range(count) for name in destinations.choose(now)]


def test_round_robin_takes_the_addresses_in_turn_failing_or_not() -> None:
    destinations = Destinations([A, B, C], "round-robin")
    destinations.mark(B, False, 0.0)
    assert picks(destinations, 7) == [A, B, C, A, B, C, A]


def test_multicast_sends_each_message_everywhere() -> None:
    destinations = Destinations([A, B], "multicast")
    destinations.mark(A, False, 0.0)
    assert destinations.choose(0.0) == [A, B]


def test_hostpool_takes_the_addresses_in_turn_while_they_succeed() -> None:
    destinations = Destinations([A, B, C], "hostpool")
    assert picks(destinations, 6) == [A, B, C, A, B, C]


def test_hostpool_leaves_out_a_failed_address_until_its_retry_time() -> None:
    destinations = Destinations([A, B, C], "hostpool", retry_delay=30.0)
    assert destinations.choose(0.0) == [A]
    destinations.mark(A, False, 1.0)
    assert picks(destinations, 4, now=30.0) == [B, C, B, C]
    assert picks(destinations, 3, now=31.5) == [A, B, C]  # one retry at its time...
    assert picks(destinations, 3, now=31.5) == [B, C, B]  # ...then out again until the next one


def test_hostpool_doubles_the_wait_after_each_failed_retry_up_to_the_most() -> None:
    destinations = Destinations([A, B], "hostpool", retry_delay=10.0, max_retry_delay=35.0)
    destinations.mark(A, False, 0.0)
    retries = []
    for second in range(200):
        for name in destinations.choose(float(second)):
            if name == A:
                retries.append(second)
                destinations.mark(A, False, float(second))
    assert retries[:5] == [10, 30, 65, 100, 135]  # out 10 s, then 20, then 35 (not 40) each time


def test_hostpool_takes_an_address_back_once_a_retry_succeeds() -> None:
    destinations = Destinations([A, B], "hostpool", retry_delay=5.0)
    destinations.mark(A, False, 0.0)
    assert picks(destinations, 2, now=1.0) == [B, B]
    assert destinations.choose(6.0) == [A]
    destinations.mark(A, True, 6.0)
    assert picks(destinations, 4, now=6.0) == [B, A, B, A]


def test_hostpool_tries_everything_again_when_every_address_is_out() -> None:
    destinations = Destinations([A, B], "hostpool")
    destinations.mark(A, False, 0.0)
    destinations.mark(B, False, 0.0)
    assert picks(destinations, 3, now=1.0) == [A, B, A]  # never held back for want of a destination


def test_a_second_failure_while_out_does_not_push_the_retry_back() -> None:
    destinations = Destinations([A, B], "hostpool", retry_delay=10.0)
    destinations.mark(A, False, 0.0)
    destinations.mark(A, False, 9.0)  # a request sent before it was out, failing late
    assert A in picks(destinations, 2, now=10.5)


@pytest.mark.parametrize(("addresses", "mode"), [([], "hostpool"), ([A], "epsilon-greedy"), ([A], "all")])
def test_no_addresses_or_an_unknown_mode_is_refused(addresses: list[str], mode: str) -> None:
    with pytest.raises(ValueError):
        Destinations(addresses, mode)
