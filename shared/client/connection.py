"""One client connection to an nsqd: magic, IDENTIFY (with the upgrades it negotiates: TLS, then snappy or
deflate, each confirmed by an ``OK``), AUTH when nsqd requires it, then commands answered in order.

nsqd answers the commands that have answers (IDENTIFY, SUB, PUB, MPUB, DPUB, CLS) in the order they were sent,
so replies are matched to a FIFO of futures and commands can be pipelined. Heartbeats are answered with NOP here;
message frames go to ``on_message``. Writes made in one turn of the event loop leave in one ``write``, so a
consumer's FINs and a producer's pipelined publishes cost one system call per turn instead of one each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections import deque
from typing import Any, Callable

from shared.protocol.compression import Codec, DeflateCodec, SnappyCodec
from shared.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    Message,
    decode_message,
)

from .errors import ConnectionClosed, NSQError, NSQProtocolError

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
        # while IDENTIFY's upgrades are under way, frames are taken one at a time: the bytes after an upgrade's
        # reply may already be compressed
        self._upgrading = False
        # run on the payload of the reply to the matching waiting command, before any later byte is decoded
        self._reply_hooks: dict[asyncio.Future[bytes], Callable[[bytes], None]] = {}
        self._codec: Codec | None = None
        self._compression_ok: asyncio.Future[bytes] | None = None
        # what nsqd answered AUTH with (identity, identity_url, permission_count)
        self.auth: dict[str, Any] = {}

    @classmethod
    async def open(cls, host: str, port: int, identify: dict[str, Any], timeout: float = 5.0,
                   on_message: Callable[[Message], None] | None = None, tls: ssl.SSLContext | None = None,
                   auth_secret: str | None = None) -> Connection:
        """Connected and identified; ``identify`` may ask for ``snappy`` or ``deflate`` (``deflate_level``), ``tls``
        upgrades to TLS with that context, ``auth_secret`` answers an nsqd that requires AUTH."""
        loop = asyncio.get_running_loop()
        _, connection = await asyncio.wait_for(
            loop.create_connection(lambda: cls(on_message), host, port), timeout)
        try:
            await asyncio.wait_for(connection._handshake(identify, tls, host, auth_secret), timeout)
        except BaseException:
            connection.close()
            raise
        return connection

    async def _handshake(self, identify: dict[str, Any], tls: ssl.SSLContext | None, host: str,
                         auth_secret: str | None) -> None:
        assert self.transport is not None
        self.transport.write(MAGIC_V2)
        body = json.dumps({"feature_negotiation": True, **identify, "tls_v1": tls is not None}).encode()
        self._upgrading = True
        reply = await self._command_then(b"IDENTIFY\n" + len(body).to_bytes(4, "big") + body, self._identified)
        if self.server_settings.get("tls_v1"):
            assert tls is not None
            tls_ok = self._expect_reply(self._start_compression)
            transport = await self._loop.start_tls(self.transport, self, tls, server_hostname=host)
            if transport is None:
                raise ConnectionClosed("connection closed during the TLS handshake")
            self.transport = transport
            await tls_ok
        if self._compression_ok is not None:
            await self._compression_ok
        self._upgrading = False
        if reply != b"OK" and self.server_settings.get("auth_required"):
            if auth_secret is None:
                raise NSQError("nsqd requires AUTH: give an auth secret")
            self.auth = json.loads(await self.command(b"AUTH\n" + _sized(auth_secret.encode())))

    def _identified(self, reply: bytes) -> None:
        if reply != b"OK":
            self.server_settings = json.loads(reply)
        if not self.server_settings.get("tls_v1"):
            self._start_compression(reply)

    def _start_compression(self, _: bytes) -> None:
        """From here on both directions are compressed, if IDENTIFY negotiated it; nsqd confirms with an OK."""
        settings = self.server_settings
        if settings.get("snappy"):
            self._codec = SnappyCodec()
        elif settings.get("deflate"):
            self._codec = DeflateCodec(int(settings.get("deflate_level", 6)))
        else:
            return
        self._compression_ok = self._expect_reply()

    def _command_then(self, data: bytes, hook: Callable[[bytes], None]) -> asyncio.Future[bytes]:
        future = self.command(data)
        self._reply_hooks[future] = hook
        return future

    def _expect_reply(self, hook: Callable[[bytes], None] | None = None) -> asyncio.Future[bytes]:
        """A reply nsqd sends without a command (the OK after an upgrade)."""
        future: asyncio.Future[bytes] = self._loop.create_future()
        self._waiting.append(future)
        if hook is not None:
            self._reply_hooks[future] = hook
        return future

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
            data = b"".join(self._output)
            self.transport.write(data if self._codec is None else self._codec.compress(data))
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
        if self._codec is not None:
            data = b"".join(self._codec.decompress(data))
        if not self._upgrading:
            for frame_type, payload in self._decoder.feed(data):
                self._frame(frame_type, payload)
            return
        pending = data
        while frames := self._decoder.feed(pending, limit=1 if self._upgrading else -1):
            pending = b""
            for frame_type, payload in frames:
                codec = self._codec
                self._frame(frame_type, payload)
                if self._codec is not codec and self._codec is not None:
                    pending = b"".join(self._codec.decompress(self._decoder.take_buffer()))

    def _frame(self, frame_type: int, payload: bytes) -> None:
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
            hook = self._reply_hooks.pop(future, None) if self._reply_hooks else None
            if not future.done():
                if frame_type == FRAME_TYPE_ERROR:
                    future.set_exception(NSQProtocolError.from_frame(payload))
                else:
                    future.set_result(payload)
                    if hook is not None:
                        hook(payload)
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


def _sized(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body
