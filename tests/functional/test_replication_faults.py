"""The total-queue check over one round of every fault (harness.replication_faults; ``python -m bench.replication``
runs more): three nsqd at replication factor 3 with producers and a consumer all along lose no acknowledged
message and deliver nothing never published, whatever one nsqd or etcd member goes through."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import netns
from harness.etcd import require_etcd
from harness.replication_faults import FAULTS, ReplicatedCluster, Traffic, inflict, replicated_cluster

pytestmark = pytest.mark.slow

LIVENESS = 4.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ReplicatedCluster]:
    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    require_etcd()
    with replicated_cluster(tmp_path, LIVENESS) as started:
        yield started


@pytest.mark.timeout(400)
async def test_no_acknowledged_message_is_lost_whatever_one_node_goes_through(cluster: ReplicatedCluster) -> None:
    await cluster.wait_whole()
    traffic = Traffic(cluster)
    await traffic.start()
    outcomes = []
    try:
        for turn, fault in enumerate(FAULTS):
            outcomes.append(await inflict(cluster, traffic, fault, cluster.nodes[turn % len(cluster.nodes)]))
    finally:
        await traffic.stop()
    ledger = traffic.ledger
    assert len(ledger.acknowledged) > 1000
    assert not ledger.lost, f"{len(ledger.lost)} acknowledged messages lost: {sorted(ledger.lost)[:10]}"
    assert not ledger.unexpected, sorted(ledger.unexpected)[:10]
    for outcome in outcomes:
        # the lost node's messages flow from a survivor within the liveness timeout and a few seconds
        assert outcome.failover is None or outcome.failover < LIVENESS + 5, outcome
        if outcome.fault != "rolling-restart":  # there, every nsqd is stopped in its turn
            assert outcome.survivors_failed == 0, outcome  # a survivor's producer is never refused
