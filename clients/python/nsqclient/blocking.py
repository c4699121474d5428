"""``BlockingProducer``: ``Producer`` for synchronous code (a Flask or Django view, a script, a worker thread).

    producer = BlockingProducer("127.0.0.1:4150")
    producer.publish("events", b"hello")          # returns once nsqd has the message
    producer.multi_publish("events", [b"a", b"b"])
    producer.close()

It runs an asyncio ``Producer`` on an event loop of its own, in one background thread, and each call waits for its
answer there. One instance is meant to be shared: any number of threads may publish through it at once, over one
connection, each waiting for its own answer. The settings, the errors raised (``NSQError`` and its subclasses,
raised in the calling thread) and the reconnection are ``Producer``'s. A process that forks (gunicorn's
``--preload``, multiprocessing) makes its own after the fork: the background thread does not survive one.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Iterable, TypeVar

from .config import Config
from .errors import NSQError
from .event_loop import new_event_loop
from .producer import Producer

T = TypeVar("T")


class ProducerClosed(NSQError):
    """A publish through a ``BlockingProducer`` that was closed."""


class BlockingProducer:
    """Publishes from synchronous code: runs an asyncio ``Producer`` on an event loop of its own, in one background
    thread, and each call returns once nsqd answered (or raises what ``Producer`` would). Share one per process."""

    def __init__(self, nsqd_tcp_address: str | None = None, *, lookupd_http_addresses: Iterable[str] = (),
                 config: Config | None = None, **settings: Any) -> None:
        """As ``Producer``'s: an nsqd's TCP address or ``lookupd_http_addresses``, a ``Config`` and its fields as
        keywords. Nothing connects until the first publish (or ``connect``)."""
        self._pid = os.getpid()
        self._closed = False
        self._calls = 0  # under way, in any thread; close waits for them
        self._state = threading.Condition()
        self._stopped = threading.Event()  # set once close has stopped the thread
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nsq-blocking-producer", daemon=True)
        self._thread.start()
        try:
            self._producer = self._run(_made_on_loop(nsqd_tcp_address, list(lookupd_http_addresses), config,
                                                     settings))
        except BaseException:
            self._stop_loop()
            raise

    @property
    def address(self) -> str | None:
        """The nsqd published to (found through lookupd once connected, when none was given)."""
        return self._producer.address

    @property
    def config(self) -> Config:
        return self._producer.config

    def connect(self) -> None:
        """Connects now rather than at the first publish (ConnectError, NSQProtocolError)."""
        self._run(self._producer.connect())

    def publish(self, topic: str, body: bytes) -> None:
        self._run(self._producer.publish(topic, body))

    def multi_publish(self, topic: str, bodies: list[bytes]) -> None:
        """All of ``bodies`` or none (MPUB is atomic in nsqd)."""
        self._run(self._producer.multi_publish(topic, bodies))

    def deferred_publish(self, topic: str, body: bytes, delay: float) -> None:
        """Delivered no sooner than ``delay`` seconds from now."""
        self._run(self._producer.deferred_publish(topic, body, delay))

    def close(self) -> None:
        """Closes the connection and stops the background thread, once the publishes under way in other threads
        have their answers (each within the config's timeouts); later ones raise ProducerClosed. Closing again
        does nothing."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a BlockingProducer cannot be closed from its own event loop")
        with self._state:
            if self._closed:
                closing_elsewhere = True
            else:
                closing_elsewhere, self._closed = False, True
                self._state.wait_for(lambda: self._calls == 0)
        if closing_elsewhere:  # returns once it is closed, as the first close does
            self._stopped.wait()
            return
        try:
            if os.getpid() == self._pid:
                asyncio.run_coroutine_threadsafe(self._producer.close(), self._loop).result()
        finally:
            self._stop_loop()
            self._stopped.set()

    def __enter__(self) -> BlockingProducer:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """``coroutine``'s result, run on the background loop; its exception raised here."""
        if os.getpid() != self._pid:
            coroutine.close()
            raise RuntimeError("this BlockingProducer was made in the parent process before a fork: make one in "
                               "each process")
        if threading.current_thread() is self._thread:
            coroutine.close()
            raise RuntimeError("a BlockingProducer cannot be called from its own event loop: use Producer there")
        with self._state:
            if self._closed:
                coroutine.close()
                raise ProducerClosed("the producer is closed")
            self._calls += 1
        try:
            return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()
        finally:
            with self._state:
                self._calls -= 1
                self._state.notify_all()

    def _stop_loop(self) -> None:
        if os.getpid() != self._pid:
            return  # the thread is the parent's
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


async def _made_on_loop(nsqd_tcp_address: str | None, lookupd_http_addresses: list[str], config: Config | None,
                        settings: dict[str, Any]) -> Producer:
    """The asyncio producer, made on the loop that runs it (what it creates belongs to that loop)."""
    return Producer(nsqd_tcp_address, lookupd_http_addresses=lookupd_http_addresses, config=config, **settings)
