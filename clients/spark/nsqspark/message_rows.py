"""The ``nsq`` source's rows: their schema (``SCHEMA``), and messages as such rows, carried from the driver to the
executors inside an ``InputPartition``: plain columns (lists of str, bytes and int), which pickle fast, made into one
Arrow record batch where the partition is read (on an executor, so the driver's single Python process does the least
work)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs or py.typed
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType, TimestampType

from nsqclient import Message

# each message as nsqd delivered it
SCHEMA = StructType([
    StructField("message_id", StringType(), nullable=False),
    StructField("body", BinaryType(), nullable=False),
    StructField("timestamp", TimestampType(), nullable=False),
    StructField("attempts", IntegerType(), nullable=False),
    StructField("nsqd_address", StringType(), nullable=False),
    StructField("topic", StringType(), nullable=False),
])
# Spark checks a returned record batch against its own Arrow form of the schema (timestamps in µs, UTC), so use it
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")

# a partition travels inside its Spark task: keep tasks well under spark.rpc.message.maxSize (128 MiB), and give a
# large batch more than one task so that executors write it in parallel
MAX_PARTITION_BYTES = 16 << 20
MAX_PARTITION_ROWS = 20_000


class MessageRows(InputPartition):
    def __init__(self, topic: str, messages: Sequence[Message]) -> None:
        self.topic = topic
        # NSQ ids are 16 hex characters; latin-1 maps any 16 bytes to 16 characters without failing
        self.ids = [message.id.decode("latin-1") for message in messages]
        self.bodies = [message.body for message in messages]
        self.timestamps = [message.timestamp // 1000 for message in messages]  # ns -> µs, Spark's precision
        self.attempts = [message.attempts for message in messages]
        self.addresses = [message.nsqd_address for message in messages]

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"MessageRows({self.topic!r}, {len(self)} rows)"

    def record_batch(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays([
            pa.array(self.ids, pa.string()),
            pa.array(self.bodies, pa.binary()),
            pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
            pa.array(self.attempts, pa.int32()),
            pa.array(self.addresses, pa.string()),
            pa.array([self.topic] * len(self), pa.string()),
        ], schema=ARROW_SCHEMA)


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """A reader's ``read``: the partition's rows as one record batch (with nothing read, Spark hands over a plain
    ``InputPartition(None)``)."""
    if isinstance(partition, MessageRows) and len(partition):
        yield partition.record_batch()


def partition_messages(topic: str, messages: Sequence[Message], max_bytes: int = MAX_PARTITION_BYTES,
                       max_rows: int = MAX_PARTITION_ROWS) -> list[MessageRows]:
    """The messages in order, cut into partitions of at most ``max_rows`` rows and about ``max_bytes`` of bodies."""
    partitions: list[MessageRows] = []
    start = size = 0
    for index, message in enumerate(messages):
        if index > start and (index - start >= max_rows or size + len(message.body) > max_bytes):
            partitions.append(MessageRows(topic, messages[start:index]))
            start, size = index, 0
        size += len(message.body)
    if start < len(messages):
        partitions.append(MessageRows(topic, messages[start:]))
    return partitions


def message_table(topic: str, messages: Sequence[Message]) -> pa.Table:
    return pa.Table.from_batches([MessageRows(topic, messages).record_batch()], schema=ARROW_SCHEMA)
