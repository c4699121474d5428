"""Batch reads of a channel: ``read_batch`` and ``drain``, which consume (FIN after the caller's write succeeded), and
``spark.read.format("nsq")``, which only looks (every message is given back).

Why a plain ``spark.read`` cannot consume. A batch ``DataSourceReader`` is told nothing after the query's write:
``partitions()`` runs in a short-lived planning process on the driver, ``read()`` in executor tasks, and a message can
only be FIN'd on the connection it came on. FIN while planning would lose the messages whenever the write then
fails (at most once); never answering would leave them in flight until nsqd's msg_timeout. So
``NSQBatchReader`` collects up to ``max_messages`` (0: no limit) or until ``idle_timeout`` s pass without a message,
and gives them all back (REQ, no delay) when planning ends: the DataFrame is a snapshot, nothing is consumed, each
message is delivered again later with ``attempts`` + 1. Each action plans again, so two actions on one DataFrame
may see different messages: ``cache()`` it, or use ``read_batch``.

To consume, ``read_batch`` holds the messages in this process (the driver's), un-FIN'd and TOUCHed, behind a
DataFrame built from them; ``ack()`` after a successful write FINs them, and leaving the ``with`` block without
``ack()`` gives them back::

    with read_batch(spark, {"topic": "events", "channel": "archive", "lookupd_http_address": "..."}) as batch:
        batch.frame.write.parquet(path)
        batch.ack()

At least once: a driver that dies between the write and ``ack()`` leaves the messages in flight, and nsqd delivers
them again after its msg_timeout. Since nsqd sends no more than ``max_in_flight`` un-FIN'd messages (and no more
than its ``--max-rdy-count`` per connection), one batch holds at most that many; ``drain`` repeats batches (read,
``write(frame)``, FIN) until ``max_messages`` in all or until the channel stays idle for ``idle_timeout``.

A read that gets nothing while no nsqd is connected and every address given (nsqd or lookupd) failed raises
``nsqclient.ConnectError`` naming each (``HoldingConsumer.check_reach``): a cluster out of reach does not read as
an empty channel. ``drain`` raises so only before its first batch: after that, it returns what it wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs or py.typed
from pyspark.sql.datasource import DataSourceReader, InputPartition

from nsqclient import Message

from .holding_consumer import HoldingConsumer
from .message_rows import SCHEMA, message_table, partition_messages, read_partition
from .options import NSQOptions, parse_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class NSQBatchReader(DataSourceReader):
    """``spark.read.format("nsq")``: a snapshot of up to ``max_messages`` messages, all given back (see above)."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = parse_options(options, need_channel=True)

    def partitions(self) -> list[InputPartition]:
        with _holding(self._options) as consumer:
            messages = _collect_some(consumer, self._options.max_messages, self._options.idle_timeout)
            return list(partition_messages(self._options.topic, messages))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)


class NSQBatch:
    """Messages held un-FIN'd behind ``frame``, until ``ack()``."""

    def __init__(self, frame: DataFrame, messages: Sequence[Message], consumer: HoldingConsumer) -> None:
        self.frame = frame
        self._messages = messages
        self._consumer = consumer

    def __len__(self) -> int:
        return len(self._messages)

    def ack(self) -> None:
        """FIN every message of the batch: call it once what was read has been written."""
        self._consumer.finish(self._messages)


@contextmanager
def read_batch(spark: SparkSession, options: Mapping[str, str]) -> Iterator[NSQBatch]:
    """Up to ``max_messages`` messages (and at most ``max_in_flight``), or what arrives until ``idle_timeout`` s
    pass without one, as a batch whose ``frame`` has the ``nsq`` schema; what is not ``ack()``ed when the block ends
    is given back."""
    parsed = parse_options(options, need_channel=True)
    with _holding(parsed) as consumer:
        messages = _collect_some(consumer, parsed.max_messages, parsed.idle_timeout)
        yield NSQBatch(_frame(spark, parsed.topic, messages), messages, consumer)


def drain(spark: SparkSession, options: Mapping[str, str], write: Callable[[DataFrame], None]) -> int:
    """Consumes the channel batch by batch: ``write(frame)``, then FIN, until ``max_messages`` in all (0: no limit)
    or until no message arrives for ``idle_timeout`` s; returns how many were written. A batch whose ``write``
    raises is given back, and the exception propagates."""
    parsed = parse_options(options, need_channel=True)
    written = 0
    with _holding(parsed) as consumer:
        while not parsed.max_messages or written < parsed.max_messages:
            limit = parsed.max_messages - written if parsed.max_messages else 0
            messages, idle = consumer.collect(limit, parsed.idle_timeout)
            if not written and not messages:
                consumer.check_reach()
            if messages:
                write(_frame(spark, parsed.topic, messages))
                consumer.finish(messages)
                written += len(messages)
            if idle:
                break
    return written


def _collect_some(consumer: HoldingConsumer, limit: int, idle_timeout: float) -> list[Message]:
    """What ``consumer.collect`` takes; nothing from a cluster out of reach raises."""
    messages, _ = consumer.collect(limit, idle_timeout)
    if not messages:
        consumer.check_reach()
    return messages


@contextmanager
def _holding(options: NSQOptions) -> Iterator[HoldingConsumer]:
    """A started consumer, stopped (what it still holds given back) however the block ends."""
    # no more in flight than will be used: the rest would only be given back, attempts + 1
    max_in_flight = min(options.max_in_flight, options.max_messages or options.max_in_flight)
    consumer = HoldingConsumer(options, max_in_flight=max_in_flight)
    consumer.start()
    try:
        yield consumer
    finally:
        consumer.stop()


def _frame(spark: SparkSession, topic: str, messages: Sequence[Message]) -> DataFrame:
    if not messages:
        return spark.createDataFrame([], SCHEMA)
    return spark.createDataFrame(message_table(topic, messages), SCHEMA)
