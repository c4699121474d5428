"""The ``nsq`` sink's throughput: ``.venv/bin/python -m bench.pipeline_sink [--rows 1000000]``.

Starts one nsqd at NSQ's default flags (past ``--mem-queue-size``'s 10,000 the topic goes to disk) and a local
Spark session, caches a DataFrame of ``--rows`` 200-byte binary bodies in ``--partitions`` partitions, then times
``df.write.format("nsq").save()`` with the sink's defaults (``mpub_chunk`` 500), after a small write that starts
Spark's Python workers. Prints msg/s, the CPU seconds nsqd spent per million messages, and checks that nsqd's topic
holds every row. ``--mpub-chunk`` changes the chunk (tuned settings: a second line, never the headline).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from bench.run import SIZE, cpu_seconds
from harness.processes import ROOT, NSQDProcess, start_nsqd

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

TOPIC = "bench_sink"


def local_session(cores: int, local_dir: Path) -> SparkSession:
    from services.pipeline.session import spark_session

    # Spark's Python workers import the project as this process does
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    session = spark_session(f"local[{cores}]", "bench-pipeline-sink", {
        "spark.ui.enabled": "false", "spark.local.dir": str(local_dir), "spark.driver.memory": "2g"})
    session.sparkContext.setLogLevel("ERROR")
    return session


def bodies(spark: SparkSession, rows: int, partitions: int) -> DataFrame:
    from pyspark.sql import functions as F

    frame = spark.range(rows, numPartitions=partitions)
    return frame.select(F.lpad(frame.id.cast("string"), SIZE, "0").cast("binary").alias("body"))


def write(frame: DataFrame, nsqd: NSQDProcess, chunk: int) -> None:
    (frame.write.format("nsq").option("nsqd_tcp_address", f"127.0.0.1:{nsqd.tcp_port}").option("topic", TOPIC)
     .option("mpub_chunk", str(chunk)).mode("append").save())


def topic_count(nsqd: NSQDProcess) -> int:
    stats = json.loads(nsqd.http("GET", f"/stats?format=json&topic={TOPIC}")[2])
    return sum(topic["message_count"] for topic in stats["topics"] if topic["topic_name"] == TOPIC)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 2, help="Spark's local[N]")
    parser.add_argument("--mpub-chunk", type=int, default=500)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        nsqd = start_nsqd(data_path=Path(scratch))
        spark = local_session(args.cores, Path(scratch) / "spark")
        try:
            frame = bodies(spark, args.rows, args.partitions).cache()
            frame.count()
            write(bodies(spark, 10_000, args.partitions), nsqd, args.mpub_chunk)  # starts the Python workers
            before, nsqd_cpu = topic_count(nsqd), cpu_seconds(nsqd.process.pid)
            start = time.perf_counter()
            write(frame, nsqd, args.mpub_chunk)
            seconds = time.perf_counter() - start
            nsqd_cpu = cpu_seconds(nsqd.process.pid) - nsqd_cpu
            received = topic_count(nsqd) - before
        finally:
            spark.stop()
            nsqd.stop()
    print(f"{args.rows:,} rows of {SIZE} bytes, {args.partitions} partitions, local[{args.cores}], "
          f"mpub_chunk {args.mpub_chunk}: {seconds:.2f} s, {args.rows / seconds:,.0f} msg/s, "
          f"nsqd {nsqd_cpu / args.rows * 1e6:.2f} CPU s / M msgs")
    if received < args.rows:
        sys.exit(f"nsqd holds {received:,} of {args.rows:,} messages")


if __name__ == "__main__":
    main()
