"""The pipeline's jobs, each a console script and a ``spark-submit``-able file. What every job takes from its
command line (where NSQ is, the Spark master, the HTTP endpoint) is declared here once."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from shared.flags import parse_duration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamWriter


def add_common_arguments(parser: argparse.ArgumentParser, channel: str) -> None:
    parser.add_argument("--channel", default=channel, help="channel to consume on")
    parser.add_argument("--lookupd-http-address", action="append", default=[], help="lookupd HTTP address")
    parser.add_argument("--nsqd-tcp-address", action="append", default=[], help="nsqd TCP address")
    parser.add_argument("--nsqd-http-address", action="append", default=[],
                        help="nsqd HTTP address, asked for the channel's backlog (lookupd's nsqd are asked anyway)")
    parser.add_argument("--lookupd-poll-interval", type=parse_duration, default=60.0,
                        help="how often lookupd is asked for the topic's nsqd (Go duration, default 1m)")
    parser.add_argument("--checkpoint-dir", required=True, help="Spark's checkpoint for this query")
    # under spark-submit (which starts the JVM before this process), its --master holds
    parser.add_argument("--master", default="" if "PYSPARK_GATEWAY_PORT" in os.environ else "local[*]",
                        help="Spark master (default: spark-submit's --master, or local[*] when run directly)")
    parser.add_argument("--http-address", default="",
                        help="<addr>:<port> to serve /ping and /metrics on (default: none)")
    parser.add_argument("--max-in-flight", type=int, default=None,
                        help="messages held un-FIN'd at most, over several connections per nsqd "
                             "(default: the nsq source's)")
    parser.add_argument("--max-messages-per-batch", type=int, default=None,
                        help="messages per micro-batch at most (default: the nsq source's)")
    parser.add_argument("--log-level", default="WARN", type=str.upper,
                        choices=("ALL", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"),
                        help="Spark's log level (default WARN: at INFO Spark logs every step of every micro-batch)")
    parser.add_argument("--progress-interval", type=parse_duration, default=10.0,
                        help="how often a progress line is printed (Go duration, default 10s; 0: never)")
    parser.add_argument("--trigger-interval", default="",
                        help="start a micro-batch at most this often, e.g. '10 seconds' "
                             "(default: as soon as the last one is committed)")


def addresses(args: argparse.Namespace) -> dict[str, str]:
    """The ``nsq`` source's and sink's options saying where NSQ is."""
    options = {"lookupd_http_address": ",".join(args.lookupd_http_address),
               "nsqd_tcp_address": ",".join(args.nsqd_tcp_address)}
    return {key: value for key, value in options.items() if value}


def source_options(args: argparse.Namespace, topic: str) -> dict[str, str]:
    """The ``nsq`` source's options for one topic."""
    options = {"topic": topic, "channel": args.channel, "lookupd_poll_interval": str(args.lookupd_poll_interval),
               **addresses(args)}
    if getattr(args, "since", ""):
        options["since"] = args.since
        if args.nsqd_http_address:
            options["nsqd_http_address"] = ",".join(args.nsqd_http_address)
    for name in ("max_in_flight", "max_messages_per_batch"):
        if getattr(args, name) is not None:
            options[name] = str(getattr(args, name))
    return options


def with_trigger(writer: DataStreamWriter, args: argparse.Namespace) -> DataStreamWriter:
    """Spark's default trigger (the next micro-batch as soon as the last one is committed) unless
    ``--trigger-interval`` says otherwise."""
    return writer.trigger(processingTime=args.trigger_interval) if args.trigger_interval else writer


def run(name: str, args: argparse.Namespace, start: Callable[[SparkSession, argparse.Namespace], StreamingQuery],
        what: str, topics: Sequence[str]) -> None:
    """A job's ``main``: its Spark session, its query started, ``what`` it does said once, then running until
    SIGTERM or SIGINT, with a progress line every ``--progress-interval`` (the backlog: the channel's on
    ``topics``)."""
    from services.pipeline.progress import ChannelBacklog
    from services.pipeline.session import run_until_stopped, spark_session

    spark = spark_session(args.master, name)
    spark.sparkContext.setLogLevel(args.log_level)
    query = start(spark, args)
    print(f"{name}: {what}", flush=True)
    backlog = ChannelBacklog(topics, args.channel, args.lookupd_http_address, args.nsqd_http_address)
    run_until_stopped(query, args.http_address, backlog=backlog, progress_interval=args.progress_interval)
