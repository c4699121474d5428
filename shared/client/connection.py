"""One client connection to an nsqd: magic, IDENTIFY, then commands answered in order.

nsqd answers the commands that have answers (IDENTIFY, SUB, PUB, MPUB, DPUB, CLS) in the order they were sent,
so replies are matched to a FIFO of futures and commands can be pipelined. Heartbeats are answered with NOP here;
message frames go to ``on_message``. Writes made in one turn of the event loop leave in one ``write``, so a
consumer's FINs and a producer's pipelined publishes cost one system call per turn instead of one each.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from typing import Any, Callable

from shared.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    Message,
    decode_message,
)

from .errors import ConnectionClosed, NSQProtocolError

log = logging.getLogger("nsq.client")

# the only errors after which nsqd keeps the connection
NON_FATAL = (b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED")


class Connection(asyncio.Protocol):
    def __init__(self, on_message: Callable[[Message], None] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.server_settings: dict[str, Any] = {}
        self._decoder = FrameDecoder()
        self._waiting: deque[asyncio.Future[bytes]] = deque()
        self._on_message = on_message
        self._closed = asyncio.get_running_loop().create_future()
        # set by a fatal error frame: nsqd is closing the connection, so nothing more may be sent on it
        self._failed = False
        self._loop = asyncio.get_running_loop()
        self._output: list[bytes] = []
        self.last_received = self._loop.time()

    @classmethod
    async def open(cls, host: str, port: int, identify: dict[str, Any], timeout: float = 5.0,
                   on_message: Callable[[Message], None] | None = None) -> Connection:
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(
            loop.create_connection(lambda: cls(on_message), host, port), timeout)
        await connection._identify(identify, timeout)
        return connection

    async def _identify(self, identify: dict[str, Any], timeout: float) -> None:
        assert self.transport is not None
        self.transport.write(MAGIC_V2)
        body = json.dumps({"feature_negotiation": True, **identify}).encode()
        reply = await asyncio.wait_for(self.command(b"IDENTIFY\n" + len(body).to_bytes(4, "big") + body), timeout)
        if reply != b"OK":
            self.server_settings = json.loads(reply)

    @property
    def closed(self) -> bool:
        return self._failed or self._closed.done()

    def command(self, data: bytes) -> asyncio.Future[bytes]:
        """Sends a command that nsqd answers; the future gets the answer, NSQProtocolError or ConnectionClosed."""
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        if self.transport is None or self.closed:
            future.set_exception(ConnectionClosed("not connected"))
            return future
        self._waiting.append(future)
        self._write(data)
        return future

    def send(self, data: bytes) -> None:
        """Sends a command nsqd does not answer (RDY, FIN, REQ, TOUCH, NOP)."""
        if self.transport is not None and not self.closed:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if not self._output:
            self._loop.call_soon(self._flush)
        self._output.append(data)

    def _flush(self) -> None:
        if self._output and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self._output))
        self._output.clear()

    def close(self) -> None:
        if self.transport is not None:
            self._flush()
            self.transport.close()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    # -- asyncio.Protocol ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.last_received = self._loop.time()
        for frame_type, payload in self._decoder.feed(data):
            if frame_type == FRAME_TYPE_MESSAGE:
                if self._on_message is not None:
                    self._on_message(decode_message(payload))
            elif payload == HEARTBEAT and frame_type != FRAME_TYPE_ERROR:
                self.send(b"NOP\n")
            elif frame_type == FRAME_TYPE_ERROR and not payload.startswith(NON_FATAL):
                self._failed = True
                self._answer(NSQProtocolError.from_frame(payload))
                self.close()
            elif self._waiting:
                future = self._waiting.popleft()
                if not future.done():
                    if frame_type == FRAME_TYPE_ERROR:
                        future.set_exception(NSQProtocolError.from_frame(payload))
                    else:
                        future.set_result(payload)
            elif frame_type == FRAME_TYPE_ERROR:
                log.error("nsqd error with no command waiting: %s", payload.decode("utf-8", "replace"))

    def _answer(self, error: NSQProtocolError) -> None:
        if self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(error)
        else:
            log.error("nsqd error with no command waiting: %s", error)

    def connection_lost(self, exc: Exception | None) -> None:
        while self._waiting:
            future = self._waiting.popleft()
            if not future.done():
                future.set_exception(ConnectionClosed(str(exc) if exc else "connection closed by nsqd"))
        if not self._closed.done():
            self._closed.set_result(None)
