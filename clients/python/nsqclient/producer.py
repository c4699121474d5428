"""``Producer``: publishes to one nsqd over TCP.

    async with Producer("127.0.0.1:4150") as producer:
        await producer.publish("events", b"hello")
        await producer.multi_publish("events", [b"a", b"b"])
        await producer.deferred_publish("events", b"later", delay=5.0)

Commands are pipelined: concurrent publishes share the connection and each awaits its own answer (nsqd answers in
order). A lost connection is reopened by the next publish; a publish that was under way when it was lost raises
ConnectionClosed (it may or may not have been taken: publishing again gives at-least-once), one that got no answer
within the config's ``command_timeout`` raises CommandTimeout (and closes the connection). Every failure is an
NSQError (see ``errors``).

One task publishing a stream uses a ``pipeline`` instead: it writes each publish without waiting for its answer,
up to a window of unanswered ones (see ``pipeline``).

Without an nsqd address, ``lookupd_http_addresses`` find one: the producer connects to a node registered with
the lookupds (``/nodes``), tried in random order, and looks again whenever it has to reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import random
from types import TracebackType
from typing import Any, Iterable

from .config import Config, configure
from .connection import Connection
from .errors import ConnectError, NSQError, describe
from .lookupd import lookup_nodes
from .pipeline import WINDOW, Pipeline, topic_param
from .protocol.frames import encode_command, encode_mpub

log = logging.getLogger("nsq.client")


class Producer:
    def __init__(self, nsqd_tcp_address: str | None = None, *, lookupd_http_addresses: Iterable[str] = (),
                 config: Config | None = None, **settings: Any) -> None:
        """``config`` says how to connect and identify (``Config``); ``settings``, fields of ``Config``, override
        it (``client_id="...", tls=context, snappy=True, auth_secret="..."``)."""
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        if nsqd_tcp_address is None and not self.lookupd_http_addresses:
            raise ValueError("give an nsqd TCP address or lookupd_http_addresses")
        self.address = nsqd_tcp_address
        self.config = configure(config, settings)
        self._connection: Connection | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()

    async def __aenter__(self) -> Producer:
        await self.connect()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()

    async def connect(self) -> Connection:
        """The open connection, or a new one (ConnectError, or NSQProtocolError if nsqd refused IDENTIFY or AUTH)."""
        async with self._connecting:
            if self._connection is None or self._connection.closed:
                self._connection = await self._open()
            return self._connection

    async def _open(self) -> Connection:
        if not self.lookupd_http_addresses:
            assert self.address is not None
            return await self._open_to(self.address)
        candidates = await self._discover()
        for address in candidates:
            try:
                connection = await self._open_to(address)
            except NSQError as error:
                log.warning("nsqd %s: %s", address, describe(error))
                continue
            self.address = address
            return connection
        raise ConnectError(f"no nsqd reachable (lookupd knows {len(candidates)})")

    async def _open_to(self, address: str) -> Connection:
        connection = await Connection.open(address, self.config)
        connection.expect_only_ok()
        return connection

    async def _discover(self) -> list[str]:
        timeout = self.config.connect_timeout
        answers = await asyncio.gather(*(lookup_nodes(address, timeout, self.config.auth_secret)
                                         for address in self.lookupd_http_addresses))
        nodes = list({node for answer in answers if answer for node in answer})
        random.shuffle(nodes)
        return nodes

    async def publish(self, topic: str, body: bytes) -> None:
        await self._command(encode_command(b"PUB", topic_param("PUB", topic), body=body))

    async def multi_publish(self, topic: str, bodies: list[bytes]) -> None:
        """All of ``bodies`` or none (MPUB is atomic in nsqd)."""
        await self._command(encode_mpub(topic_param("MPUB", topic), bodies))

    async def deferred_publish(self, topic: str, body: bytes, delay: float) -> None:
        """Delivered no sooner than ``delay`` seconds from now."""
        await self._command(encode_command(b"DPUB", topic_param("DPUB", topic), str(round(delay * 1000)).encode(),
                                           body=body))

    def pipeline(self, window: int = WINDOW, timeout: float | None = None) -> Pipeline:
        """Publishes that do not wait for their answers: at most ``window`` unanswered, each failing with
        CommandTimeout if not answered within ``timeout`` seconds (by default the config's ``command_timeout``;
        see ``pipeline``)."""
        return Pipeline(self, window, self.config.command_timeout if timeout is None else timeout)

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            await self._connection.wait_closed()
            self._connection = None

    async def _command(self, data: bytes) -> None:
        connection = self._connection
        if connection is None or connection.closed:
            connection = await self.connect()
        await connection.command(data, self.config.command_timeout)
