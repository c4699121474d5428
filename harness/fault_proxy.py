"""A TCP proxy for tests that damages what it carries, as told while it runs.

    async with FaultProxy(nsqd.tcp_address, seed=1) as proxy:
        producer = Producer(proxy.address_text)
        proxy.to_server = Faults(delay=0.05, drop=0.1)  # every chunk late, one in ten loses bytes
        proxy.stall()                                   # nothing forwarded, both sockets open: a pulled cable
        proxy.resume()
        proxy.cut("client")                             # the client sees its connection closed, nsqd sees nothing

Each accepted connection gets a connection to the upstream address and two pumps, one per direction, that read a
chunk, damage it as that direction's ``Faults`` say at that moment, wait its delay and write it, in order.
Dropping bytes corrupts the stream: that is the point (the peer must answer with an error, or time out). Without
faults it forwards every byte unchanged, and an end of stream as a half-close.

A stall stops both directions: the pumps stop reading (the kernel buffers what the peers send, as it would for a
cable that was pulled) and hold what they had read; ``resume`` forwards it all. A cut closes one side of every
current connection; the other side stays open and hears nothing more, until its peer closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

CHUNK = 65536
Side = Literal["client", "server"]


@dataclass(frozen=True)
class Faults:
    """What happens to one direction's chunks."""

    delay: float = 0.0  # seconds each chunk waits before it is forwarded (chunks keep their order)
    drop: float = 0.0  # probability that a chunk loses bytes: all of it, or a random slice of it


@dataclass
class Counts:
    chunks: int = 0
    damaged: int = 0  # chunks that lost bytes


class _Link:
    """One proxied connection: the client's socket, the upstream one, and which of them was cut."""

    def __init__(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 server: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        self.readers: dict[Side, asyncio.StreamReader] = {"client": client[0], "server": server[0]}
        self.writers: dict[Side, asyncio.StreamWriter] = {"client": client[1], "server": server[1]}
        self.cut: Side | None = None

    def cut_off(self, side: Side) -> None:
        self.cut = side
        self.writers[side].close()

    def end(self, side: Side) -> None:
        """Passes an end of stream on to ``side`` (a half-close: it may still send), if it is still there."""
        with contextlib.suppress(OSError):
            self.writers[side].write_eof()

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


class FaultProxy:
    def __init__(self, upstream: tuple[str, int], seed: int = 0) -> None:
        self.upstream = upstream
        self.to_server = Faults()
        self.to_client = Faults()
        self.counts = Counts()
        self._rng = random.Random(seed)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.close()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    @property
    def address(self) -> tuple[str, int]:
        assert self._server is not None, "start() first"
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    @property
    def address_text(self) -> str:
        return "%s:%d" % self.address

    def clear(self) -> None:
        """No more faults: no delay, no drops, forwarding (a cut stays cut)."""
        self.to_server = self.to_client = Faults()
        self.resume()

    def stall(self) -> None:
        """Forwards nothing more, either way, on any connection (new ones included), all sockets kept open."""
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def cut(self, side: Side) -> None:
        """Closes the ``side`` socket of every current connection; its other socket stays open, silent."""
        for link in self._links:
            if link.cut is None:
                link.cut_off(side)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """asyncio.start_server's callback. The connection is served by a task of the proxy's own, which close()
        cancels: start_server logs an error for a callback task that was cancelled."""
        task = asyncio.create_task(self._serve((reader, writer)))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        try:
            await asyncio.wait({task})
        finally:
            writer.close()
        if not task.cancelled():
            task.result()

    async def _serve(self, client: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        await self._flowing.wait()
        try:
            server = await asyncio.open_connection(*self.upstream)
        except OSError:
            return  # the client sees its connection closed, as if nothing listened
        link = _Link(client, server)
        self._links.add(link)
        try:
            await asyncio.gather(self._pump(link, "client", "server"), self._pump(link, "server", "client"))
        finally:
            self._links.discard(link)
            link.close()

    async def _pump(self, link: _Link, source: Side, target: Side) -> None:
        try:
            await self._forward(link, source, target)
        except OSError:
            if link.cut is None:
                link.close()  # a reset on one side ends the other too
                return
        if link.cut is None:
            link.end(target)
        elif link.cut != source:
            with contextlib.suppress(OSError):  # the side left open hears nothing, until its peer closes
                while await link.readers[source].read(CHUNK):
                    pass

    async def _forward(self, link: _Link, source: Side, target: Side) -> None:
        """Until an end of stream or a cut."""
        reader, writer = link.readers[source], link.writers[target]
        while True:
            await self._flowing.wait()
            data = await reader.read(CHUNK)
            if not data or link.cut is not None:
                return
            faults = self.to_server if target == "server" else self.to_client
            data = self._damage(data, faults.drop)
            if faults.delay:
                await asyncio.sleep(faults.delay)
            await self._flowing.wait()
            if link.cut is not None:
                return
            writer.write(data)
            await writer.drain()

    def _damage(self, data: bytes, drop: float) -> bytes:
        self.counts.chunks += 1
        if not drop or self._rng.random() >= drop:
            return data
        self.counts.damaged += 1
        if self._rng.random() < 0.5:
            start, end = 0, len(data)
        else:
            start = self._rng.randrange(len(data))
            end = self._rng.randint(start + 1, len(data))
        return data[:start] + data[end:]

