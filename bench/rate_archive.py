"""``nsq_to_parquet``'s query fed by Spark's own source instead of nsqd: what the archive job writes when reading
costs nothing. ``python -m bench.rate_archive --rows N --output-dir D --checkpoint-dir C`` (``bench.pipeline_source
--compare-rate`` runs it after the real job, on the same machine and settings).

The rows are the ``nsq`` source's (``message_id``, a 200-byte ``body``, ``timestamp``, ``attempts``,
``nsqd_address``, ``topic``) made by Spark's ``rate-micro-batch`` source, as many per micro-batch as the ``nsq``
source takes at most with the same settings (``stream_reader.batch_limit``: half its window); from there on it is
the job itself: ``nsq_to_parquet``'s parser and defaults, its Spark session, its deduplication and its Parquet
sink (``nsq_to_parquet.write_archive``). Prints one line: ``rows <n> seconds <whole run> steady <rows/s from 10 %
of the rows to the last> batches <n>``.
"""

from __future__ import annotations

import argparse
import sys
import time

from pyspark.sql import DataFrame, SparkSession, functions as F

from nsqspark.options import parse_options
from nsqspark.stream_reader import batch_limit
from services.pipeline.jobs import nsq_to_parquet, source_options
from services.pipeline.session import spark_session

SIZE = 200


def rate_rows(spark: SparkSession, rows_per_batch: int) -> DataFrame:
    """The ``nsq`` source's columns, one row per value of the rate source, a JSON event of ``SIZE`` bytes each."""
    rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
            .option("numPartitions", spark.sparkContext.defaultParallelism).load())
    types = F.array(*(F.lit(kind) for kind in ("click", "view", "purchase", "signup")))
    head = F.concat(F.lit('{"type": "'), F.element_at(types, (F.col("value") % 4 + 1).cast("int")),
                    F.lit('", "n": '), F.col("value").cast("string"), F.lit(', "pad": "'))
    body = F.concat(F.rpad(head, SIZE - 2, "x"), F.lit('"}'))
    return rate.select(F.lpad(F.hex("value"), 16, "0").alias("message_id"), body.cast("binary").alias("body"),
                       F.current_timestamp().alias("timestamp"), F.lit(1).alias("attempts"),
                       F.lit("127.0.0.1:4150").alias("nsqd_address"), F.lit("events").alias("topic"))


def main(argv: list[str]) -> None:
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--rows", type=int, required=True, help="how many rows to write")
    wanted, job_argv = own.parse_known_args(argv)
    # an nsqd address only because the job's parser asks for one: nothing connects to it
    args = nsq_to_parquet.parser().parse_args(["--topic=events", "--nsqd-tcp-address=127.0.0.1:4150", *job_argv])
    spark = spark_session(args.master, "nsq_to_parquet")
    spark.sparkContext.setLogLevel(args.log_level)
    per_batch = batch_limit(parse_options(source_options(args, "events")))  # what the nsq source takes a batch
    query = nsq_to_parquet.write_archive(rate_rows(spark, per_batch), args)
    started, written, steady_from = time.perf_counter(), 0, None
    committed: dict[int, int] = {}  # rows per batch, from the progress Spark reports once a batch is committed
    while written < wanted.rows:
        time.sleep(0.25)
        if query.exception() is not None:
            sys.exit(f"the query failed: {query.exception()}")
        committed.update((batch["batchId"], batch["numInputRows"]) for batch in query.recentProgress)
        written = sum(committed.values())
        if steady_from is None and written >= wanted.rows // 10:
            steady_from = (time.perf_counter(), written)
    end = time.perf_counter()
    spark.sparkContext.setLogLevel("OFF")  # stopping interrupts the next batch, which Spark reports at length
    query.stop()
    steady = (written - steady_from[1]) / (end - steady_from[0]) if steady_from and end > steady_from[0] else 0.0
    print(f"rows {written} seconds {end - started:.1f} steady {steady:.0f} batches {len(committed)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
