"""``Pipeline``: one task publishing a stream through a ``Producer`` without waiting for each answer.

    async with producer.pipeline(window=512) as pipeline:
        for record in records:
            await pipeline.publish("events", record)
    # leaving the block waited for every answer

Each publish is written at once on the producer's connection and its answer collected later: nsqd answers a
connection's commands in the order it got them, so the unanswered publishes are a FIFO of futures. At most
``window`` are unanswered; a publish past that first waits for the oldest answer. That wait is all the flow
control there is: no task per publish, no callback per answer.

A failure is raised by the call that collects it: a later publish (which then sends nothing) or ``flush``. It is
the error of the oldest publish that did not get OK. Every error nsqd answers a publish with is fatal (nsqd closes
the connection), and a timeout or a lost connection ends it too, so the publishes after that one fail as well; the
pipeline keeps raising the error until ``abandon()``, which hands back, oldest first, every publish that was not
acknowledged, for the caller to send again (elsewhere, say) or to give up on. What got OK was taken; what is
abandoned may or may not have been.

Publishes are not written on a new connection before the answers of a lost one were collected (and its failure
raised): what a failure leaves unacknowledged is always the newest ``unanswered`` publishes.

One error is not an earlier publish's: a topic name nsqd would refuse raises ``E_BAD_TOPIC`` from the call that
names it, before anything is written or waited for, and the pipeline goes on as before.
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple

from .connection import Connection
from .errors import NSQProtocolError
from .protocol.frames import encode_command, encode_mpub
from .protocol.names import go_quote, is_valid_topic_name

if TYPE_CHECKING:
    from .producer import Producer

WINDOW = 512  # enough to keep nsqd busy between two reads of the connection, little enough to bound what is resent


class Publish(NamedTuple):
    """A publish a pipeline gave up on: ``bodies`` holds PUB's or DPUB's one body; ``delay`` (s) is DPUB's."""

    topic: str
    bodies: list[bytes]
    delay: float | None = None


# (nsqd's answer, topic, the body of PUB/DPUB or the bodies of MPUB, DPUB's delay): tuples, cheap per publish
_Sent = tuple[asyncio.Future[bytes], str, bytes | list[bytes], float | None]


class Pipeline:
    def __init__(self, producer: Producer, window: int, timeout: float | None) -> None:
        if window < 1:
            raise ValueError("a pipeline's window must be at least 1")
        self.producer = producer
        self._window = window
        self._timeout = timeout
        self._sent: deque[_Sent] = deque()
        self._connection: Connection | None = None

    async def __aenter__(self) -> Pipeline:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if error is None:
            await self.flush()
        else:
            self.abandon()

    @property
    def unanswered(self) -> int:
        """Publishes written whose answers were not collected yet (at most ``window``)."""
        return len(self._sent)

    async def publish(self, topic: str, body: bytes) -> None:
        """Writes a PUB; raises the failure of an earlier publish instead (see the module's docstring)."""
        command = encode_command(b"PUB", topic_param("PUB", topic), body=body)
        connection = await self._ready()
        self._sent.append((connection.command(command, self._timeout), topic, body, None))

    async def multi_publish(self, topic: str, bodies: list[bytes]) -> None:
        """Writes an MPUB: all of ``bodies`` or none will be taken."""
        command = encode_mpub(topic_param("MPUB", topic), bodies)
        connection = await self._ready()
        self._sent.append((connection.command(command, self._timeout), topic, bodies, None))

    async def deferred_publish(self, topic: str, body: bytes, delay: float) -> None:
        """Writes a DPUB: delivered no sooner than ``delay`` seconds after nsqd takes it."""
        command = encode_command(b"DPUB", topic_param("DPUB", topic), str(round(delay * 1000)).encode(), body=body)
        connection = await self._ready()
        self._sent.append((connection.command(command, self._timeout), topic, body, delay))

    async def flush(self) -> None:
        """Waits for every answer; raises the first failure."""
        while self._sent:
            await self._collect()

    def abandon(self) -> list[Publish]:
        """Forgets every unanswered publish and returns, oldest first, those that did not get OK."""
        abandoned = []
        for future, topic, bodies, delay in self._sent:
            if future.done() and not future.cancelled() and future.exception() is None:
                continue  # taken: its OK came after the failure, or nothing failed
            future.cancel()  # its answer, if it ever comes, concerns no one
            abandoned.append(Publish(topic, [bodies] if isinstance(bodies, bytes) else bodies, delay))
        self._sent.clear()
        return abandoned

    async def _ready(self) -> Connection:
        """The connection to write the next publish on, once the window has room for it."""
        while len(self._sent) >= self._window:
            await self._collect()
        connection = self._connection
        if connection is None or connection.closed:
            await self.flush()  # what the lost connection left unanswered fails here, before any new write
            connection = self._connection = await self.producer.connect()
        return connection

    async def _collect(self) -> None:
        await self._sent[0][0]  # a failure stays in place: raised again until abandon()
        self._sent.popleft()


@functools.lru_cache(maxsize=1024)  # a producer publishes to a few topics, again and again
def topic_param(command: str, topic: str) -> bytes:
    """``topic`` as a publish sends it. A name nsqd would refuse is refused here as nsqd refuses it (E_BAD_TOPIC,
    with nsqd's text), before a space or a newline in it could split the command: nsqd would read ``"a b"`` as
    topic ``a``."""
    if not is_valid_topic_name(topic):
        repeated = "E_BAD_TOPIC " if command == "MPUB" else ""  # nsqd repeats the code in MPUB's answer
        raise NSQProtocolError("E_BAD_TOPIC", f"{repeated}{command} topic name {go_quote(topic)} is not valid")
    return topic.encode()
