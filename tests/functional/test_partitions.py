"""Partitions, for real (harness.partitions): nsqd and lookupd in network namespaces of their own, links cut with
iptables DROP rules. ``bench.partitions`` runs the same rounds many times."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harness import netns
from harness.partitions import (CHANNEL, HEARTBEAT_INTERVAL, TOPIC, Cluster, Traffic, cluster, cut_consumer_mid_batch,
                                partition_round)
from services.nsqd.lookup_peer import PING_INTERVAL

pytestmark = pytest.mark.slow


@pytest.fixture
async def nodes(tmp_path: Path) -> AsyncIterator[Cluster]:
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    with cluster(tmp_path) as started:
        yield started


@pytest.mark.timeout(120)
async def test_nsqd_cut_from_lookupd_is_dropped_then_registered_again(nodes: Cluster) -> None:
    traffic = Traffic(nodes)
    await traffic.start()
    connected = time.time()
    try:
        # healed at the worst moment, nsqd having just begun its longest wait between reconnections; the old
        # connection ended at once (TCP can take a minute to: bench.partitions measures it)
        figures = await partition_round(nodes, traffic, 1, heal_at_longest_wait=True, registered_within=PING_INTERVAL,
                                        end_stale=True)
        channel = nodes.nsqd.channel_stats(TOPIC, CHANNEL)
    finally:
        await traffic.stop()
    tally = traffic.tally
    print(f"lookupd dropped nsqd {figures.dropped_after:.1f} s after the cut; nsqd registered again "
          f"{figures.registered_after:.1f} s after the heal; {len(tally.acknowledged)} messages acknowledged, "
          f"{tally.lost} lost, {tally.duplicated} twice, {channel['timeout_count']} timed out")
    assert tally.lost == 0
    # no consumer was cut off: the one consumer is still on the connection it opened before the cut, and a message
    # came twice only where nsqd timed it out (a machine busy enough to hold the consumer past --msg-timeout)
    assert [client["connect_ts"] <= connected for client in channel["clients"]] == [True]
    assert tally.duplicated <= channel["timeout_count"]


async def test_consumer_cut_off_mid_batch_loses_nothing(nodes: Cluster) -> None:
    batch = await cut_consumer_mid_batch(nodes, "batch", messages=40, rdy=10, fin=4)
    print(f"consumer cut off holding {batch.held} messages: {batch.timed_out} timed out, {batch.tally.duplicated} "
          f"delivered twice, {batch.tally.lost} lost; nsqd dropped it {batch.dead_after:.1f} s after the cut")
    assert batch.tally.lost == 0
    assert batch.timed_out >= batch.held  # and what nsqd sent the dead consumer meanwhile, as NSQ does
    assert batch.tally.duplicated == 10 - 4  # received and not FINed by the consumer cut off: B had them again
    assert batch.dead_after < 2 * HEARTBEAT_INTERVAL + 3
