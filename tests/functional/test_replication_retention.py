"""Retention with replication: the mirrors retain what an origin's topic retains, and its settings travel with its
publishes, so that after the origin is killed with -9 and its data directory deleted, the nsqd that adopted it
rewinds the topic over what the lost nsqd retained; and so on when the adopter is lost in turn."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.etcd import EtcdCluster
from harness.processes import NSQDProcess, wait_for
from tests.functional.test_replication_adoption import finish, finished_takeover, start_cluster

COUNT = 200


def retained(nsqd: NSQDProcess, topic: str) -> int:
    document: dict[str, Any] = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])
    return int(document["topics"][0].get("retained_count", 0)) if document.get("topics") else 0


def rewind(nsqd: NSQDProcess, channel: str) -> dict[str, Any]:
    status, _, body = nsqd.http("POST", f"/channel/create?topic=orders&channel={channel}&since=earliest")
    assert status == 200, (body, "\n".join(nsqd.log_lines[-30:]))
    answer: dict[str, Any] = json.loads(body)
    return answer


def lose(etcd: EtcdCluster, nodes: list[NSQDProcess], lost: NSQDProcess, data_path: Path) -> NSQDProcess:
    """``lost`` killed with -9 and its data directory deleted: the survivor that adopted it."""
    lost.process.send_signal(signal.SIGKILL)
    lost.process.wait()
    shutil.rmtree(data_path)
    wait_for(lambda: finished_takeover(etcd, lost), 30, "the takeover done")
    record: dict[str, Any] = json.loads(etcd.get(f"/nsq/mirrors/127.0.0.1:{lost.tcp_port}") or b"{}")
    [adopter] = [node for node in nodes if record["adopted_by"] == f"127.0.0.1:{node.tcp_port}"]
    return adopter


def test_the_adopter_rewinds_over_what_the_lost_nsqd_retained_and_so_on(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> None:
    a, b, c = start_cluster(etcd, nsqd_factory, "--retention-time=1h")
    assert a.http("POST", "/topic/create?topic=orders")[0] == 200
    assert a.http("POST", "/channel/create?topic=orders&channel=archive")[0] == 200
    bodies = [b"order %d" % number for number in range(COUNT)]
    a.multi_publish("orders", bodies, batch=50)
    assert sorted(asyncio.run(finish(a, "orders", "archive", COUNT))) == sorted(bodies)
    assert retained(a, "orders") == COUNT
    assert a.http("POST", "/topic/retention?topic=orders&time=2h")[0] == 200  # travels with the next publish
    a.publish("orders", b"order 200")
    bodies.append(b"order 200")
    assert sorted(asyncio.run(finish(a, "orders", "archive", 1))) == [b"order 200"]
    assert a.http("POST", "/pub?topic=orders&defer=600000", b"later")[0] == 200  # due in ten minutes

    adopter = lose(etcd, [b, c], a, tmp_path / "nsqd0")
    wait_for(lambda: retained(adopter, "orders") == COUNT + 2, 10, "the history taken over")
    topic = json.loads(adopter.http("GET", "/stats?format=json&topic=orders")[2])["topics"][0]
    assert topic["retention_time"] == "2h0m0s"  # the lost nsqd's settings
    assert rewind(adopter, "replayed") == {"rewound": COUNT + 2, "created": True}
    assert sorted(asyncio.run(finish(adopter, "orders", "replayed", COUNT + 1))) == sorted(bodies)
    assert adopter.channel_stats("orders", "replayed")["deferred_count"] == 1  # still waiting for its time

    survivor = c if adopter is b else b
    wait_for(lambda: retained(survivor, "orders") == 0 and json.loads(
        survivor.http("GET", "/stats?format=json")[2])["replication"]["mirroring"], 10, "the adopter mirrored")
    index = 1 if adopter is b else 2
    last = lose(etcd, [survivor], adopter, tmp_path / f"nsqd{index}")
    assert last is survivor
    wait_for(lambda: retained(last, "orders") == COUNT + 2, 10, "the history taken over again")
    assert rewind(last, "again") == {"rewound": COUNT + 2, "created": True}
    assert sorted(asyncio.run(finish(last, "orders", "again", COUNT + 1))) == sorted(bodies)
    assert last.channel_stats("orders", "again")["deferred_count"] == 1  # its due time kept through two takeovers
