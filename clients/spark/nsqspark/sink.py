"""The ``nsq`` sink: ``df.write.format("nsq")`` (``NSQWriter``) and ``df.writeStream.format("nsq")``
(``NSQStreamWriter``) publish each row's ``body`` (binary, or a string sent as UTF-8) to the ``topic`` option, or to
the row's own ``topic`` column when the DataFrame has one (a null there falls back to the option).

The writers are made on the driver, which checks the schema and options before any task runs, and are pickled to
the executors; sockets are only opened inside ``write``, which publishes one partition: it groups the rows per
topic and hands the bodies to ``chunk_router``, which cuts them into MPUB chunks and sends each to the next nsqd in
turn, starting at a node that depends on the partition so that partitions spread over the cluster. When no node
takes a chunk the task fails, and Spark runs it again. Answers that every node would give (``E_BAD_TOPIC``,
``E_BAD_MESSAGE``, ``E_BAD_BODY``), a null body and an invalid topic name in a row fail the task at once.

Delivery is at least once. A chunk sent again after its connection was lost may already have been taken by the
first node (its answer was what got lost), and a task Spark runs again publishes its whole partition again. Each
publish gets a new message id, so a consumer that must not act twice deduplicates on something in the body.

The writers are Spark's Arrow writers (still a ``DataSourceWriter`` and a ``DataSourceStreamWriter``): taking
record batches instead of one ``Row`` per message makes a partition about three times faster to publish.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from nsqclient.event_loop import new_event_loop
from nsqclient.protocol.names import is_valid_topic_name

from .chunk_router import Chunker, ChunkRouter, Published, SinkError
from .options import NSQOptions, OptionError, parse_options

log = logging.getLogger("nsq.spark")


@dataclass(frozen=True)
class SinkConfig:
    """What a task needs, checked on the driver: the options and where body and topic are in the rows."""

    options: NSQOptions
    body_column: str
    topic_column: str | None = None


def configure(raw: Mapping[str, str], schema: StructType) -> SinkConfig:
    """Raises SinkError for a schema without a usable ``body``, OptionError for options that cannot work."""
    fields = {field.name.lower(): field for field in schema.fields}
    body, topic = fields.get("body"), fields.get("topic")
    if body is None or not isinstance(body.dataType, (BinaryType, StringType)):
        raise SinkError(f"the rows need a body column, binary or string; they are {schema.simpleString()}")
    if topic is not None and not isinstance(topic.dataType, StringType):
        raise SinkError(f"column topic: must be a string, got {topic.dataType.simpleString()}")
    topic_given = any(key.lower() == "topic" for key in raw)
    if topic is None and not topic_given:
        raise OptionError("give the topic option or a topic column")
    options = parse_options(raw, need_topic=topic_given)
    return SinkConfig(options, body.name, topic.name if topic is not None else None)



@dataclass(frozen=True)
class NSQCommitMessage(Published, WriterCommitMessage):
    """What one task published, as it reports it to the driver."""


def total(messages: Iterable[WriterCommitMessage | None]) -> NSQCommitMessage:
    """The sum of the tasks' commit messages (a failed task's is None)."""
    done = [message for message in messages if isinstance(message, NSQCommitMessage)]
    per_node: Counter[str] = Counter()
    for message in done:
        per_node.update(message.per_node)
    return NSQCommitMessage(sum(message.messages for message in done), sum(message.chunks for message in done),
                            sum(message.retries for message in done), dict(per_node))


class _PartitionWriter:
    """What both writers do: check on the driver, publish a partition in each task."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.config = configure(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> NSQCommitMessage:
        return write_partition(self.config, iterator)


class NSQWriter(_PartitionWriter, DataSourceArrowWriter):
    """``df.write.format("nsq")``: each task publishes its partition."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("nsq sink: published %s", total(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("nsq sink: write failed after the other tasks published %s", total(messages))


class NSQStreamWriter(_PartitionWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("nsq")``: each micro-batch's tasks publish their partitions."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info("nsq sink: batch %d published %s", batchId, total(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("nsq sink: batch %d failed after the other tasks published %s", batchId, total(messages))


def write_partition(config: SinkConfig, batches: Iterable[pa.RecordBatch]) -> NSQCommitMessage:
    """Publishes one partition (runs on an executor, in the task's thread)."""
    context = TaskContext.get()
    # a task Spark runs again starts at another node: the one it started at may be why it failed
    start = 0 if context is None else context.partitionId() + context.attemptNumber()
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(publish(config, batches, start))


async def publish(config: SinkConfig, batches: Iterable[pa.RecordBatch], start: int) -> NSQCommitMessage:
    """Publishes every row of ``batches``; chunks go round the nodes beginning with the ``start``-th."""
    chunker = Chunker(config.options.mpub_chunk)
    router = ChunkRouter(config.options, start)
    try:
        for topic, bodies in grouped(config, batches):
            for chunk in chunker.add(topic, bodies):
                await router.send(chunk)
        for chunk in chunker.rest():
            await router.send(chunk)
        published = await router.finish()
        return NSQCommitMessage(published.messages, published.chunks, published.retries, published.per_node)
    finally:
        await router.close()


# -- rows to chunks ---------------------------------------------------------------------------------------------


def grouped(config: SinkConfig, batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, list[bytes]]]:
    """Each batch's bodies per topic, in row order within a topic."""
    first_row = 0
    for batch in batches:
        bodies = _bodies(batch.column(config.body_column), first_row)
        if config.topic_column is None:
            yield config.options.topic, bodies
        else:
            yield from _by_topic(batch.column(config.topic_column).to_pylist(), bodies, config.options.topic,
                                 first_row)
        first_row += batch.num_rows


def _bodies(column: Any, first_row: int) -> list[bytes]:
    if column.null_count:
        row = first_row + column.is_null().to_pylist().index(True)
        raise SinkError(f"row {row} of the partition has a null body: every row needs one")
    empty = pc.equal(pc.binary_length(column), 0)
    if pc.any(empty).as_py():
        row = first_row + empty.to_pylist().index(True)
        raise SinkError(f"row {row} of the partition has an empty body: nsqd refuses empty messages")
    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())  # the same bytes: Arrow strings are UTF-8
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    bodies: list[bytes] = column.to_pylist()
    return bodies


def _by_topic(topics: list[str | None], bodies: list[bytes], default: str,
              first_row: int) -> Iterator[tuple[str, list[bytes]]]:
    groups: defaultdict[str | None, list[bytes]] = defaultdict(list)
    for topic, body in zip(topics, bodies):
        groups[topic].append(body)
    for topic, group in groups.items():
        name = default if topic is None else topic
        if not is_valid_topic_name(name):
            row = first_row + topics.index(topic)
            what = "a null topic and no topic option" if topic is None else f"an invalid topic name {topic!r}"
            raise SinkError(f"row {row} of the partition has {what}")
        yield name, group
