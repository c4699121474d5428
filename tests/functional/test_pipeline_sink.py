"""The ``nsq`` sink against real lookupd and nsqd processes: batch and streaming writes, routing by a topic column,
a node killed mid-write, and inputs that must fail the write."""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.processes import NSQDProcess, free_port, start_lookupd, start_nsqd, wait_for
from nsqclient.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    decode_message,
    encode_command,
)
from tests.functional.spark import spark  # noqa: F401

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytest.importorskip("pyspark")

# a write of 100,000 rows takes 12 s alone and several times that beside a full test run; a test cut off inside a
# py4j call breaks the Spark session its worker shares with every later Spark test
pytestmark = pytest.mark.timeout(240)

BODY_SIZE = 200


def numbered(spark: SparkSession, rows: int, partitions: int = 4, binary: bool = False) -> DataFrame:
    """``body``: the row's number, zero-padded to BODY_SIZE bytes."""
    from pyspark.sql import functions as F

    frame = spark.range(rows, numPartitions=partitions)
    body = F.lpad(frame.id.cast("string"), BODY_SIZE, "0")
    return frame.select((body.cast("binary") if binary else body).alias("body"))


@contextmanager
def cluster(tmp_path: Path, *flags: str, nodes: int = 2) -> Iterator[tuple[NSQDProcess, list[NSQDProcess]]]:
    """A lookupd and ``nodes`` nsqd registered with it (already listed at ``/nodes``), all stopped afterwards."""
    lookupd = start_lookupd()
    started: list[NSQDProcess] = []
    try:
        for number in range(nodes):
            data_path = tmp_path / f"nsqd{number}"
            data_path.mkdir()
            started.append(start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", *flags,
                                      data_path=data_path))
        wait_for(lambda: len(json.loads(lookupd.http("GET", "/nodes")[2])["producers"]) == nodes)
        yield lookupd, started
    finally:
        for nsqd in started:
            nsqd.stop()
        lookupd.stop()


def topic_stats(nsqd: NSQDProcess) -> dict[str, dict[str, int]]:
    stats = json.loads(nsqd.http("GET", "/stats?format=json")[2])
    return {topic["topic_name"]: topic for topic in stats["topics"]}


async def drain(nsqd: NSQDProcess, topic: str) -> list[bytes]:
    """Every message of a topic that has no channel yet (so its depth is all of them), FINed as they come."""
    expected = topic_stats(nsqd).get(topic, {}).get("depth", 0)
    reader, writer = await asyncio.open_connection(*nsqd.tcp_address)
    writer.write(MAGIC_V2 + encode_command(b"SUB", topic.encode(), b"drain") + encode_command(b"RDY", b"2500"))
    decoder = FrameDecoder()
    bodies: list[bytes] = []
    try:
        while len(bodies) < expected:
            data = await asyncio.wait_for(reader.read(1 << 20), 10)
            assert data, "nsqd closed the connection"
            replies = []
            for frame_type, payload in decoder.feed(data):
                assert frame_type != FRAME_TYPE_ERROR, payload
                if frame_type == FRAME_TYPE_MESSAGE:
                    message = decode_message(payload)
                    bodies.append(message.body)
                    replies.append(encode_command(b"FIN", message.id))
                elif payload == HEARTBEAT:
                    replies.append(b"NOP\n")
            writer.write(b"".join(replies))
    finally:
        writer.close()
        await writer.wait_closed()
    return bodies


class Killer(threading.Thread):
    """Kills nsqd (SIGKILL) as soon as ``topic`` has received messages there."""

    def __init__(self, nsqd: NSQDProcess, topic: str) -> None:
        super().__init__(daemon=True)
        self._nsqd, self._topic = nsqd, topic
        self._write_done = threading.Event()
        self._killed = False
        self.start()

    def run(self) -> None:
        while not self._write_done.is_set():
            if topic_stats(self._nsqd).get(self._topic, {}).get("message_count", 0):
                self._nsqd.process.send_signal(signal.SIGKILL)
                self._killed = True
                return
            time.sleep(0.01)

    def stop(self) -> bool:
        """Called once the write is over: whether nsqd was killed before."""
        self._write_done.set()
        self.join()
        return self._killed


def ids(bodies: list[bytes]) -> Counter[int]:
    assert all(len(body) == BODY_SIZE for body in bodies)
    return Counter(int(body) for body in bodies)


def test_every_row_reaches_one_of_the_nodes_lookupd_lists(spark: SparkSession, tmp_path: Path) -> None:
    rows = 100_000
    with cluster(tmp_path) as (lookupd, nodes):
        (numbered(spark, rows).write.format("nsq").option("lookupd_http_address", lookupd.http_address_text)
         .option("topic", "sunk").mode("append").save())
        received = [asyncio.run(drain(nsqd, "sunk")) for nsqd in nodes]
    assert all(len(bodies) > rows // 10 for bodies in received), [len(bodies) for bodies in received]
    # no node failed, so no chunk was sent twice
    assert ids(received[0] + received[1]) == Counter(range(rows))


def test_a_node_killed_mid_write_loses_nothing(spark: SparkSession, tmp_path: Path) -> None:
    """Its chunks go to the other node; what it acknowledged before dying is on its disk and served after a
    restart (--mem-queue-size=0: every message is written before nsqd answers)."""
    rows = 200_000
    with cluster(tmp_path, "--mem-queue-size=0") as (lookupd, (survivor, victim)):
        # a restart only loads the topics nsqd.dat lists, and nsqd records a new topic there only after it has
        # acknowledged the topic's first messages: the topic must be on record before the kill
        for number, nsqd in enumerate((survivor, victim)):
            assert nsqd.http("POST", "/topic/create?topic=sunk")[0] == 200
            wait_for(lambda: "sunk" in (tmp_path / f"nsqd{number}" / "nsqd.dat").read_text())
        # the write runs in this thread: a Python data source is only found from the thread that made the session
        killer = Killer(victim, "sunk")
        try:
            (numbered(spark, rows).write.format("nsq").option("lookupd_http_address", lookupd.http_address_text)
             .option("topic", "sunk").mode("append").save())
        finally:
            killed_mid_write = killer.stop()
        assert killed_mid_write, "the write ended before the victim received anything"
        received = asyncio.run(drain(survivor, "sunk"))
        restarted = start_nsqd("--mem-queue-size=0", data_path=tmp_path / "nsqd1")
        try:
            recovered = asyncio.run(drain(restarted, "sunk"))
        finally:
            restarted.stop()
    counts = ids(received + recovered)
    missing = sorted(set(range(rows)) - set(counts))
    assert not missing, (f"{len(missing)} rows lost ({missing[:3]}...{missing[-3:]}); {len(received)} from the "
                         f"survivor, {len(recovered)} from the victim")
    assert recovered, "the victim acknowledged nothing before it died"
    duplicates = sum(counts.values()) - rows
    print(f"{len(received)} from the survivor, {len(recovered)} from the victim, {duplicates} duplicates")


def test_a_topic_column_routes_each_row(spark: SparkSession, tmp_path: Path) -> None:
    from pyspark.sql import functions as F

    nsqd = start_nsqd(data_path=tmp_path)
    try:
        frame = numbered(spark, 3000, partitions=2, binary=True)
        remainder = F.col("body").cast("string").cast("long") % 3
        # every third row names no topic and goes to the topic option's
        topic = F.when(remainder == 0, F.lit(None)).otherwise(F.concat(F.lit("routed_"), remainder.cast("string")))
        (frame.withColumn("topic", topic).write.format("nsq").option("nsqd_tcp_address", nsqd.tcp_address_text)
         .option("topic", "fallback").option("mpub_chunk", "100").mode("append").save())
        counts = {name: topic["message_count"] for name, topic in topic_stats(nsqd).items()}
        assert counts == {"fallback": 1000, "routed_1": 1000, "routed_2": 1000}
        assert ids(asyncio.run(drain(nsqd, "routed_1"))) == Counter(range(1, 3000, 3))
    finally:
        nsqd.stop()


def test_a_stream_publishes_each_micro_batch_once(spark: SparkSession, tmp_path: Path) -> None:
    source, checkpoint = tmp_path / "in", tmp_path / "checkpoint"
    source.mkdir()
    nsqd = start_nsqd(data_path=tmp_path)

    def run_stream() -> None:
        query = (spark.readStream.text(str(source)).withColumnRenamed("value", "body").writeStream.format("nsq")
                 .option("nsqd_tcp_address", nsqd.tcp_address_text).option("topic", "streamed")
                 .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
        query.awaitTermination(60)
        assert query.exception() is None

    try:
        for number in range(3):
            (source / f"{number}.txt").write_text("".join(f"{number}-{line}\n" for line in range(100)))
        run_stream()
        assert topic_stats(nsqd)["streamed"]["message_count"] == 300
        (source / "3.txt").write_text("".join(f"3-{line}\n" for line in range(100)))
        run_stream()  # from the checkpoint: only the new file
        bodies = asyncio.run(drain(nsqd, "streamed"))
    finally:
        nsqd.stop()
    assert sorted(bodies) == sorted(f"{number}-{line}".encode() for number in range(4) for line in range(100))


async def test_chunks_a_dead_node_does_not_take_go_to_the_next(nsqd: NSQDProcess) -> None:
    """The sink's publishing without Spark: once the dead node has failed, it is left for the live one."""
    import pyarrow as pa  # type: ignore[import-untyped]  # no stubs or py.typed

    from nsqspark.chunk_router import CHUNKS_IN_FLIGHT
    from nsqspark.options import parse_options
    from nsqspark.sink import SinkConfig, publish

    dead = f"127.0.0.1:{free_port()}"
    options = parse_options({"nsqd_tcp_address": f"{dead},{nsqd.tcp_address_text}", "topic": "t", "mpub_chunk": "2",
                             "connect_timeout": "1"})
    batches = [pa.record_batch({"body": pa.array([b"%d" % n for n in range(first, first + 50)])})
               for first in range(0, 100, 50)]
    # the sorted ring is [dead, live] or [live, dead]: starting at each, one chunk in two is the dead node's turn
    for start in (0, 1):
        report = await publish(SinkConfig(options, "body"), batches, start)
        assert (report.messages, report.chunks, report.per_node) == (100, 50, {nsqd.tcp_address_text: 100})
        # only chunks already under way when it failed were sent to it (not one in two)
        assert 1 <= report.retries <= CHUNKS_IN_FLIGHT
    assert sorted(await drain(nsqd, "t")) == sorted([b"%d" % n for n in range(100)] * 2)


async def test_chunks_a_node_stops_answering_go_to_the_next(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    """A node that took a chunk, then answers nothing within publish_timeout: the chunks written to it since go to
    the other node, and only what it acknowledged is counted as its."""
    from nsqspark.chunk_router import Chunk, ChunkRouter
    from nsqspark.options import parse_options

    # the ring's order: silent first
    silent, live = sorted((nsqd_factory(), nsqd_factory()), key=lambda node: node.tcp_address_text)
    options = parse_options({"nsqd_tcp_address": f"{silent.tcp_address_text},{live.tcp_address_text}", "topic": "t",
                             "publish_timeout": "0.5"})
    router = ChunkRouter(options, start=0)
    try:
        await router.send(Chunk("t", [b"0", b"1"]))
        # on a thread: the loop must run meanwhile, to write the chunk
        await asyncio.to_thread(wait_for, lambda: topic_stats(silent).get("t", {}).get("message_count") == 2)
        silent.process.send_signal(signal.SIGSTOP)
        try:
            for first in range(2, 20, 2):
                await router.send(Chunk("t", [b"%d" % first, b"%d" % (first + 1)]))
            report = await router.finish()
        finally:
            silent.process.send_signal(signal.SIGCONT)
    finally:
        await router.close()
    assert (report.messages, report.chunks, report.per_node) == (20, 10, {silent.tcp_address_text: 2,
                                                                         live.tcp_address_text: 18})
    assert report.retries >= 1
    assert sorted(await drain(live, "t"), key=int) == [b"%d" % n for n in range(2, 20)]


async def test_a_chunk_every_node_would_refuse_fails_at_once(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    import pyarrow as pa

    from nsqspark.chunk_router import SinkError
    from nsqspark.options import parse_options
    from nsqspark.sink import SinkConfig, publish

    nodes = [nsqd_factory("--max-msg-size=100") for _ in range(2)]
    options = parse_options({"nsqd_tcp_address": ",".join(node.tcp_address_text for node in nodes), "topic": "t"})
    batch = pa.record_batch({"body": pa.array([b"x" * 101])})
    with pytest.raises(SinkError, match=r"refused 1 messages for topic 't': E_BAD_MESSAGE"):
        await publish(SinkConfig(options, "body"), [batch], 0)
    assert [topic_stats(node).get("t", {}).get("message_count", 0) for node in nodes] == [0, 0]


def test_no_reachable_node_fails_the_write_quickly(spark: SparkSession) -> None:
    start = time.monotonic()
    with pytest.raises(Exception, match=r"no nsqd took a chunk of 10 messages for topic 'lost'"):
        (numbered(spark, 10, partitions=1).write.format("nsq").option("topic", "lost")
         .option("nsqd_tcp_address", f"127.0.0.1:{free_port()},127.0.0.1:{free_port()}")
         .option("connect_timeout", "1").mode("append").save())
    assert time.monotonic() - start < 20


def test_a_lookupd_that_knows_no_node_fails_the_write(spark: SparkSession) -> None:
    lookupd = start_lookupd()
    try:
        with pytest.raises(Exception, match="no nsqd to publish to: the lookupds know no nsqd"):
            (numbered(spark, 10, partitions=1).write.format("nsq").option("topic", "lost")
             .option("lookupd_http_address", lookupd.http_address_text).mode("append").save())
    finally:
        lookupd.stop()


@pytest.mark.parametrize(("rows", "schema", "options", "error"), [
    ([("0",), (None,)], "body string", {"topic": "t"}, "row 1 of the partition has a null body"),
    ([("0", "t"), ("1", "bad topic!")], "body string, topic string", {},
     "row 1 of the partition has an invalid topic name 'bad topic!'"),
    ([("0", "t"), ("1", None)], "body string, topic string", {},
     "row 1 of the partition has a null topic and no topic option"),
    ([("0",)], "body string", {}, "give the topic option or a topic column"),
    ([("0",)], "body string", {"topic": "bad topic!"}, "option topic: invalid topic name"),
    ([(0,)], "body int", {"topic": "t"}, "the rows need a body column, binary or string"),
])
def test_rows_that_cannot_be_published_fail_the_write(spark: SparkSession, nsqd: NSQDProcess,
                                                      rows: list[tuple[object, ...]], schema: str,
                                                      options: dict[str, str], error: str) -> None:
    frame = spark.createDataFrame(rows, schema).coalesce(1)
    with pytest.raises(Exception, match=error):
        (frame.write.format("nsq").option("nsqd_tcp_address", nsqd.tcp_address_text).options(**options)
         .mode("append").save())
