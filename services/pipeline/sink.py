"""The ``nsq`` sink: ``df.write.format("nsq")`` (``NSQWriter``) and ``df.writeStream.format("nsq")``
(``NSQStreamWriter``) publish each row's ``body`` (binary, or a string sent as UTF-8) to the ``topic`` option, or to
the row's own ``topic`` column when the DataFrame has one (a null there falls back to the option).

The writers are made on the driver, which checks the schema and options before any task runs, and are pickled to
the executors; sockets are only opened inside ``write``, which publishes one partition:

- it finds the nsqd: ``nsqd_tcp_address`` and every node the ``lookupd_http_address`` lookupds list at ``/nodes``;
- it groups the rows per topic into MPUB chunks of ``mpub_chunk`` messages, cut short before NSQ's default
  ``--max-body-size`` (5 MiB), and keeps up to ``CHUNKS_IN_FLIGHT`` chunks under way on each node (the client
  library's ``Pipeline``, on one connection per node);
- chunks go round the nodes in turn, starting at a node that depends on the partition so that partitions spread
  over the cluster (``ChunkRouter``). A chunk a node does not take (connection refused or lost, no answer within
  ``publish_timeout``, ``E_MPUB_FAILED``) goes to the next node, and so do the chunks sent after it on that node's
  connection, which the failure ends; a node that failed is tried last for a while. When no node takes a chunk the
  task fails, and Spark runs it again. Answers that every node would give (``E_BAD_TOPIC``,
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
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.compute as pc  # type: ignore[import-untyped]
from aiohttp import ClientSession, ClientTimeout
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from shared.client import NSQError, NSQProtocolError, Pipeline, Producer
from shared.client.lookupd import lookup_nodes
from shared.event_loop import new_event_loop
from shared.log_format import describe
from shared.protocol.names import is_valid_topic_name

from .options import NSQOptions, OptionError, parse_options

log = logging.getLogger("nsq.pipeline")

# per node: enough to keep an nsqd busy while the next chunk is encoded, little enough to bound what a lost node
# sends again
CHUNKS_IN_FLIGHT = 8
# NSQ's default --max-body-size: a chunk of large bodies is cut before an nsqd would refuse it
MAX_CHUNK_BYTES = 5 * 1024 * 1024
# how long a node that failed is tried after the others
NODE_DOWN_SECONDS = 5.0
# answers about the chunk itself, not the node: another node would give the same
_PERMANENT = frozenset({"E_BAD_TOPIC", "E_BAD_MESSAGE", "E_BAD_BODY"})


class SinkError(Exception):
    """Rows the sink cannot publish, or a chunk no nsqd took; the message says which."""


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
class NSQCommitMessage(WriterCommitMessage):
    """What one task published: messages, MPUB chunks, chunks sent again to another node, messages per node."""

    messages: int = 0
    chunks: int = 0
    retries: int = 0
    per_node: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        nodes = ", ".join(f"{node} {count}" for node, count in sorted(self.per_node.items()))
        return f"{self.messages} messages in {self.chunks} chunks, {self.retries} sent again ({nodes or 'no node'})"


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
    router = ChunkRouter(config, start)
    try:
        for topic, bodies in grouped(config, batches):
            for chunk in chunker.add(topic, bodies):
                await router.send(chunk)
        for chunk in chunker.rest():
            await router.send(chunk)
        return await router.finish()
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


@dataclass
class Chunk:
    topic: str
    bodies: list[bytes]
    # node address -> why it did not take the chunk; a chunk goes to each node once at most
    failures: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass
class _Pending:
    bodies: list[bytes] = field(default_factory=list)
    size: int = 0


class Chunker:
    """Collects bodies per topic into MPUB chunks of at most ``size`` messages and ``max_bytes`` of MPUB body."""

    def __init__(self, size: int, max_bytes: int = MAX_CHUNK_BYTES) -> None:
        self._size, self._max_bytes = size, max_bytes
        self._pending: dict[str, _Pending] = {}

    def add(self, topic: str, bodies: Iterable[bytes]) -> Iterator[Chunk]:
        """The chunks these bodies complete; the rest waits for more bodies or ``rest()``."""
        pending = self._pending.setdefault(topic, _Pending(size=4))
        for body in bodies:
            size = 4 + len(body)  # MPUB: [4-byte count] then [4-byte size][body] per message
            if pending.bodies and (len(pending.bodies) == self._size or pending.size + size > self._max_bytes):
                yield Chunk(topic, pending.bodies)
                pending.bodies, pending.size = [], 4
            pending.bodies.append(body)
            pending.size += size

    def rest(self) -> Iterator[Chunk]:
        """The last, partly filled chunk of each topic."""
        for topic, pending in self._pending.items():
            if pending.bodies:
                yield Chunk(topic, pending.bodies)
        self._pending.clear()


# -- chunks to nodes ---------------------------------------------------------------------------------------------


class NodeRing:
    """The order in which a chunk tries the nodes: the next in turn first, nodes that failed lately last."""

    def __init__(self, addresses: Sequence[str], start: int, down_for: float = NODE_DOWN_SECONDS) -> None:
        self.addresses = list(addresses)
        self._turn = start
        self._down_for = down_for
        self._down_until: dict[str, float] = {}

    def order(self, now: float) -> list[str]:
        turn = self._turn % len(self.addresses)
        self._turn += 1
        ring = self.addresses[turn:] + self.addresses[:turn]
        return sorted(ring, key=lambda address: self._down_until.get(address, 0.0) > now)

    def failed(self, address: str, now: float) -> None:
        self._down_until[address] = now + self._down_for

    def succeeded(self, address: str) -> None:
        self._down_until.pop(address, None)


async def find_nodes(options: NSQOptions, timeout: float) -> list[str]:
    """Every nsqd given or registered with a lookupd, sorted so that every task sees the same ring."""
    nodes = set(options.nsqd_tcp_addresses)
    silent: list[str] = []
    if options.lookupd_http_addresses:
        async with ClientSession(timeout=ClientTimeout(total=timeout)) as session:
            answers = await asyncio.gather(*(lookup_nodes(session, address)
                                             for address in options.lookupd_http_addresses))
        for address, answer in zip(options.lookupd_http_addresses, answers):
            if answer is None:
                silent.append(address)
            nodes.update(answer or ())
    if not nodes:
        why = f"lookupd {', '.join(silent)} did not answer" if silent else "the lookupds know no nsqd"
        raise SinkError(f"no nsqd to publish to: {why}")
    return sorted(nodes)


@dataclass
class _Node:
    """A node's pipeline, and the chunks written on it that have not been counted as taken yet, oldest first."""

    address: str
    pipeline: Pipeline
    sent: deque[Chunk] = field(default_factory=deque)


class ChunkRouter:
    """Sends each chunk to the first node in its turn that takes it, through one pipeline per node; counts what
    the nodes acknowledged."""

    def __init__(self, config: SinkConfig, start: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._start = start
        self._clock = clock
        self._ring: NodeRing | None = None
        self._nodes: dict[str, _Node] = {}
        self._messages = self._chunks = self._retries = 0
        self._per_node: Counter[str] = Counter()

    async def send(self, chunk: Chunk) -> None:
        """Returns once the chunk is written to a node; raises SinkError when no node takes a chunk."""
        if self._ring is None:  # found on the first chunk: an empty partition asks nothing of anyone
            options = self._config.options
            self._ring = NodeRing(await find_nodes(options, options.connect_timeout), self._start)
        await self._route(chunk)

    async def finish(self) -> NSQCommitMessage:
        """Waits for every answer, sending again what a node did not take; what the task reports to the driver."""
        while any(node.pipeline.unanswered for node in self._nodes.values()):
            for node in list(self._nodes.values()):
                try:
                    await node.pipeline.flush()
                except NSQError as error:
                    await self._node_failed(node, error, None)
                self._count_taken(node)
        return NSQCommitMessage(self._messages, self._chunks, self._retries, dict(self._per_node))

    async def close(self) -> None:
        for node in self._nodes.values():
            node.pipeline.abandon()
            await node.pipeline.producer.close()

    async def _route(self, chunk: Chunk) -> None:
        assert self._ring is not None
        for address in self._ring.order(self._clock()):
            if address in chunk.failures:
                continue
            if chunk.failures:
                self._retries += 1
            node = self._node(address)
            try:
                await node.pipeline.multi_publish(chunk.topic, chunk.bodies)
            except NSQError as error:  # this chunk's, or an earlier one's: either way this one was not sent
                await self._node_failed(node, error, chunk)
                self._not_taken(address, chunk, error)
                continue
            node.sent.append(chunk)
            self._count_taken(node)
            return
        failures = "; ".join(f"{address}: {why}" for address, why in chunk.failures.items())
        raise SinkError(f"no nsqd took a chunk of {len(chunk.bodies)} messages for topic {chunk.topic!r} "
                        f"({failures})")

    async def _node_failed(self, node: _Node, error: NSQError, sending: Chunk | None) -> None:
        """The node's connection failed: the chunks it did not acknowledge go to the other nodes."""
        assert self._ring is not None
        abandoned = {id(publish.bodies) for publish in node.pipeline.abandon()}
        lost = [chunk for chunk in node.sent if id(chunk.bodies) in abandoned]
        self._count(node.address, [chunk for chunk in node.sent if id(chunk.bodies) not in abandoned])
        node.sent.clear()
        refused = lost[0] if lost else sending
        if isinstance(error, NSQProtocolError) and error.code in _PERMANENT and refused is not None:
            raise SinkError(f"nsqd {node.address} refused {len(refused.bodies)} messages for topic "
                            f"{refused.topic!r}: {error}") from error
        self._ring.failed(node.address, self._clock())
        for chunk in lost:
            self._not_taken(node.address, chunk, error)
            await self._route(chunk)

    def _not_taken(self, address: str, chunk: Chunk, error: NSQError) -> None:
        chunk.failures[address] = describe(error)
        log.warning("nsq sink: nsqd %s did not take %d messages for %s: %s", address, len(chunk.bodies),
                    chunk.topic, describe(error))

    def _count_taken(self, node: _Node) -> None:
        """Counts the chunks whose OK the node's pipeline collected (all but its newest ``unanswered``)."""
        taken = len(node.sent) - node.pipeline.unanswered
        if taken > 0:
            self._count(node.address, [node.sent.popleft() for _ in range(taken)])
            assert self._ring is not None
            self._ring.succeeded(node.address)

    def _count(self, address: str, chunks: list[Chunk]) -> None:
        for chunk in chunks:
            self._messages += len(chunk.bodies)
            self._chunks += 1
            self._per_node[address] += len(chunk.bodies)

    def _node(self, address: str) -> _Node:
        if address not in self._nodes:
            options = self._config.options
            producer = Producer(address, connect_timeout=options.connect_timeout, **options.client_settings())
            self._nodes[address] = _Node(address, producer.pipeline(CHUNKS_IN_FLIGHT, options.publish_timeout))
        return self._nodes[address]
