"""``Producer``: publishes to one nsqd over TCP.

    async with Producer("127.0.0.1:4150") as producer:
        await producer.publish("events", b"hello")
        await producer.multi_publish("events", [b"a", b"b"])
        await producer.deferred_publish("events", b"later", delay=5.0)

Commands are pipelined: concurrent publishes share the connection and each awaits its own answer (nsqd answers in
order). A lost connection is reopened by the next publish; a publish that was under way when it was lost raises
ConnectionClosed (it may or may not have been taken: publishing again gives at-least-once).

Without an nsqd address, ``lookupd_http_addresses`` find one: the producer connects to a node registered with
the lookupds (``/nodes``), tried in random order, and looks again whenever it has to reconnect.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket
import ssl
from types import TracebackType
from typing import Any, Iterable

from shared.addresses import split_host_port
from shared.log_format import describe
from shared.protocol.frames import encode_command, encode_mpub

from .connection import Connection
from .errors import NSQError
from .lookupd import lookup_nodes

log = logging.getLogger("nsq.client")


class Producer:
    def __init__(self, nsqd_tcp_address: str | None = None, *, lookupd_http_addresses: Iterable[str] = (),
                 user_agent: str = "nsq-py/1.3.0", connect_timeout: float = 5.0, tls: ssl.SSLContext | None = None,
                 auth_secret: str | None = None, **identify: Any) -> None:
        """``identify``: IDENTIFY fields (``client_id``, ``heartbeat_interval`` in ms, ``snappy=True``,
        ``deflate=True`` with ``deflate_level``, ...); ``tls`` upgrades every connection to TLS with that context;
        ``auth_secret`` answers an nsqd that requires AUTH."""
        self.lookupd_http_addresses = list(lookupd_http_addresses)
        if nsqd_tcp_address is None and not self.lookupd_http_addresses:
            raise ValueError("give an nsqd TCP address or lookupd_http_addresses")
        self.address = nsqd_tcp_address
        self._identify = {"client_id": socket.gethostname(), "hostname": socket.gethostname(),
                          "user_agent": user_agent, **identify}
        self._connect_timeout = connect_timeout
        self._tls, self._auth_secret = tls, auth_secret
        self._connection: Connection | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()

    async def __aenter__(self) -> Producer:
        await self.connect()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()

    async def connect(self) -> Connection:
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
            except (OSError, TimeoutError, NSQError) as error:
                log.warning("nsqd %s: %s", address, describe(error))
                continue
            self.address = address
            return connection
        raise NSQError(f"no nsqd reachable (lookupd knows {len(candidates)})")

    async def _open_to(self, address: str) -> Connection:
        host, port = split_host_port(address)
        return await Connection.open(host, port, self._identify, self._connect_timeout, tls=self._tls,
                                     auth_secret=self._auth_secret)

    async def _discover(self) -> list[str]:
        from aiohttp import ClientSession, ClientTimeout

        async with ClientSession(timeout=ClientTimeout(total=self._connect_timeout)) as session:
            answers = await asyncio.gather(*(lookup_nodes(session, address) for address in self.lookupd_http_addresses))
        nodes = list({node for answer in answers if answer for node in answer})
        random.shuffle(nodes)
        return nodes

    async def publish(self, topic: str, body: bytes) -> None:
        await self._command(encode_command(b"PUB", topic.encode(), body=body))

    async def multi_publish(self, topic: str, bodies: list[bytes]) -> None:
        """All of ``bodies`` or none (MPUB is atomic in nsqd)."""
        await self._command(encode_mpub(topic.encode(), bodies))

    async def deferred_publish(self, topic: str, body: bytes, delay: float) -> None:
        """Delivered no sooner than ``delay`` seconds from now."""
        await self._command(encode_command(b"DPUB", topic.encode(), str(round(delay * 1000)).encode(), body=body))

    async def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            await self._connection.wait_closed()
            self._connection = None

    async def _command(self, data: bytes) -> None:
        connection = self._connection
        if connection is None or connection.closed:
            connection = await self.connect()
        await connection.command(data)
