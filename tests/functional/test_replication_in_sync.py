"""An origin's in-sync set in a real etcd: written by the origin alone; a write by anyone else, or a newer epoch
already there, fences it."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from harness.etcd import EtcdCluster, start_etcd
from services.nsqd.replication.in_sync import Fenced, InSyncRecord
from shared.etcd.client import Etcd


@pytest.fixture(scope="module")
def etcd() -> Iterator[EtcdCluster]:
    cluster = start_etcd()
    yield cluster
    cluster.stop()


async def test_the_origin_rewrites_its_set_and_a_write_by_another_fences_it(etcd: EtcdCluster) -> None:
    client = Etcd(etcd.addresses)
    try:
        record = InSyncRecord(client, "a:4150")
        await record.write(7, frozenset({"b:4150", "c:4150"}))
        await record.write(7, frozenset({"c:4150"}))
        assert json.loads(etcd.get("/nsq/mirrors/a:4150") or b"") == {"epoch": 7, "in_sync": ["c:4150"]}
        etcd.put("/nsq/mirrors/a:4150", b'{"epoch": 7, "adopted_by": "c:4150"}')
        with pytest.raises(Fenced, match="written by another nsqd"):
            await record.write(7, frozenset())
        # registered again, under a newer epoch: the origin starts over
        await record.write(9, frozenset({"b:4150"}))
        assert json.loads(etcd.get("/nsq/mirrors/a:4150") or b"")["epoch"] == 9
        stale = InSyncRecord(client, "a:4150")
        with pytest.raises(Fenced, match="newer epoch"):
            await stale.write(8, frozenset())
    finally:
        await client.close()
