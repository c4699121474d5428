"""The soak (``bench/soak.py``), briefly: 45 s of the same mixed traffic on lookupd and two nsqds, topics and
channels created and deleted, consumers FINing, requeuing, timing out and dropping connections; then every
acknowledged message is FINed or went with a deleted channel, every process is alive, and no RSS grows
absurdly. The RSS figures that mean something come from the long run; over 45 s on a busy machine a slope is
noise, so the bound here only catches a leak of about a message's size per message."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import Settings, print_report, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SLOPE_LIMIT = 8 * 1024  # KiB per minute after the warm-up; ~400 msg/s leaking 200 bytes each would pass it
RSS_LIMIT = 150 * 1024  # KiB


def test_mixed_traffic_for_45_seconds_loses_nothing(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_soak(Settings(minutes=0.75, sample_every=2.0, rate=400.0), tmp_path, lines.append)
    print_report(result, lines.append)
    report = "\n".join(lines)
    print(report)
    tally = result.tally
    assert all(result.alive.values()), report
    assert result.drained, report
    assert tally.lost == tally.shortfall == 0, report
    assert not tally.anomalies() and not result.leftovers, report
    assert tally.finished > 5000 and tally.deleted > 0 and tally.redelivered > 0, report  # it did soak
    assert result.deletions["topics"] >= 1 and result.counters.consumers_started > 10, report
    assert min(result.nodes_known) == 2, report
    for series in result.series:
        assert result.slope(series.name) < SLOPE_LIMIT, report
        assert max(series.rss) < RSS_LIMIT, report
    assert result.ok, report
