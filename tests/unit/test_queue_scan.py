from __future__ import annotations

import random

from services.nsqd.queue_scan import QueueScanner
from tests.unit.nsqd_fixtures import options


class ScriptedChannel:
    """Records scans; reports work while it has some."""

    def __init__(self, work: int) -> None:
        self.work = work
        self.scans: list[float] = []

    def process_in_flight(self, now: float) -> bool:
        self.scans.append(now)
        if self.work:
            self.work -= 1
            return True
        return False

    def process_deferred(self, now: float) -> bool:
        return False


def scanner(channels: list[ScriptedChannel], **opts: object) -> QueueScanner:
    return QueueScanner(options(**opts), lambda: list(channels), random.Random(1))  # type: ignore[arg-type]


def test_no_channels_no_work() -> None:
    assert scanner([]).scan(0.0) is False


def test_selection_count_channels_per_round() -> None:
    channels = [ScriptedChannel(0) for _ in range(50)]
    scan = scanner(channels, queue_scan_selection_count=20)
    scan.refresh()
    assert scan.scan(1.0) is False
    assert sum(len(c.scans) for c in channels) == 20
    assert all(len(c.scans) <= 1 for c in channels)


def test_dirty_rounds_repeat_until_clean() -> None:
    channels = [ScriptedChannel(3) for _ in range(4)]
    scan = scanner(channels, queue_scan_selection_count=4)
    scan.refresh()
    rounds = 1
    while scan.scan(float(rounds)):
        rounds += 1
    assert rounds == 4 and all(c.work == 0 for c in channels)


def test_dirty_percent_threshold() -> None:
    channels = [ScriptedChannel(1)] + [ScriptedChannel(0) for _ in range(3)]
    scan = scanner(channels, queue_scan_selection_count=4, queue_scan_dirty_percent=0.25)
    scan.refresh()
    assert scan.scan(0.0) is False  # 1 of 4 dirty is not more than 25 %


def test_new_channels_join_at_refresh_and_pool_size_follows() -> None:
    channels: list[ScriptedChannel] = []
    scan = scanner(channels, queue_scan_worker_pool_max=4)
    scan.refresh()
    channels.extend(ScriptedChannel(0) for _ in range(40))
    scan.scan(0.0)
    assert all(not c.scans for c in channels)
    scan.refresh()
    assert scan.pool_size == 4
    scan.scan(0.0)
    assert any(c.scans for c in channels)
