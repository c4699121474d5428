"""A batch archive as a user's own job builds it on the ``nsq`` batch reader: ``drain`` the channel, each batch
through ``for_archive`` and appended to Parquet, FIN'd after the write. Run by tests as a process of its own:

    python -m harness.batch_archive_job --topic=T --lookupd-http-address=H:P --output-dir=DIR [--die-after-writes=N]

``--die-after-writes=N``: after the Nth batch is written, and before it is FIN'd, the job kills its own process
group (itself and its JVM) with SIGKILL: a crash at the one point where the archive gets a batch twice.
"""

from __future__ import annotations

import argparse
import os
import signal

from pyspark.sql import DataFrame

from nsqspark.batch_reader import drain
from services.pipeline.session import spark_session
from services.pipeline.transforms import for_archive


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--topic", required=True)
    parser.add_argument("--lookupd-http-address", required=True)
    parser.add_argument("--output-dir", required=True)
    parser.add_argument("--max-in-flight", default="1000")
    parser.add_argument("--idle-timeout", default="10")
    parser.add_argument("--die-after-writes", type=int, default=0)
    args = parser.parse_args()
    spark = spark_session("local[2]", "batch-archive", {"spark.ui.enabled": "false",
                                                         "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    options = {"topic": args.topic, "channel": "batch_archive", "lookupd_http_address": args.lookupd_http_address,
               "max_in_flight": args.max_in_flight, "idle_timeout": args.idle_timeout}
    writes = 0

    def write(frame: DataFrame) -> None:
        nonlocal writes
        for_archive(frame, "10 minutes").write.mode("append").partitionBy("topic", "date", "hour").parquet(
            args.output_dir)
        writes += 1
        if writes == args.die_after_writes:
            os.killpg(os.getpgid(0), signal.SIGKILL)

    written = drain(spark, options, write)
    print(f"batch archive: {written} messages written", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
