"""An archive built after the fact: two nsqd retain what their topic published (``--retention-time``), another
channel consumed all of it, and only then does nsq_to_parquet start with ``--since=1h``: its channel is made from
history on both nsqd, and the archive holds each event once. Also the source's ``since`` option checked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.archive_jobs import SMALL_BATCHES, Driver
from harness.processes import NSQDProcess, finished, start_lookupd, start_nsqd, wait_for
from nsqspark.options import OptionError, parse_options
from tests.functional.spark import spark  # noqa: F401  (the fixture)
from tests.functional.test_nsq_to_parquet import archived_ids

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TOPIC = "history"
PER_NODE = 3000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[NSQDProcess, list[NSQDProcess]]]:
    started = [start_lookupd()]
    try:
        for index in range(2):
            (tmp_path / f"nsqd{index}").mkdir()
            started.append(start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{started[0].tcp_port}",
                                      "--retention-time=2h", f"--node-id={index + 1}",
                                      data_path=tmp_path / f"nsqd{index}"))
        yield started[0], started[1:]
    finally:
        for process in reversed(started):
            process.stop()


@pytest.mark.timeout(300)
def test_an_archive_of_the_last_hour_built_after_the_fact_holds_each_event_once(
        cluster: tuple[NSQDProcess, list[NSQDProcess]], spark: SparkSession, tmp_path: Path) -> None:
    lookupd, nodes = cluster
    for index, node in enumerate(nodes):
        assert node.http("POST", f"/topic/create?topic={TOPIC}")[0] == 200
        assert node.http("POST", f"/channel/create?topic={TOPIC}&channel=live")[0] == 200
        node.multi_publish(TOPIC, [json.dumps({"n": index * PER_NODE + n}).encode() for n in range(PER_NODE)],
                           batch=500)
        assert node.http("POST", f"/channel/empty?topic={TOPIC}&channel=live")[0] == 200  # read and gone
    wait_for(lambda: len(json.loads(lookupd.http("GET", f"/lookup?topic={TOPIC}")[2])["producers"]) == 2, 10,
             "both nsqd registered")
    driver = Driver(lookupd, tmp_path, TOPIC, (*SMALL_BATCHES, "--since=1h"))
    try:
        wait_for(lambda: sum(finished(node.channel_stats(TOPIC, "nsq_to_parquet")) for node in nodes)
                 >= 2 * PER_NODE, 180, "the history archived", interval=0.5)
    finally:
        driver.stop()
    assert sorted(archived_ids(spark, driver.output)) == list(range(2 * PER_NODE))
    # a second run finds its channel: nothing from history again
    driver = Driver(lookupd, tmp_path, TOPIC, (*SMALL_BATCHES, "--since=1h"))
    try:
        wait_for(lambda: "msg/s" in driver.log_path.read_text(), 120, "the second run under way", interval=0.5)
    finally:
        driver.stop()
    assert [node.channel_stats(TOPIC, "nsq_to_parquet")["depth"] for node in nodes] == [0, 0]
    assert len(archived_ids(spark, driver.output)) == 2 * PER_NODE


def test_since_needs_to_know_where_nsqds_http_api_is() -> None:
    with pytest.raises(OptionError, match="option since"):
        parse_options({"topic": "t", "channel": "c", "nsqd_tcp_address": "127.0.0.1:4150", "since": "1h"})
    options = parse_options({"topic": "t", "channel": "c", "nsqd_tcp_address": "127.0.0.1:4150", "since": "1h",
                             "nsqd_http_address": "127.0.0.1:4151"})
    assert (options.since, options.nsqd_http_addresses) == ("1h", ("127.0.0.1:4151",))
