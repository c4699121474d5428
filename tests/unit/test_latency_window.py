"""End-to-end latency percentiles over a window covered by two halves; time is a parameter."""

from __future__ import annotations

import json

from services.nsqd.latency_window import DISABLED, RESERVOIR_SIZE, LatencyWindow, summarize

WINDOW = 10.0  # halves of 5 s


def window(*percentiles: float, now: float = 0.0) -> LatencyWindow:
    return LatencyWindow(list(percentiles), WINDOW, now)


def values(result: dict[str, object]) -> list[tuple[float, int]]:
    percentiles = result["percentiles"]
    assert isinstance(percentiles, list)
    return [(p["quantile"], p["value"]) for p in percentiles]


def test_disabled_shape() -> None:
    assert DISABLED == {"count": 0, "percentiles": None}
    assert json.dumps(DISABLED) == '{"count": 0, "percentiles": null}'


def test_percentiles_are_kept_in_descending_order() -> None:
    assert window(0.5, 0.99, 1.0, 0.95).percentiles == [1.0, 0.99, 0.95, 0.5]


def test_percentiles_of_one_to_a_hundred() -> None:
    latencies = window(0.5, 0.99, 1.0)
    for value in range(1, 101):
        latencies.add(value, now=1.0)
    result = latencies.result(now=2.0)
    assert result["count"] == 100
    # the value at rank int(q * n), which is also what NSQ's merged perks stream answers for this data
    assert values(result) == [(1.0, 100), (0.99, 100), (0.5, 51)]


def test_insertion_order_does_not_matter() -> None:
    latencies = window(0.5, 0.9)
    for value in [7, 3, 9, 1, 5, 10, 2, 8, 4, 6]:
        latencies.add(value, now=1.0)
    assert values(latencies.result(now=1.0)) == [(0.9, 10), (0.5, 6)]


def test_constant_latency() -> None:
    latencies = window(0.5, 0.99)
    for _ in range(10):
        latencies.add(1_000_000, now=0.5)
    assert latencies.result(now=0.5) == {
        "count": 10, "percentiles": [{"quantile": 0.99, "value": 1_000_000}, {"quantile": 0.5, "value": 1_000_000}]}


def test_single_sample() -> None:
    latencies = window(0.5, 1.0)
    latencies.add(42, now=0.0)
    assert values(latencies.result(now=0.0)) == [(1.0, 42), (0.5, 42)]


def test_result_is_json_ready() -> None:
    latencies = window(0.99)
    latencies.add(5, now=0.0)
    assert json.loads(json.dumps(latencies.result(now=0.0))) == {"count": 1,
                                                                 "percentiles": [{"quantile": 0.99, "value": 5}]}


def test_both_halves_are_reported() -> None:
    latencies = window(1.0)
    latencies.add(10, now=1.0)
    latencies.add(20, now=6.0)  # after window/2: the first half becomes the previous one
    result = latencies.result(now=7.0)
    assert result["count"] == 2
    assert values(result) == [(1.0, 20)]


def test_the_oldest_half_is_dropped() -> None:
    latencies = window(1.0)
    latencies.add(100, now=1.0)
    latencies.add(20, now=6.0)
    latencies.add(30, now=12.0)  # another half later: the samples from t=1 are gone
    result = latencies.result(now=12.0)
    assert result["count"] == 2
    assert values(result) == [(1.0, 30)]


def test_asking_also_rotates() -> None:
    latencies = window(1.0)
    latencies.add(100, now=1.0)
    assert latencies.result(now=6.0)["count"] == 1  # moved to the previous half
    assert latencies.result(now=12.0)["count"] == 0  # and dropped


def test_everything_is_dropped_after_a_long_silence() -> None:
    latencies = window(0.5)
    latencies.add(1, now=1.0)
    latencies.add(2, now=6.0)
    assert latencies.result(now=100.0) == {"count": 0, "percentiles": [{"quantile": 0.5, "value": 0}]}
    latencies.add(3, now=100.0)
    assert latencies.result(now=100.0)["count"] == 1


def test_samples_younger_than_half_a_window_are_always_reported() -> None:
    latencies = window(1.0)
    added: list[float] = []
    for step in range(100):
        now = step * 0.7
        latencies.add(step, now=now)
        added.append(now)
        recent = sum(1 for t in added if now - t < WINDOW / 2)
        assert latencies.result(now=now)["count"] >= recent


def test_no_sample_older_than_the_window_is_reported() -> None:
    latencies = window(1.0)
    latencies.add(1, now=9.99)
    latencies.add(2, now=19.9)
    # the first sample is 14.9 s old, more than the 10 s window
    assert latencies.result(now=24.89)["count"] == 1


def test_enabled_but_empty_lists_each_percentile_with_zero() -> None:
    # NSQ's Quantile.Result lists every percentile; perks answers 0 for an empty stream
    assert window(0.99, 0.5).result(now=0.0) == {
        "count": 0, "percentiles": [{"quantile": 0.99, "value": 0}, {"quantile": 0.5, "value": 0}]}


def test_memory_is_bounded_but_count_is_exact() -> None:
    latencies = window(0.5, 1.0)
    for value in range(10 * RESERVOIR_SIZE):
        latencies.add(value, now=1.0)
    current, previous = latencies.parts(now=1.0)
    assert len(current.samples) == RESERVOIR_SIZE and previous.samples == []
    result = latencies.result(now=1.0)
    assert result["count"] == 10 * RESERVOIR_SIZE
    (q1, top), (q2, median) = values(result)
    assert (q1, q2) == (1.0, 0.5)
    assert 0 <= median <= top < 10 * RESERVOIR_SIZE
    assert set(current.samples) <= set(range(10 * RESERVOIR_SIZE))


def test_summarize_merges_parts() -> None:
    a, b = window(1.0), window(1.0)
    for value in (1, 2, 3):
        a.add(value, now=0.0)
    for value in (10, 20):
        b.add(value, now=0.0)
    result = summarize([0.5, 1.0], a.parts(0.0) + b.parts(0.0))
    assert result == {"count": 5, "percentiles": [{"quantile": 1.0, "value": 20}, {"quantile": 0.5, "value": 3}]}


def test_summarize_of_nothing() -> None:
    assert summarize([0.99], []) == {"count": 0, "percentiles": [{"quantile": 0.99, "value": 0}]}
