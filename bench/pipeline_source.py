"""The ``nsq`` Spark source's throughput: ``.venv/bin/python -m bench.pipeline_source [--messages 500000]``.

Starts one nsqd (``--mem-queue-size`` above the backlog, ``--max-rdy-count`` = ``--max-in-flight``), fills a topic
with 200-byte messages, then streams the channel into Parquet in a local Spark session (``local[2]``) until nsqd
reports every message FIN'd, that is written and committed. Prints msg/s over the whole run (the query's start and
its first, cold, micro-batch included) and in steady state (from the first FIN to the last), and the batches' sizes.

A micro-batch holds at most half of ``max_in_flight`` messages (see ``services.pipeline.stream_reader``) and costs
a fixed few hundred milliseconds in Spark however small it is, so the window decides the rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.run import SIZE, cpu_seconds
from shared.client import Producer
from tests.processes import ROOT, NSQDProcess, finished, start_nsqd

TOPIC = "bench_pipeline"
CHANNEL = "parquet"


async def fill(address: str, messages: int) -> None:
    body = b"x" * SIZE
    async with Producer(address) as producer:
        for start in range(0, messages, 1000):
            await producer.multi_publish(TOPIC, [body] * min(1000, messages - start))


def stream(args: argparse.Namespace, nsqd: NSQDProcess, workdir: Path) -> None:
    from services.pipeline.session import spark_session

    # Spark's Python workers import the project as this process does
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    spark = spark_session("local[2]", "bench-pipeline-source", {
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2", "spark.local.dir": str(workdir / "local"),
        "spark.driver.memory": "2g"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        query = (spark.readStream.format("nsq").option("topic", TOPIC).option("channel", CHANNEL)
                 .option("nsqd_tcp_address", f"127.0.0.1:{nsqd.tcp_port}")
                 .option("max_in_flight", str(args.max_in_flight))
                 .option("max_messages_per_batch", str(args.max_messages_per_batch)).load()
                 .writeStream.format(args.sink).option("path", str(workdir / "parquet"))
                 .option("checkpointLocation", str(workdir / "checkpoint"))
                 .trigger(processingTime=args.trigger).start())
        try:
            report(args.messages, nsqd)
            print(batch_sizes(query.recentProgress))
            if args.sink == "parquet":
                rows = spark.read.parquet(str(workdir / "parquet")).count()
                print(f"rows in Parquet: {rows:,}")
        finally:
            query.stop()
    finally:
        spark.stop()


def report(messages: int, nsqd: NSQDProcess) -> None:
    start = time.perf_counter()
    cpu = cpu_seconds(nsqd.process.pid)
    first_fin = None
    while (done := finished(nsqd.channel_stats(TOPIC, CHANNEL))) < messages:
        if done and first_fin is None:
            first_fin = (time.perf_counter(), done)
        time.sleep(0.05)
    end = time.perf_counter()
    print(f"all {messages:,} FIN'd in {end - start:.1f}s: {messages / (end - start):,.0f} msg/s "
          f"(query start and cold first batch included)")
    if first_fin is not None and end > first_fin[0]:
        steady = (messages - first_fin[1]) / (end - first_fin[0])
        print(f"steady state (first FIN to last): {steady:,.0f} msg/s")
    print(f"nsqd CPU: {(cpu_seconds(nsqd.process.pid) - cpu) / messages * 1e6:.2f} s / M msgs")


def batch_sizes(progress: list[dict[str, Any]]) -> str:
    """Sizes of the batches that read something, and where a batch's time goes (ms, mean of those after the
    first, whose Python workers start cold)."""
    batches = [entry for entry in progress if entry["numInputRows"]]
    if not batches:
        return "no batches"
    sizes = [entry["numInputRows"] for entry in batches]
    warm = batches[1:] or batches
    phases = {phase: sum(entry["durationMs"].get(phase, 0) for entry in warm) / len(warm)
              for phase in ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets",
                            "triggerExecution")}
    return (f"{len(sizes)} batches of {min(sizes):,}..{max(sizes):,} rows; per batch (ms): "
            + ", ".join(f"{phase} {ms:.0f}" for phase, ms in phases.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=500_000)
    parser.add_argument("--max-in-flight", type=int, default=400_000)
    parser.add_argument("--max-messages-per-batch", type=int, default=200_000)
    parser.add_argument("--trigger", default="100 milliseconds", help="processingTime trigger")
    parser.add_argument("--sink", default="parquet", choices=("parquet", "noop"),
                        help="noop: Spark's sink that writes nothing, to see the source's own cost")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as directory:
        workdir = Path(directory)
        (workdir / "nsqd").mkdir()
        nsqd = start_nsqd(f"--mem-queue-size={args.messages + 1}", f"--max-rdy-count={args.max_in_flight}",
                          data_path=workdir / "nsqd")
        try:
            nsqd.http("POST", f"/topic/create?topic={TOPIC}")
            nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")
            started = time.perf_counter()
            asyncio.run(fill(f"127.0.0.1:{nsqd.tcp_port}", args.messages))
            print(f"filled {args.messages:,} x {SIZE} B in {time.perf_counter() - started:.1f}s", flush=True)
            stream(args, nsqd, workdir)
        finally:
            nsqd.stop()


if __name__ == "__main__":
    main()
