"""``nsq_event_counts``: an example analytics job. JSON events on a topic (``{"type": ...}``) are counted per type
in tumbling windows of message time, and the counts are published back to another topic through the ``nsq`` sink
as ``{"window_start", "window_end", "type", "count"}``.

    nsq_event_counts --topic=events --output-topic=event_counts --lookupd-http-address=127.0.0.1:4161 \\
        --checkpoint-dir=/data/checkpoints/event_counts [--window="1 minute"] [--master=local[*]]
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from services.pipeline.jobs import add_common_arguments, addresses, run, source_options, with_trigger

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nsq_event_counts", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--topic", required=True, help="topic of JSON events")
    parser.add_argument("--output-topic", required=True, help="topic the counts are published to")
    add_common_arguments(parser, channel="nsq_event_counts")
    parser.add_argument("--window", default="1 minute", help="window length")
    parser.add_argument("--watermark", default="1 minute", help="how late an event may come")
    parser.add_argument("--output-mode", default="update", choices=("update", "append"),
                        help="update: a window's count whenever it changes; append: once, after the watermark")
    return parser


def start(spark: SparkSession, args: argparse.Namespace) -> StreamingQuery:
    from services.pipeline.transforms import event_counts

    events = spark.readStream.format("nsq").options(**source_options(args, args.topic)).load()
    counts = event_counts(events, args.window, args.watermark)

    # Spark's streaming writers for Python data sources take append mode only; a batch write per micro-batch
    # publishes in update mode too
    def publish(batch: DataFrame, batch_id: int) -> None:
        sink = batch.write.format("nsq").option("topic", args.output_topic).options(**addresses(args))
        sink.mode("append").save()

    writer = (counts.writeStream.foreachBatch(publish).option("checkpointLocation", args.checkpoint_dir)
              .outputMode(args.output_mode))
    return with_trigger(writer, args).queryName("nsq_event_counts").start()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    run("nsq_event_counts", args, start,
        f"counting {args.topic} (channel {args.channel}) into topic {args.output_topic}", [args.topic])


if __name__ == "__main__":
    main()
