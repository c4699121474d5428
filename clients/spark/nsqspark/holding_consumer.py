"""``HoldingConsumer``: the client library's ``Consumer`` on a thread and event loop of its own, answering nothing by
itself. Every message it receives is held, un-FIN'd, until its owner calls ``finish`` or ``requeue``; meanwhile held
messages are TOUCHed so that nsqd does not time them out. The ``nsq`` readers run it on the driver, the only place
that learns when a write has succeeded, and FIN happens on the connection a message came on, as NSQ requires.

The window (``window.WindowSizer``: ``max_in_flight``, and no more than ``max_bytes_in_flight`` of bodies) is larger
than one connection may have (nsqd's ``--max-rdy-count``, 2500 by default), so it is shared among
``ceil(max_in_flight / 2500)`` ``Consumer``s on the same loop, each with a connection to every nsqd: a micro-batch
is not limited to what one connection holds.

Invariants:
- all state lives on the loop thread; other threads act through ``_call``, which waits for the loop but holds no
  lock the loop needs, so a signal handler that interrupts a caller can still stop the consumer;
- a message is held from its arrival until FIN or REQ, and counts against ``max_in_flight`` all that time (nsqd
  sends no more than RDY un-answered messages): that bounds what is held in memory, and also every batch;
- ``stop()`` gives back (REQ, no delay) everything still held, after RDY 0 so that nsqd does not hand it straight
  back, and leaves nothing running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from nsqclient import ConnectError, Consumer, Message
from nsqclient.event_loop import new_event_loop

from .history import create_from_history
from .options import NSQOptions
from .window import WindowSizer, connection_sets, shares

log = logging.getLogger("nsq.spark")

T = TypeVar("T")

DEFAULT_MSG_TIMEOUT = 60.0  # nsqd's --msg-timeout default, assumed until a connection says otherwise
CALL_TIMEOUT = 30.0


class ConsumerStopped(RuntimeError):
    """The consumer was stopped (by ``stop()``, possibly from a signal handler) before the call could run."""


class HoldingConsumer:
    def __init__(self, options: NSQOptions, *, max_in_flight: int | None = None) -> None:
        self._options = options
        self._max_in_flight = max_in_flight or options.max_in_flight
        self._sizer = WindowSizer(self._max_in_flight, options.max_bytes_in_flight)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._consumers: list[Consumer] = []
        self._toucher: asyncio.Task[None] | None = None
        self._held: dict[Message, float] = {}  # each held message -> loop time of its arrival or last TOUCH
        self._waiting: deque[Message] = deque()  # held and not yet taken, in arrival order
        self._arrival: asyncio.Event | None = None
        self._closing = False
        self._shutdown: concurrent.futures.Future[None] | None = None
        self._calls: set[asyncio.Task[Any]] = set()  # calls from other threads under way

    # -- any thread but the loop's -------------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the loop thread and the consumer; connections come up in the background."""
        self._loop = new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="nsq-holding-consumer", daemon=True)
        self._thread.start()
        try:
            self._call(self._start())
        except BaseException:
            self.stop()
            raise

    def take(self, limit: int | None = None) -> list[Message]:
        """Up to ``limit`` (None: all) of the messages received and not yet taken, oldest first; still held."""
        return self._call(self._take(limit))

    def window(self) -> int:
        """How many messages nsqd may have in flight to this consumer now (the RDY counts of its connections, each
        capped by that nsqd's --max-rdy-count), taken or not."""
        return self._call(self._window())

    def collect(self, limit: int, idle_timeout: float) -> tuple[list[Message], bool]:
        """Waits until ``limit`` messages (0: no limit) are waiting, or nsqd cannot send more because of what is
        held (the consumer is starved), or ``idle_timeout`` s pass without a message; takes them. The flag says
        whether it ended idle."""
        return self._call(self._collect(limit, idle_timeout), timeout=None)

    def check_reach(self) -> None:
        """Raises ConnectError, naming each address that failed, when no nsqd is connected and every address given
        (nsqd and lookupd) failed its last attempt (one not over yet counts as reached). A batch read that got
        nothing asks: a cluster out of reach is not an empty channel."""
        if (error := self._call(self._out_of_reach())) is not None:
            raise error

    def finish(self, messages: Sequence[Message]) -> None:
        """FIN: nsqd forgets them. Returns once the FINs are queued on their connections."""
        self._call(self._respond(messages, finish=True))

    def requeue(self, messages: Sequence[Message]) -> None:
        """REQ without delay: nsqd delivers them again (to any consumer of the channel), attempts + 1."""
        self._call(self._respond(messages, finish=False))

    def stop(self, timeout: float = 10.0) -> None:
        """Gives back everything held, closes the connections and ends the thread. Safe to call again, also from a
        signal handler that interrupted a call in progress: that call then raises ConsumerStopped."""
        if self._loop is None or self._thread is None:
            return
        if self._shutdown is None:
            self._shutdown = asyncio.run_coroutine_threadsafe(self._stop_consuming(timeout), self._loop)
        try:
            self._shutdown.result(timeout + 5)
        except Exception:
            log.exception("stopping the consumer of %s/%s", self._options.topic, self._options.channel)
        finally:
            if not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._loop.stop)
                self._thread.join(timeout)
                if not self._thread.is_alive():
                    self._loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T], timeout: float | None = CALL_TIMEOUT) -> T:
        if self._shutdown is not None or self._loop is None:
            coroutine.close()
            raise ConsumerStopped(f"consumer of {self._options.topic}/{self._options.channel} is stopped")
        future = asyncio.run_coroutine_threadsafe(self._tracked(coroutine), self._loop)
        try:
            return future.result(timeout)
        except concurrent.futures.CancelledError:
            raise ConsumerStopped(f"consumer of {self._options.topic}/{self._options.channel} was stopped") from None

    # -- the loop thread -----------------------------------------------------------------------------------------

    async def _tracked(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs a call from another thread so that a stop can cancel it: its caller must not wait forever."""
        task = asyncio.current_task()
        assert task is not None
        self._calls.add(task)
        try:
            return await coroutine
        finally:
            self._calls.discard(task)

    async def _start(self) -> None:
        options = self._options
        if options.since:  # before any SUB makes the channel empty
            await asyncio.to_thread(create_from_history, options)
        self._arrival = asyncio.Event()
        # max_attempts 0: redelivery is how this source recovers, so a message is never given up on (and FIN'd)
        self._consumers = [Consumer(options.topic, options.channel, self._handle,
                                    nsqd_tcp_addresses=options.nsqd_tcp_addresses,
                                    lookupd_http_addresses=options.lookupd_http_addresses,
                                    max_in_flight=1, max_attempts=0,
                                    lookupd_poll_interval=options.lookupd_poll_interval, **options.client_settings())
                           for _ in range(connection_sets(self._max_in_flight))]
        self._resize(self._sizer.window)
        for consumer in self._consumers:
            await consumer.start()
        self._toucher = asyncio.ensure_future(self._touch_held())

    async def _handle(self, message: Message) -> None:
        message.disable_auto_response()
        if self._closing:
            message.requeue(0, backoff=False)
            return
        self._held[message] = asyncio.get_running_loop().time()
        self._waiting.append(message)
        assert self._arrival is not None
        self._arrival.set()
        if (window := self._sizer.observe(len(message.body))) is not None:
            self._resize(window)

    def _resize(self, window: int) -> None:
        for consumer, share in zip(self._consumers, shares(window, len(self._consumers))):
            consumer.change_max_in_flight(share)

    async def _window(self) -> int:
        return self._total_rdy()

    def _total_rdy(self) -> int:
        return sum(consumer.total_rdy for consumer in self._consumers)

    async def _take(self, limit: int | None) -> list[Message]:
        count = len(self._waiting) if limit is None else min(limit, len(self._waiting))
        return [self._waiting.popleft() for _ in range(count)]

    async def _collect(self, limit: int, idle_timeout: float) -> tuple[list[Message], bool]:
        assert self._arrival is not None
        while not (limit and len(self._waiting) >= limit):
            if self._waiting and any(consumer.is_starved() for consumer in self._consumers):
                break
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), idle_timeout)
            except TimeoutError:
                return await self._take(limit or None), True
        return await self._take(limit or None), False

    async def _out_of_reach(self) -> ConnectError | None:
        if any(consumer.connections for consumer in self._consumers):
            return None
        failed = {address: why for consumer in self._consumers for address, why in consumer.unreachable.items()}
        given = {*self._options.nsqd_tcp_addresses, *self._options.lookupd_http_addresses}
        if not given <= failed.keys():
            return None
        return ConnectError(f"no nsqd reached for {self._options.topic}/{self._options.channel}: "
                            + "; ".join(f"{address}: {why}" for address, why in sorted(failed.items())))

    async def _respond(self, messages: Sequence[Message], finish: bool) -> None:
        for message in messages:
            if self._held.pop(message, None) is None:
                continue  # already answered (given back by stop())
            if finish:
                message.finish()
            else:
                message.requeue(0, backoff=False)

    async def _touch_held(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            msg_timeout = self._msg_timeout()
            # checking often costs a scan of what is held; touching late costs a redelivery
            await asyncio.sleep(min(1.0, msg_timeout / 4))
            self.touch_due(loop.time(), msg_timeout)

    def touch_due(self, now: float, msg_timeout: float) -> int:
        """TOUCHes the held messages untouched for half of ``msg_timeout`` (so, with a check every quarter at most,
        each is touched before three quarters of it); returns how many."""
        due = [message for message, touched in self._held.items() if now - touched >= msg_timeout / 2]
        for message in due:
            message.touch()
            self._held[message] = now
        return len(due)

    def _msg_timeout(self) -> float:
        """The shortest msg_timeout among the nsqd subscribed to (each says it in its IDENTIFY answer, in ms)."""
        timeouts = [float(settings["msg_timeout"]) / 1000 for consumer in self._consumers
                    for address in consumer.connections
                    if "msg_timeout" in (settings := consumer.server_settings(address))]
        return min(timeouts, default=DEFAULT_MSG_TIMEOUT)

    async def _stop_consuming(self, timeout: float) -> None:
        self._closing = True
        for call in self._calls:
            call.cancel()
        if self._toucher is not None:
            self._toucher.cancel()
            await asyncio.gather(self._toucher, return_exceptions=True)
        if not self._consumers:
            return
        stopping = asyncio.ensure_future(asyncio.gather(*(consumer.stop(timeout) for consumer in self._consumers)))
        # stop() first sets RDY 0 everywhere; the REQs must follow it on the wire, or nsqd would hand the messages
        # straight back to this consumer (attempts + 1) instead of to another one
        while self._total_rdy() > 0 and not stopping.done():
            await asyncio.sleep(0)
        held, self._held = list(self._held), {}
        self._waiting.clear()
        for message in held:
            message.requeue(0, backoff=False)
        await stopping
