"""LatencyLog: the relays' --status-every line."""

from __future__ import annotations

import logging

import pytest

from apps.latency_log import LatencyLog

log = logging.getLogger("test_latency_log")


def test_a_line_every_n_requests_with_their_percentiles_and_mean(caplog: pytest.LogCaptureFixture) -> None:
    latencies = LatencyLog("[aggregate]:", 100, log)
    with caplog.at_level(logging.INFO, logger=log.name):
        for millisecond in range(1, 201):  # 1 ms .. 200 ms: two lines of 100 each
            latencies.record(millisecond / 1000)
    assert [record.getMessage() for record in caplog.records] == [
        "[aggregate]: finished 100 - 99th: 99.00ms - 95th: 95.00ms - avg: 50.50ms",
        "[aggregate]: finished 100 - 99th: 199.00ms - 95th: 195.00ms - avg: 150.50ms",
    ]


def test_status_every_zero_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    latencies = LatencyLog("[x]:", 0, log)
    with caplog.at_level(logging.INFO, logger=log.name):
        for _ in range(1000):
            latencies.record(0.001)
    assert caplog.records == []


def test_summary_of_nothing_and_of_one() -> None:
    latencies = LatencyLog("[a]:", 10, log)
    assert latencies.summary() == "[a]: finished 0 - 99th: 0.00ms - 95th: 0.00ms - avg: 0.00ms"
    latencies.record(0.0125)
    assert latencies.summary() == "[a]: finished 1 - 99th: 12.50ms - 95th: 12.50ms - avg: 12.50ms"
