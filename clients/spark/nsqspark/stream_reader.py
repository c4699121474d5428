"""``spark.readStream.format("nsq")``: a channel as an at-least-once stream; a message is FIN'd only after the
micro-batch holding it has been written and committed.

Where things run. Spark calls ``initialOffset``, ``latestOffset``, ``partitions``, ``commit`` and ``stop`` on one
reader in one long-lived Python process on the driver, always on its main thread; ``read`` runs in executor
processes on other reader objects. So the consumer (a ``HoldingConsumer``, on a thread of its own) lives in that
driver process, opened on the first ``initialOffset``/``latestOffset`` (never in ``__init__``: readers are also built
where nothing may be opened), and the messages travel to the executors inside the partitions.

Offsets are ``{"batch": n, "tick": t}``. ``latestOffset`` seals what has arrived into batch n + 1 and keeps its
messages, un-FIN'd and TOUCHed, until Spark calls ``commit`` with an offset at or past it, which Spark does only
after the batch's write and commit log, when it plans the next batch: then they are FIN'd. With nothing new to
read, that next batch would never be planned and the last batch never acknowledged, so while a sealed batch waits
for its commit the tick advances, and Spark runs one more, empty, batch. Otherwise the offset stays put and no batch
runs.

After a restart from a checkpoint, batch numbers continue after the checkpointed offset. A batch Spark replays that
this process did not seal (the previous driver sealed it) reads as empty: its messages, un-FIN'd, come back from
nsqd after its msg_timeout, in a later batch. So every message is written at least once; duplicates (with
``attempts`` > 1) come from batches written but not yet committed when the driver died or the query stopped
(a consumer of the rows drops them by ``topic``, ``nsqd_address`` and ``message_id`` together).

Memory and batch size: nsqd sends no more than ``max_in_flight`` un-FIN'd messages (100,000 by default, over
several connections per nsqd: see ``holding_consumer``), and a batch's messages stay un-FIN'd until the next batch
is planned, so a batch holds at most ``max_in_flight`` messages in all; a batch takes at most half of the window
nsqd actually allows (less than ``max_in_flight`` where an nsqd's ``--max-rdy-count`` is below 2500) and at most
``max_messages_per_batch``, so that the next batch fills while one is written. A micro-batch costs Spark a fixed
few hundred milliseconds however small it is, so the window sets the rate: with Spark's default trigger (the next
batch as soon as one is committed) the defaults take tens of thousands of messages a second.

``query.stop()`` ends the Python process Spark runs for the source on the driver with SIGTERM, so the reader
installs a SIGTERM handler that stops it (every message not committed is given back with REQ, no delay) before the
process ends as it would have.

Options (see ``options``): ``topic`` and ``channel``, ``lookupd_http_address`` and/or ``nsqd_tcp_address``,
``max_in_flight``, ``max_messages_per_batch``, TLS, compression and AUTH; ``lookupd_poll_interval`` (seconds, 60 by
default) says how soon an nsqd that starts serving the topic later is consumed too.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from types import FrameType

import pyarrow as pa  # type: ignore[import-untyped]  # no stubs or py.typed
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows

from nsqclient import Message

from .holding_consumer import HoldingConsumer
from .message_rows import partition_messages, read_partition
from .options import NSQOptions, parse_options

log = logging.getLogger("nsq.spark")

Offset = dict[str, int]


class NSQStreamReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self._options = parse_options(options, need_channel=True)
        self._consumer: HoldingConsumer | None = None
        self._sealed: dict[int, list[Message]] = {}  # batch number -> its messages, until committed
        self._last_batch = 0

    def initialOffset(self) -> Offset:
        self._open()
        return {"batch": 0, "tick": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(batch_limit(self._options))

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        consumer = self._open()
        batch = max(self._last_batch, start["batch"])  # after a restart, numbering continues from the checkpoint
        # half the window at most, whatever Spark allows: the rest keeps arriving while this batch is written
        most = max(1, consumer.window() // 2)
        messages = consumer.take(min(limit.max_rows, most) if isinstance(limit, ReadMaxRows) else most)
        if messages:
            batch = self._last_batch = batch + 1
            self._sealed[batch] = messages
        if not self._sealed:
            return start
        # a new tick even without new messages: the batch Spark then plans commits the ones before it
        return {"batch": batch, "tick": start["tick"] + 1}

    def partitions(self, start: Offset, end: Offset) -> list[InputPartition]:
        messages = [message for batch in range(start["batch"] + 1, end["batch"] + 1)
                    for message in self._sealed.get(batch, ())]
        return list(partition_messages(self._options.topic, messages))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: Offset) -> None:
        done = sorted(batch for batch in self._sealed if batch <= end["batch"])
        messages = [message for batch in done for message in self._sealed.pop(batch)]
        if messages and self._consumer is not None:
            self._consumer.finish(messages)

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.stop()

    def _open(self) -> HoldingConsumer:
        if self._consumer is None:
            consumer = HoldingConsumer(self._options)
            consumer.start()
            self._consumer = consumer
            stop_on_sigterm(self.stop)
        return self._consumer


def batch_limit(options: NSQOptions) -> int:
    """How many messages a micro-batch takes at most: ``max_messages_per_batch``, and half of ``max_in_flight``
    (``latestOffset`` also takes at most half of what the nsqd actually allow in flight, which their
    ``--max-rdy-count`` caps), so that the next batch fills while one waits for its commit: the whole window would
    leave the next one empty."""
    return max(1, min(options.max_messages_per_batch, options.max_in_flight // 2))


def stop_on_sigterm(stop: Callable[[], None]) -> None:
    """Runs ``stop`` on SIGTERM, then whatever SIGTERM did before (by default, end the process). Signal handlers
    can only be set from the main thread, which is where Spark's driver-side reader process calls the reader; from
    any other thread ``stop`` only runs at an orderly interpreter exit, and after a SIGTERM what was held comes back
    from nsqd after its msg_timeout instead of at once."""
    if threading.current_thread() is not threading.main_thread():
        log.warning("not on the main thread: the nsq reader cannot stop itself on SIGTERM")
        atexit.register(stop)
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stop()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)

