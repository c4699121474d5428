"""The pipeline's jobs, each a console script and a ``spark-submit``-able file. What every job takes from its
command line (where NSQ is, the Spark master, the HTTP endpoint) is declared here once."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from shared.flags import parse_duration

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def add_common_arguments(parser: argparse.ArgumentParser, channel: str) -> None:
    parser.add_argument("--channel", default=channel, help="channel to consume on")
    parser.add_argument("--lookupd-http-address", action="append", default=[], help="lookupd HTTP address")
    parser.add_argument("--nsqd-tcp-address", action="append", default=[], help="nsqd TCP address")
    parser.add_argument("--lookupd-poll-interval", type=parse_duration, default=60.0,
                        help="how often lookupd is asked for the topic's nsqd (Go duration, default 1m)")
    parser.add_argument("--checkpoint-dir", required=True, help="Spark's checkpoint for this query")
    parser.add_argument("--master", default="local[*]", help="Spark master ('' to take spark-submit's)")
    parser.add_argument("--http-address", default="",
                        help="<addr>:<port> to serve /ping and /metrics on (default: none)")


def addresses(args: argparse.Namespace) -> dict[str, str]:
    """The ``nsq`` source's and sink's options saying where NSQ is."""
    options = {"lookupd_http_address": ",".join(args.lookupd_http_address),
               "nsqd_tcp_address": ",".join(args.nsqd_tcp_address)}
    return {key: value for key, value in options.items() if value}


def source_options(args: argparse.Namespace, topic: str) -> dict[str, str]:
    """The ``nsq`` source's options for one topic."""
    return {"topic": topic, "channel": args.channel, "lookupd_poll_interval": str(args.lookupd_poll_interval),
            **addresses(args)}


def run(name: str, args: argparse.Namespace, start: Callable[[SparkSession, argparse.Namespace], StreamingQuery],
        what: str) -> None:
    """A job's ``main``: its Spark session, its query started, ``what`` it does said once, then running until
    SIGTERM or SIGINT."""
    from services.pipeline.session import run_until_stopped, spark_session

    query = start(spark_session(args.master, name), args)
    print(f"{name}: {what}", flush=True)
    run_until_stopped(query, args.http_address)
