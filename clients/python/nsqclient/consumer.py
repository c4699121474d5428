"""``Consumer``: reads one topic's channel from every nsqd that has it, and runs an async handler on each message.

    async def handle(message: Message) -> None:
        ...  # returns: FIN; raises: REQ with a delay growing with attempts, and backoff

    async with Consumer("events", "archive", handle, lookupd_http_addresses=["127.0.0.1:4161"],
                        max_in_flight=200, concurrency=8) as consumer:
        await stopping.wait()

nsqd come from ``nsqd_tcp_addresses`` (reconnected with growing delays when lost) and from polling the lookupds
(reconnected when a later poll finds them again), as NSQ's client guidelines say. ``max_in_flight`` is spread over
the connections as RDY counts whose total never goes above it, and spread again whenever a connection comes or
goes. Messages wait in one queue for ``concurrency`` worker tasks. ``stop()`` sends CLS everywhere, lets the
handlers finish what is in flight, then closes.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import random
from collections.abc import Awaitable, Callable, Iterable
from types import TracebackType
from typing import Any

from .backoff import Action, Backoff
from .config import Config, configure
from .connection import Connection
from .errors import NSQError, describe
from .lookupd import lookup_topic
from .message import Message
from .protocol.frames import CLOSE_WAIT, Message as Frame, encode_command
from .protocol.names import is_valid_name
from .rdy import changes_in_safe_order, spread

log = logging.getLogger("nsq.client")

Handler = Callable[[Message], Awaitable[None]]
GiveUpHook = Callable[[Message], Awaitable[None] | None]

DEFAULT_MAX_RDY_COUNT = 2500  # what NSQ's guidelines tell clients to assume when nsqd does not say
RECONNECT_DELAY_MAX = 15.0


class ConsumerConnection:
    """One subscribed connection: its RDY count and how many of its messages are still in flight."""

    def __init__(self, consumer: Consumer, address: str) -> None:
        self.consumer = consumer
        self.address = address
        self.connection: Connection | None = None
        self.rdy = 0
        self.max_rdy_count = DEFAULT_MAX_RDY_COUNT
        self.in_flight = 0
        self.queued = 0  # of those in flight, how many wait for a worker
        self.lost = False  # nsqd requeued what was in flight: responses to it must not be counted

    def received(self, frame: Frame) -> None:
        self.in_flight += 1
        self.queued += 1
        self.consumer._received(self, Message(frame.id, frame.body, frame.timestamp, frame.attempts, self.address,
                                                     self))

    def finish(self, message: Message) -> None:
        self._respond(encode_command(b"FIN", message.id), success=True)

    def requeue(self, message: Message, delay: float | None, backoff: bool) -> None:
        if delay is None:
            delay = self.consumer.requeue_delay_for(message.attempts)
        self._respond(encode_command(b"REQ", message.id, b"%d" % round(delay * 1000)),
                      success=None if not backoff else False)

    def touch(self, message: Message) -> None:
        if not self.lost and self.connection is not None:
            self.connection.send(encode_command(b"TOUCH", message.id))

    def set_rdy(self, count: int) -> None:
        if self.connection is not None and count != self.rdy:
            self.rdy = count
            self.connection.send(b"RDY %d\n" % count)

    def _respond(self, command: bytes, success: bool | None) -> None:
        if self.lost or self.connection is None:
            return
        self.connection.send(command)
        self.in_flight -= 1
        self.consumer._responded(success)


class Consumer:
    def __init__(self, topic: str, channel: str, handler: Handler, *,
                 nsqd_tcp_addresses: Iterable[str] = (), lookupd_http_addresses: Iterable[str] = (),
                 max_in_flight: int = 1, concurrency: int = 1, max_attempts: int = 5,
                 on_give_up: GiveUpHook | None = None, requeue_delay: float = 90.0,
                 max_requeue_delay: float = 900.0, backoff_multiplier: float = 1.0,
                 max_backoff_duration: float = 120.0, lookupd_poll_interval: float = 60.0,
                 lookupd_poll_jitter: float = 0.3, rdy_redistribute_interval: float = 5.0,
                 config: Config | None = None, **settings: Any) -> None:
        """Durations are in seconds. ``max_attempts`` 0 means no limit; a message delivered more often goes to
        ``on_give_up`` and is then finished. ``config`` says how to connect and identify (``Config``);
        ``settings``, fields of ``Config``, override it (``msg_timeout=...``, ``tls=context``, ``snappy=True``...)."""
        if not is_valid_name(topic) or not is_valid_name(channel):
            raise ValueError(f"invalid topic/channel name {topic!r}/{channel!r}")
        self.nsqd_tcp_addresses = list(nsqd_tcp_addresses)
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        if not self.nsqd_tcp_addresses and not self.lookupd_http_addresses:
            raise ValueError("give nsqd_tcp_addresses or lookupd_http_addresses")
        if max_in_flight < 1 or concurrency < 1:
            raise ValueError("max_in_flight and concurrency must be at least 1")
        self.topic, self.channel = topic, channel
        self.max_in_flight, self.concurrency, self.max_attempts = max_in_flight, concurrency, max_attempts
        self.requeue_delay, self.max_requeue_delay = requeue_delay, max_requeue_delay
        self.lookupd_poll_interval, self.lookupd_poll_jitter = lookupd_poll_interval, lookupd_poll_jitter
        self.rdy_redistribute_interval = rdy_redistribute_interval
        self.config = configure(config, settings)
        self._handler, self._on_give_up = handler, on_give_up
        self._backoff = Backoff(backoff_multiplier, max_backoff_duration)
        self._connections: dict[str, ConsumerConnection] = {}
        self._queue: asyncio.Queue[tuple[ConsumerConnection, Message]] = asyncio.Queue()
        self._tasks: set[asyncio.Task[None]] = set()
        self._keepers: dict[str, asyncio.Task[None]] = {}
        self._unreachable: dict[str, str] = {}
        self._resume_timer: asyncio.TimerHandle | None = None
        self._rotation = 0
        self._stopping = False
        self._drained = asyncio.Event()
        self.received = self.finished = self.requeued = self.given_up = 0

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.stop()

    # -- public ------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Starts connecting; returns at once (connections come up in the background)."""
        for _ in range(self.concurrency):
            self._spawn(self._work())
        for address in self.nsqd_tcp_addresses:
            self._keep(address, reconnect=True)
        if self.lookupd_http_addresses:
            self._spawn(self._poll_lookupds())
        self._spawn(self._redistribute())

    async def stop(self, timeout: float = 30.0) -> None:
        """CLS on every connection, then waits up to ``timeout`` s for the messages in flight to be handled."""
        self._stopping = True
        if self._resume_timer is not None:
            self._resume_timer.cancel()
        for address, keeper in self._keepers.items():
            if address not in self._connections:
                keeper.cancel()  # connecting or waiting to: no more of that; open connections stay until drained
        await asyncio.gather(*(self._close_wait(conn) for conn in list(self._connections.values())))
        try:
            await asyncio.wait_for(self._wait_drained(), timeout)
        except TimeoutError:
            log.warning("stopping with %d messages still in flight (nsqd delivers them again after their timeout)",
                        self.in_flight)
        for task in self._tasks:
            task.cancel()
        for conn in list(self._connections.values()):
            await self._disconnect(conn)  # which ends its keeper
        await asyncio.gather(*self._tasks, *self._keepers.values(), return_exceptions=True)

    @property
    def connections(self) -> list[str]:
        """Addresses of the nsqd this consumer is subscribed on."""
        return list(self._connections)

    @property
    def unreachable(self) -> dict[str, str]:
        """The nsqd and lookupd addresses whose last attempt failed (connecting, or asking lookupd), each with why;
        an address leaves once it answers, and an nsqd found through lookupd once no lookupd lists it."""
        return dict(self._unreachable)

    @property
    def in_flight(self) -> int:
        return sum(conn.in_flight for conn in self._connections.values())

    @property
    def total_rdy(self) -> int:
        return sum(conn.rdy for conn in self._connections.values())

    def server_settings(self, address: str) -> dict[str, Any]:
        """What the nsqd at ``address`` answered IDENTIFY with (``msg_timeout`` in ms, ``max_rdy_count``...);
        empty while not subscribed there."""
        conn = self._connections.get(address)
        if conn is None or conn.connection is None:
            return {}
        return dict(conn.connection.server_settings)

    def is_starved(self) -> bool:
        """Whether the handlers hold, on some connection, as many messages as they are likely to get from it
        (85 % of its RDY): a batching consumer should process its batch now rather than wait for more."""
        return any(0 < conn.in_flight - conn.queued >= conn.rdy * 0.85 for conn in self._connections.values())

    def change_max_in_flight(self, max_in_flight: int) -> None:
        """A new ``max_in_flight``, spread over the connections at once (0 pauses: RDY 0 everywhere); what is
        already in flight beyond it stays until answered. Call it on the consumer's event loop."""
        if max_in_flight < 0:
            raise ValueError("max_in_flight cannot be negative")
        self.max_in_flight = max_in_flight
        self._rebalance()

    def requeue_delay_for(self, attempts: int) -> float:
        return min(self.requeue_delay * attempts, self.max_requeue_delay)

    # -- messages ----------------------------------------------------------------------------------------------

    def _received(self, connection: ConsumerConnection, message: Message) -> None:
        self.received += 1
        self._queue.put_nowait((connection, message))

    async def _work(self) -> None:
        while True:
            connection, message = await self._queue.get()
            if not connection.lost:
                connection.queued -= 1
            if message.responded:
                continue
            if self.max_attempts and message.attempts > self.max_attempts:
                await self._give_up(message)
                continue
            try:
                await self._handler(message)
            except Exception:
                log.exception("handler failed on message %s (attempt %d)", message.id.decode(), message.attempts)
                if message.auto_response:
                    message.requeue()
                continue
            if message.auto_response:
                message.finish()

    async def _give_up(self, message: Message) -> None:
        self.given_up += 1
        log.warning("giving up on message %s after %d attempts", message.id.decode(), message.attempts)
        if self._on_give_up is not None:
            try:
                outcome = self._on_give_up(message)
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:
                log.exception("on_give_up failed on message %s", message.id.decode())
        message.finish()

    def _responded(self, success: bool | None) -> None:
        if success:
            self.finished += 1
        else:
            self.requeued += 1
        if self._stopping:
            if self.in_flight == 0:
                self._drained.set()
        elif success is False or (success and self._backoff.active):
            now = asyncio.get_running_loop().time()
            self._act(self._backoff.failure(now) if success is False else self._backoff.success(now))

    async def _wait_drained(self) -> None:
        while self.in_flight > 0:
            self._drained.clear()
            await self._drained.wait()

    # -- RDY ---------------------------------------------------------------------------------------------------

    def _act(self, action: Action) -> None:
        if action is Action.PAUSE:
            log.warning("backing off for %.3fs", self._backoff.duration(self._backoff.counter))
            if self._resume_timer is not None:
                self._resume_timer.cancel()
            self._resume_timer = asyncio.get_running_loop().call_at(self._backoff.resume_at, self._end_pause)
        if action is not Action.NONE:
            self._rebalance()

    def _end_pause(self) -> None:
        self._backoff.end_pause()
        self._rebalance()

    def _rebalance(self) -> None:
        """Sets every connection's RDY for the current state: stopping or paused 0, testing after a backoff 1 on
        one connection, otherwise ``max_in_flight`` spread over all."""
        conns = list(self._connections.values())
        now = asyncio.get_running_loop().time()
        if self._stopping or self._backoff.paused(now):
            target = {conn: 0 for conn in conns}
        elif self._backoff.active:
            tester = max(conns, key=lambda conn: conn.rdy, default=None)  # keep testing where we were
            target = {conn: 1 if conn is tester else 0 for conn in conns}
        else:
            offset = self._rotation % len(conns) if conns else 0
            order = conns[offset:] + conns[:offset]
            target = spread(self.max_in_flight, order, {conn: conn.max_rdy_count for conn in conns})
        for conn, count in changes_in_safe_order({conn: conn.rdy for conn in conns}, target):
            conn.set_rdy(count)

    async def _redistribute(self) -> None:
        """With fewer ``max_in_flight`` than connections, moves the RDY to other connections every interval;
        also drops connections that have been silent for two heartbeats."""
        while True:
            await asyncio.sleep(self.rdy_redistribute_interval)
            self._drop_silent_connections()
            if len(self._connections) > self.max_in_flight:
                self._rotation += self.max_in_flight
                self._rebalance()

    def _drop_silent_connections(self) -> None:
        heartbeat = self.config.heartbeat_interval or 30_000  # nsqd's default
        if heartbeat <= 0:
            return
        deadline = asyncio.get_running_loop().time() - 2 * heartbeat / 1000
        for conn in self._connections.values():
            if conn.connection is not None and conn.connection.last_received < deadline:
                log.error("nsqd %s: no data for two heartbeat intervals, closing", conn.address)
                conn.connection.close()

    # -- connections -------------------------------------------------------------------------------------------

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _keep(self, address: str, reconnect: bool) -> None:
        if address not in self._keepers and not self._stopping:
            keeper = asyncio.ensure_future(self._keep_connected(address, reconnect))
            self._keepers[address] = keeper
            keeper.add_done_callback(lambda _: self._keepers.pop(address, None))

    async def _keep_connected(self, address: str, reconnect: bool) -> None:
        """Connects and stays until the connection ends; with ``reconnect``, again after a growing delay."""
        delay = 1.0
        while True:
            conn = ConsumerConnection(self, address)
            try:
                await self._connect(conn)
                delay = 1.0
                assert conn.connection is not None
                await conn.connection.wait_closed()
                if not self._stopping:
                    log.warning("nsqd %s: connection closed", address)
            except NSQError as error:
                log.error("nsqd %s: %s", address, describe(error))
                self._unreachable[address] = describe(error)
            finally:
                await self._disconnect(conn)
            if not reconnect or self._stopping:
                return
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, RECONNECT_DELAY_MAX)

    async def _connect(self, conn: ConsumerConnection) -> None:
        conn.connection = await Connection.open(conn.address, self.config, conn.received)
        settings = conn.connection.server_settings
        conn.max_rdy_count = int(settings.get("max_rdy_count", DEFAULT_MAX_RDY_COUNT))
        await conn.connection.command(encode_command(b"SUB", self.topic.encode(), self.channel.encode()),
                                      self.config.connect_timeout)
        log.info("nsqd %s: subscribed to %s/%s", conn.address, self.topic, self.channel)
        self._unreachable.pop(conn.address, None)
        self._connections[conn.address] = conn
        self._rebalance()

    async def _disconnect(self, conn: ConsumerConnection) -> None:
        if conn.connection is not None:
            conn.connection.close()
            await conn.connection.wait_closed()
        if self._connections.get(conn.address) is conn:
            del self._connections[conn.address]
            conn.lost = True  # nsqd requeues its in-flight messages
            conn.in_flight = conn.queued = 0
            if self._stopping and self.in_flight == 0:
                self._drained.set()
            self._rebalance()

    async def _close_wait(self, conn: ConsumerConnection) -> None:
        """CLS: nsqd answers CLOSE_WAIT and sends nothing more; the connection stays for the responses."""
        conn.set_rdy(0)
        try:
            assert conn.connection is not None
            # no CommandTimeout here: it would close the connection, which must stay for the responses
            reply = await asyncio.wait_for(conn.connection.command(b"CLS\n"), self.config.connect_timeout)
            if reply != CLOSE_WAIT:
                log.warning("nsqd %s answered CLS with %r", conn.address, reply)
        except (TimeoutError, NSQError) as error:
            log.warning("nsqd %s: CLS: %s", conn.address, describe(error))

    # -- discovery ---------------------------------------------------------------------------------------------

    async def _poll_lookupds(self) -> None:
        timeout = max(self.config.connect_timeout * 5, 5.0)
        while True:
            answers = await asyncio.gather(*(lookup_topic(address, self.topic, timeout, self.config.auth_secret)
                                             for address in self.lookupd_http_addresses))
            for lookupd, answer in zip(self.lookupd_http_addresses, answers):
                if answer is None:
                    self._unreachable[lookupd] = "lookupd did not answer"  # lookup_topic logged why
                else:
                    self._unreachable.pop(lookupd, None)
            found = {address for answer in answers if answer for address in answer}
            if any(answer is not None for answer in answers):
                listed = {*found, *self.nsqd_tcp_addresses, *self.lookupd_http_addresses}
                for gone in self._unreachable.keys() - listed:
                    del self._unreachable[gone]
            for address in found:
                self._keep(address, reconnect=False)
            jitter = random.uniform(-self.lookupd_poll_jitter, self.lookupd_poll_jitter)
            await asyncio.sleep(self.lookupd_poll_interval * (1 + jitter))
