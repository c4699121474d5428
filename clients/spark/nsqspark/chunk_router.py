"""Publishing MPUB chunks over the nsqd of a cluster, without Spark: what one ``nsq`` sink task does once its rows
are bodies per topic.

- ``Chunker`` cuts the bodies of each topic into MPUB chunks of ``mpub_chunk`` messages, cut short before NSQ's
  default ``--max-body-size`` (5 MiB);
- ``ChunkRouter`` finds the nsqd (``nsqd_tcp_address`` and every node the ``lookupd_http_address`` lookupds list at
  ``/nodes``) and sends each chunk to the next node in turn (``NodeRing``), starting at a node the task chooses so
  that tasks spread over the cluster, with up to ``CHUNKS_IN_FLIGHT`` chunks under way on each node (the client
  library's ``Pipeline``, on one connection per node). A chunk a node does not take (connection refused or lost, no
  answer within ``publish_timeout``, ``E_MPUB_FAILED``) goes to the next node, and so do the chunks sent after it on
  that node's connection, which the failure ends; a node that failed is tried last for a while. When no node takes a
  chunk, or nsqd gives an answer every node would give (``E_BAD_TOPIC``, ``E_BAD_MESSAGE``, ``E_BAD_BODY``), it
  raises ``SinkError``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from nsqclient import NSQError, NSQProtocolError, Pipeline, Producer
from nsqclient.errors import describe
from nsqclient.lookupd import lookup_nodes

from .options import NSQOptions

log = logging.getLogger("nsq.spark")

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
class Published:
    """What a task published: messages, MPUB chunks, chunks sent again to another node, messages per node."""

    messages: int = 0
    chunks: int = 0
    retries: int = 0
    per_node: dict[str, int] = field(default_factory=dict)

    def __str__(self) -> str:
        nodes = ", ".join(f"{node} {count}" for node, count in sorted(self.per_node.items()))
        return f"{self.messages} messages in {self.chunks} chunks, {self.retries} sent again ({nodes or 'no node'})"


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
        answers = await asyncio.gather(*(lookup_nodes(address, timeout) for address in options.lookupd_http_addresses))
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

    def __init__(self, options: NSQOptions, start: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._options = options
        self._start = start
        self._clock = clock
        self._ring: NodeRing | None = None
        self._nodes: dict[str, _Node] = {}
        self._messages = self._chunks = self._retries = 0
        self._per_node: Counter[str] = Counter()

    async def send(self, chunk: Chunk) -> None:
        """Returns once the chunk is written to a node; raises SinkError when no node takes a chunk."""
        if self._ring is None:  # found on the first chunk: an empty partition asks nothing of anyone
            options = self._options
            self._ring = NodeRing(await find_nodes(options, options.connect_timeout), self._start)
        await self._route(chunk)

    async def finish(self) -> Published:
        """Waits for every answer, sending again what a node did not take; what the task reports to the driver."""
        while any(node.pipeline.unanswered for node in self._nodes.values()):
            for node in list(self._nodes.values()):
                try:
                    await node.pipeline.flush()
                except NSQError as error:
                    await self._node_failed(node, error, None)
                self._count_taken(node)
        return Published(self._messages, self._chunks, self._retries, dict(self._per_node))

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
            options = self._options
            producer = Producer(address, connect_timeout=options.connect_timeout, **options.client_settings())
            self._nodes[address] = _Node(address, producer.pipeline(CHUNKS_IN_FLIGHT, options.publish_timeout))
        return self._nodes[address]
