from __future__ import annotations

from services.nsqd.lookup_peer import CONNECT_TIMEOUT, MAX_RECONNECT_DELAY, PING_INTERVAL, reconnect_delay


def test_reconnect_delays_double_up_to_their_cap() -> None:
    assert [reconnect_delay(failures) for failures in range(1, 8)] == [1, 2, 4, 8, 12, 12, 12]


def test_a_lookupd_back_is_reached_within_one_ping_interval() -> None:
    # the worst moment to come back is just after an attempt began: it times out, then the longest wait
    # (NSQ reconnects at its next PING: within one interval too)
    assert max(reconnect_delay(failures) for failures in range(1, 100)) == MAX_RECONNECT_DELAY
    assert MAX_RECONNECT_DELAY + CONNECT_TIMEOUT <= PING_INTERVAL
