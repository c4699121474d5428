"""Losing lookupd, for real (harness.lookupd_loss, one round): two lookupds killed with SIGKILL at once and started
again on their ports, one replaced by a new one elsewhere (``PUT /config/nsqlookupd_tcp_addresses``), then one of
the two killed alone, while producers publish on (some finding their nsqd through lookupd) and consumers found
through lookupd consume on. A lookupd that comes (back) knows the whole cluster within one ping interval, nothing
is lost, and losing one of two lookupds goes unnoticed. ``bench.lookupd_loss`` runs many rounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.lookupd_loss import Traffic, cluster, every_lookupd_down, one_lookupd_down, replace_lookupd
from services.nsqd.lookup_peer import PING_INTERVAL

pytestmark = pytest.mark.slow


@pytest.mark.timeout(120)
async def test_the_cluster_rides_out_losing_every_lookupd(tmp_path: Path) -> None:
    with cluster(tmp_path) as nodes:
        traffic = Traffic(nodes)
        await traffic.start()
        try:
            outage = await every_lookupd_down(nodes, traffic, "down", outage=2.0)
            replaced = await replace_lookupd(nodes, slot=1)
            one = await one_lookupd_down(nodes, traffic, "one", slot=0, outage=2.0)
        finally:
            tallies = await traffic.stop()
    print(f"\nevery lookupd down {outage.seconds:.1f} s: knew the cluster "
          f"{' and '.join(f'{s:.2f}' for s in outage.knew_after)} s after their restart, the producers that look "
          f"nsqd up could not publish for {max(outage.unable):.1f} s; replaced: {replaced:.2f} s; one down alone: "
          f"knew it again after {one.knew_after:.2f} s, nobody noticed; {len(traffic.published)} acknowledged, "
          f"{sum(len(tally.received) for tally in tallies)} copies received")
    assert max(*outage.knew_after, replaced, one.knew_after) <= PING_INTERVAL
    # with no lookupd, the producers that look nsqd up could not publish (from their first lookup after the kill
    # until a lookupd knew a node again); the consumers of before consumed on
    assert all(unable >= outage.seconds - 0.5 for unable in outage.unable)
    assert outage.found_after <= PING_INTERVAL and outage.found_within < 5
    assert one.unable == [0.0, 0.0] and one.found_within < 5  # one of two lookupds lost: nobody noticed
    assert traffic.failed == 0
    assert sum(tally.lost for tally in tallies) == 0
    assert sum(tally.duplicated for tally in tallies) == 0
    assert len(tallies) == 5  # c and d all along, and a channel per phase
