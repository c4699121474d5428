"""How max_in_flight is spread over connections as RDY counts."""

from __future__ import annotations

from hypothesis import given, strategies as st

from nsqclient.rdy import changes_in_safe_order, spread


def test_even_spread_with_the_remainder_to_the_first() -> None:
    assert spread(10, ["a", "b", "c"], {"a": 2500, "b": 2500, "c": 2500}) == {"a": 4, "b": 3, "c": 3}


def test_fewer_than_connections_gives_some_zero() -> None:
    assert spread(2, ["a", "b", "c"], {"a": 9, "b": 9, "c": 9}) == {"a": 1, "b": 1, "c": 0}
    assert spread(2, ["c", "a", "b"], {"a": 9, "b": 9, "c": 9}) == {"c": 1, "a": 1, "b": 0}  # rotated


def test_each_nsqd_max_rdy_count_is_respected() -> None:
    assert spread(5000, ["a", "b"], {"a": 2500, "b": 100}) == {"a": 2500, "b": 100}


def test_no_connections() -> None:
    assert spread(10, [], {}) == {}


@given(st.integers(1, 10_000), st.lists(st.integers(1, 3000), min_size=1, max_size=50))
def test_the_total_never_exceeds_max_in_flight(max_in_flight: int, max_rdy: list[int]) -> None:
    keys = list(range(len(max_rdy)))
    counts = spread(max_in_flight, keys, dict(zip(keys, max_rdy)))
    assert sum(counts.values()) <= max_in_flight
    assert all(0 <= counts[key] <= max_rdy[key] for key in keys)
    if max_in_flight >= len(keys):
        assert all(counts[key] >= 1 for key in keys)  # nobody starves while there is enough to go round


@given(st.dictionaries(st.integers(0, 9), st.integers(0, 100), min_size=1),
       st.dictionaries(st.integers(0, 9), st.integers(0, 100), min_size=1))
def test_changes_never_raise_the_total_above_both_ends(current: dict[int, int], target: dict[int, int]) -> None:
    target = {key: target.get(key, 0) for key in current}
    state = dict(current)
    bound = max(sum(current.values()), sum(target.values()))
    for key, count in changes_in_safe_order(current, target):
        state[key] = count
        assert sum(state.values()) <= bound
    assert state == target
