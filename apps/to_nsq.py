"""``to_nsq``: publishes stdin, split on a one-byte delimiter, to a topic on every given nsqd (NSQ's
``apps/to_nsq``).

Each non-empty record goes as one PUB to each ``--nsqd-tcp-address``; the last record counts even without a
trailing delimiter. The program reads until end of input (or SIGINT/SIGTERM), waits until every PUB was answered
and exits 0; an nsqd that cannot be reached, or answers a PUB with an error, ends it with exit status 1.

Invariants that keep big inputs fast and memory bounded:

- stdin is read in chunks on a thread (``StdinReader``), at most ``READ_AHEAD`` chunks ahead of the publisher;
- PUBs are pipelined (the client library's ``Pipeline``, one per nsqd): each is written without waiting for the
  answer to the one before, at most ``WINDOW`` per nsqd are unanswered at a time, and waiting for the oldest answer
  is all the flow control there is (no task per message).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from dataclasses import dataclass

from nsqclient import ConnectError, NSQError, Pipeline, Producer, user_agent
from nsqclient.errors import describe
from nsqclient.protocol.names import is_valid_topic_name
from shared.flags import FlagError, option
from shared.program import ProgramOptions, run_tool
from shared.version import version_line

from .client_options import check_tcp_addresses, producer_settings

log = logging.getLogger("to_nsq")

USER_AGENT = user_agent("to_nsq")
STDIN = 0
CHUNK_SIZE = 256 * 1024
READ_AHEAD = 4  # chunks read but not yet split
WINDOW = 512  # PUBs written but not yet answered, per nsqd


@dataclass
class Options(ProgramOptions):
    topic: str = option("", "NSQ topic to publish to")
    delimiter: str = option("\n", "character to split input from stdin")
    nsqd_tcp_address: list[str] = option([], "destination nsqd TCP address (may be given multiple times)")
    producer_opt: list[str] = option([], "option to passthrough to nsq.Producer (may be given multiple times, "
                                         "as key,value; go-nsq Config names)")
    rate: int = option(0, "Throttle messages to n/second. 0 to disable")

    def validate(self) -> None:
        super().validate()
        if not self.topic:
            raise FlagError("--topic required")
        if not is_valid_topic_name(self.topic):
            raise FlagError("--topic is invalid")
        if len(os.fsencode(self.delimiter)) != 1:
            raise FlagError("--delimiter must be a single byte")
        if not self.nsqd_tcp_address:
            raise FlagError("--nsqd-tcp-address required")
        check_tcp_addresses("nsqd-tcp-address", self.nsqd_tcp_address)
        producer_settings(self.producer_opt)


class RecordSplitter:
    """Records from chunks of input (sans-I/O): ``feed`` returns the complete non-empty records a chunk ends,
    ``finish`` the last one, which needs no delimiter after it."""

    def __init__(self, delimiter: bytes) -> None:
        self._delimiter = delimiter
        # the record under way, in pieces: joining once, when it ends, keeps a long record linear to collect
        self._pending: list[bytes] = []

    def feed(self, chunk: bytes) -> list[bytes]:
        if self._delimiter not in chunk:
            self._pending.append(chunk)
            return []
        records = chunk.split(self._delimiter)
        records[0] = b"".join([*self._pending, records[0]])
        self._pending = [records.pop()]
        return [record for record in records if record]

    def finish(self) -> bytes | None:
        record = b"".join(self._pending)
        self._pending = []
        return record or None


class Throttle:
    """A token bucket as NSQ's to_nsq keeps one: ``rate`` records a second, with at most one second's worth saved
    up. It starts with a single token, so a run does not begin with a burst. Time is given, in seconds."""

    def __init__(self, rate: int, now: float) -> None:
        self._rate = rate
        self._tokens = 1.0
        self._updated = now

    def reserve(self, now: float) -> float:
        """Takes a token: the seconds to wait before sending (0 when a token was there). A wait taken is a debt
        the next tokens pay, so a caller that waits as told sends at exactly ``rate``."""
        refilled = self._tokens + (now - self._updated) * self._rate
        self._tokens = min(float(self._rate), refilled) - 1
        self._updated = now
        return max(0.0, -self._tokens / self._rate)


class StdinReader:
    """Chunks of a file descriptor, read on a thread so that no kind of stdin blocks the event loop (the loop's
    pipe transports refuse regular files, and uvloop's aborts on them or on /dev/null).

    The thread is a daemon that is never joined: a read blocked on a terminal or an idle pipe cannot be
    interrupted, and it must not keep the process from exiting after SIGINT.
    """

    def __init__(self, fd: int, chunk_size: int = CHUNK_SIZE, read_ahead: int = READ_AHEAD) -> None:
        self._loop = asyncio.get_running_loop()
        self._chunks: asyncio.Queue[bytes | OSError] = asyncio.Queue()
        self._room = threading.Semaphore(read_ahead)
        self._stopped = False
        self._thread = threading.Thread(target=self._read_all, args=(fd, chunk_size), name="stdin", daemon=True)
        self._thread.start()

    async def read(self) -> bytes:
        """The next chunk; ``b""`` at the end of input and once stopped. Raises the OSError reading met."""
        chunk = await self._chunks.get()
        if self._stopped or not chunk:
            self.stop()  # stays at the end for later reads
            return b""
        if isinstance(chunk, OSError):
            raise chunk
        self._room.release()
        return chunk

    def stop(self) -> None:
        """Ends the input here: ``read`` returns ``b""`` from now on, whatever is still unread."""
        self._stopped = True
        self._chunks.put_nowait(b"")

    def _read_all(self, fd: int, chunk_size: int) -> None:
        while True:
            self._room.acquire()
            try:
                chunk = os.read(fd, chunk_size)
            except OSError as error:
                self._hand_over(error)
                return
            if not self._hand_over(chunk) or not chunk:
                return

    def _hand_over(self, item: bytes | OSError) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._chunks.put_nowait, item)
        except RuntimeError:  # the loop is closed: the program is ending
            return False
        return True


class DeliveryError(Exception):
    """An nsqd that could not be reached, refused a PUB, or lost its connection with PUBs unanswered."""

    @classmethod
    def of(cls, producer: Producer, error: NSQError) -> DeliveryError:
        if isinstance(error, ConnectError):
            return cls(f"failed to connect to nsqd {producer.address} - {describe(error)}")
        return cls(f"failed to publish to nsqd {producer.address} - {describe(error)}")


async def run(opts: Options, stopping: asyncio.Event) -> int:
    """The program: 0 when every record read was published to every nsqd, 1 otherwise."""
    settings = {"user_agent": USER_AGENT, **producer_settings(opts.producer_opt)}
    producers = [Producer(address, **settings) for address in opts.nsqd_tcp_address]
    pipelines = [producer.pipeline(WINDOW) for producer in producers]
    try:
        # connected up front (go-nsq would at the first PUB) so that a wrong address fails before stdin is read
        for producer in producers:
            try:
                await producer.connect()
            except NSQError as error:
                raise DeliveryError.of(producer, error) from error
        await _publish_stdin(opts, pipelines, stopping)
    except DeliveryError as error:
        log.error("%s", error)
        return 1
    except OSError as error:  # only reading stdin raises it: the client library raises NSQError
        log.error("failed to read stdin - %s", error)
        return 1
    finally:
        for pipeline in pipelines:
            pipeline.abandon()
        for producer in producers:
            await producer.close()
    return 0


async def _publish_stdin(opts: Options, pipelines: list[Pipeline], stopping: asyncio.Event) -> None:
    stdin = StdinReader(STDIN)
    watcher = asyncio.create_task(_stop_on(stopping, stdin))
    loop = asyncio.get_running_loop()
    throttle = Throttle(opts.rate, loop.time()) if opts.rate >= 1 else None
    if throttle is not None:
        log.info("Throttling messages rate to max:%d/second", opts.rate)
    splitter = RecordSplitter(os.fsencode(opts.delimiter))
    try:
        while chunk := await stdin.read():
            await _send(splitter.feed(chunk), opts.topic, pipelines, throttle, stopping)
        last = splitter.finish()
        await _send([last] if last is not None else [], opts.topic, pipelines, throttle, stopping)
        for pipeline in pipelines:
            try:
                await pipeline.flush()
            except NSQError as error:
                raise DeliveryError.of(pipeline.producer, error) from error
    finally:
        watcher.cancel()
        await asyncio.wait([watcher])  # its end, without raising its cancellation here


async def _stop_on(stopping: asyncio.Event, stdin: StdinReader) -> None:
    await stopping.wait()
    stdin.stop()


async def _send(records: list[bytes], topic: str, pipelines: list[Pipeline], throttle: Throttle | None,
                stopping: asyncio.Event) -> None:
    """Each record to every nsqd; raises DeliveryError for this or an earlier PUB that failed."""
    loop = asyncio.get_running_loop()
    for record in records:
        if stopping.is_set():
            return
        if throttle is not None:
            await asyncio.sleep(throttle.reserve(loop.time()))
        for pipeline in pipelines:
            try:
                await pipeline.publish(topic, record)
            except NSQError as error:
                raise DeliveryError.of(pipeline.producer, error) from error


def main(argv: list[str] | None = None) -> None:
    run_tool("to_nsq", Options, version_line("to_nsq"), run, argv)


if __name__ == "__main__":
    main()
