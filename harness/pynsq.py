"""pynsq, NSQ's official Python client, driven from tests.

pynsq runs on tornado, so it gets a tornado IOLoop on its own thread over its own asyncio event loop and never
touches the test's loop. Readers and Writers are created on that thread (pynsq binds to ``IOLoop.current()``);
every call into them goes through ``PynsqLoop.call``, which runs it there and hands back its result. What a
Reader's handler sees is recorded in an ``Inbox`` any thread can read and wait on.

``PynsqLoop.stop`` always closes every Reader, Writer and connection and then the loops. Anything pynsq or
tornado logs at WARNING or above while the clients are live (an error frame from nsqd, an exception in a
handler, a dropped connection) is kept in ``problems``: a compatible nsqd gives pynsq nothing to complain about.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import nsq  # type: ignore[import-untyped]  # pynsq 0.9.1: no stubs or py.typed
import tornado.ioloop

from harness.processes import wait_for

T = TypeVar("T")

_WATCHED_LOGGERS = ("nsq", "tornado", "asyncio")


@dataclass(frozen=True)
class Received:
    id: bytes
    body: bytes
    attempts: int
    at: float  # time.monotonic() when the handler was called
    message: nsq.Message = field(compare=False, repr=False)  # touch it only through PynsqLoop.call


class Inbox:
    """What a Reader's handler saw, in arrival order, plus the heartbeats its connections answered."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._messages: list[Received] = []
        self.heartbeats = 0

    def add(self, message: nsq.Message) -> None:
        with self._changed:
            self._messages.append(Received(message.id, message.body, message.attempts, time.monotonic(), message))
            self._changed.notify_all()

    def heartbeat(self, conn: nsq.AsyncConn) -> None:
        with self._changed:
            self.heartbeats += 1
            self._changed.notify_all()

    @property
    def messages(self) -> list[Received]:
        with self._changed:
            return list(self._messages)

    def wait_for(self, condition: Callable[[list[Received]], bool], timeout: float = 5) -> list[Received]:
        with self._changed:
            if not self._changed.wait_for(lambda: condition(self._messages), timeout):
                raise AssertionError(f"inbox condition not met within {timeout}s: {self._messages}")
            return list(self._messages)

    def wait_count(self, count: int, timeout: float = 5) -> list[Received]:
        return self.wait_for(lambda messages: len(messages) >= count, timeout)

    def wait_heartbeats(self, count: int, timeout: float = 5) -> int:
        with self._changed:
            if not self._changed.wait_for(lambda: self.heartbeats >= count, timeout):
                raise AssertionError(f"{self.heartbeats} heartbeats within {timeout}s, wanted {count}")
            return self.heartbeats


class _ProblemLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:  # logging.Handler.handle holds self.lock here
        self.records.append(f"{record.name} {record.levelname}: {self.format(record)}")


@dataclass
class PynsqReader:
    loop: PynsqLoop
    reader: nsq.Reader
    inbox: Inbox

    def connections(self) -> int:
        """Connections that finished IDENTIFY and sent SUB."""
        return self.loop.call(lambda: sum(bool(conn.connected()) for conn in self.reader.conns.values()))


@dataclass
class PynsqWriter:
    loop: PynsqLoop
    writer: nsq.Writer

    def pub(self, topic: str, body: bytes) -> Any:
        """What the Writer's callback got: ``b"OK"`` or an ``nsq.Error``."""
        return self._publish(lambda callback: self.writer.pub(topic, body, callback=callback))

    def mpub(self, topic: str, bodies: list[bytes]) -> Any:
        return self._publish(lambda callback: self.writer.mpub(topic, bodies, callback=callback))

    def dpub(self, topic: str, delay_ms: int, body: bytes) -> Any:
        return self._publish(lambda callback: self.writer.dpub(topic, delay_ms, body, callback=callback))

    def _publish(self, send: Callable[[Callable[[Any, Any], None]], Any], timeout: float = 5) -> Any:
        answer: concurrent.futures.Future[Any] = concurrent.futures.Future()
        self.loop.call(lambda: send(lambda conn, data: answer.set_result(data)))
        return answer.result(timeout)


class PynsqLoop:
    """A tornado IOLoop on its own thread, over its own asyncio loop, owning the pynsq clients made on it."""

    def __init__(self) -> None:
        self._thread = threading.Thread(target=self._run, name="pynsq-ioloop", daemon=True)
        self._running = threading.Event()
        self._io_loop: tornado.ioloop.IOLoop | None = None
        self._readers: list[nsq.Reader] = []
        self._writers: list[nsq.Writer] = []
        self._problems = _ProblemLog()

    @property
    def problems(self) -> list[str]:
        return list(self._problems.records)

    def take_problems(self) -> list[str]:
        """The problems logged so far, forgotten: for a test that provokes them on purpose."""
        with self._problems.lock:  # type: ignore[union-attr]  # created by logging.Handler.__init__
            taken, self._problems.records = self._problems.records, []
        return taken

    def start(self) -> None:
        for name in _WATCHED_LOGGERS:
            logging.getLogger(name).addHandler(self._problems)
        self._thread.start()
        if not self._running.wait(10):
            raise RuntimeError("the pynsq IOLoop did not start")

    def _run(self) -> None:
        asyncio.set_event_loop(asyncio.new_event_loop())
        io_loop = tornado.ioloop.IOLoop.current()  # tornado 6 wraps this thread's asyncio loop
        self._io_loop = io_loop
        io_loop.add_callback(self._running.set)
        try:
            io_loop.start()
        finally:
            io_loop.close(all_fds=True)  # closes the asyncio loop too
            asyncio.set_event_loop(None)

    def call(self, fn: Callable[[], T], timeout: float = 5) -> T:
        """Runs ``fn`` on the IOLoop thread and returns its result (or raises its exception)."""
        assert self._io_loop is not None, "start() first"
        result: concurrent.futures.Future[T] = concurrent.futures.Future()

        def run() -> None:
            try:
                result.set_result(fn())
            except BaseException as error:  # handed to the caller, which re-raises it
                result.set_exception(error)

        self._io_loop.add_callback(run)
        return result.result(timeout)

    def reader(self, address: tuple[str, int] | list[tuple[str, int]], topic: str, channel: str,
               handler: Callable[[nsq.Message], bool | None] = lambda message: True, **kwargs: Any) -> PynsqReader:
        """An ``nsq.Reader`` on one nsqd (or several); ``handler`` runs on the IOLoop thread after the message is
        recorded.

        ``kwargs`` go to ``nsq.Reader`` (``max_in_flight``) and ``nsq.AsyncConn`` (``msg_timeout``,
        ``heartbeat_interval``, ``requeue_delay``: in seconds, as pynsq takes them).
        """
        inbox = Inbox()

        def on_message(message: nsq.Message) -> bool | None:
            inbox.add(message)
            return handler(message)

        def make() -> nsq.Reader:
            addresses = address if isinstance(address, list) else [address]
            reader = nsq.Reader(topic=topic, channel=channel, message_handler=on_message,
                                nsqd_tcp_addresses=[f"{host}:{port}" for host, port in addresses], **kwargs)
            reader.heartbeat = inbox.heartbeat  # pynsq's hook, called for every heartbeat it answers
            self._readers.append(reader)
            return reader

        return PynsqReader(self, self.call(make), inbox)

    def writer(self, address: tuple[str, int], **kwargs: Any) -> PynsqWriter:
        """An ``nsq.Writer`` on one nsqd, returned once its connection has finished IDENTIFY."""
        def make() -> nsq.Writer:
            writer = nsq.Writer([f"{address[0]}:{address[1]}"], **kwargs)
            self._writers.append(writer)
            return writer

        writer = self.call(make)
        wait_for(lambda: self.call(lambda: any(conn.connected() for conn in writer.conns.values())),
                 what="the pynsq Writer connected")
        return PynsqWriter(self, writer)

    def stop(self) -> list[str]:
        """Closes every client and connection, stops and closes the loops; returns the problems logged."""
        for name in _WATCHED_LOGGERS:  # closing makes pynsq log the dropped connections: expected here
            logging.getLogger(name).removeHandler(self._problems)
        if self._io_loop is None or not self._thread.is_alive():
            return self.problems
        try:
            self.call(self._close_clients)
            # closed streams fail their pending reads and run their close callbacks on later loop turns
            self.call(lambda: None)
            self.call(lambda: None)
        finally:
            self._io_loop.add_callback(self._io_loop.stop)
            self._thread.join(10)
        assert not self._thread.is_alive(), "the pynsq IOLoop did not stop"
        return self.problems

    def _close_clients(self) -> None:
        for reader in self._readers:
            reader.close()
            reader.http_client.close()
        for writer in self._writers:
            for conn in list(writer.conns.values()):
                conn.close()
