"""``nsq_to_parquet``: topics archived to Parquet, partitioned by topic, date and hour (UTC), with a checkpoint —
the scalable nsq_to_file. A message is finished in nsqd only after the batch holding it is committed, so a crash
loses nothing; what a crash makes nsqd deliver again (the same topic, nsqd and message ID) is dropped within
``--watermark``.

    nsq_to_parquet --topic=events --lookupd-http-address=127.0.0.1:4161 --output-dir=/data/events \\
        --checkpoint-dir=/data/checkpoints/events [--master=local[*]]

Also runs under ``spark-submit services/pipeline/jobs/nsq_to_parquet.py ...`` against any cluster.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from services.pipeline.jobs import add_common_arguments, run, source_options, with_trigger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nsq_to_parquet", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topic", action="append", required=True, help="topic to archive (repeatable)")
    add_common_arguments(parser, channel="nsq_to_parquet")
    parser.add_argument("--output-dir", required=True, help="where the Parquet files go")
    parser.add_argument("--watermark", default="10 minutes", help="how long redelivered messages are looked for")
    parser.add_argument("--since", default="",
                        help="a channel this job creates starts with what nsqd retains since then: 'earliest', an "
                             "RFC 3339 time or a duration before now, e.g. 1h (nsqd's --retention-time)")
    return parser


def messages(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    frames = [spark.readStream.format("nsq").options(**source_options(args, topic)).load() for topic in args.topic]
    combined = frames[0]
    for frame in frames[1:]:
        combined = combined.unionByName(frame)
    return combined


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    return write_archive(messages(spark, args), args)


def write_archive(messages: DataFrame, args: argparse.Namespace) -> StreamingQuery:
    """The archive of any stream with the ``nsq`` source's columns, started (the benchmark feeds it another)."""
    from services.pipeline.transforms import for_archive

    archive = for_archive(messages, args.watermark)
    writer = (archive.writeStream.format("parquet").option("path", args.output_dir)
              .option("checkpointLocation", args.checkpoint_dir).partitionBy("topic", "date", "hour"))
    return with_trigger(writer, args).queryName("nsq_to_parquet").start()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    run("nsq_to_parquet", args, start,
        f"archiving {', '.join(args.topic)} (channel {args.channel}) into {args.output_dir}", args.topic)


if __name__ == "__main__":
    main()
