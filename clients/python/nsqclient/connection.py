"""One client connection to an nsqd: magic, IDENTIFY (with the upgrades it negotiates: TLS, then snappy or
deflate, each confirmed by an ``OK``), AUTH when nsqd requires it, then commands answered in order.

nsqd answers the commands that have answers (IDENTIFY, SUB, PUB, MPUB, DPUB, CLS) in the order they were sent,
so replies are matched to a FIFO of futures and commands can be pipelined. A command's timeout costs no timer of
its own: one timer per connection watches the earliest deadline of the commands waiting. Heartbeats are answered
with NOP here; message frames go to ``on_message``. Writes made in one turn of the event loop leave in one
``write``, so a consumer's FINs and a producer's pipelined publishes cost one system call per turn instead of one
each; past ``WRITE_AT_ONCE`` bytes they leave at once, so that a publisher that does not yield (its window has
room) keeps nsqd busy while it encodes what comes next.

This is the library's boundary with the network: what the socket, TLS or the clock raise (OSError, ssl.SSLError,
TimeoutError, a JSON answer that does not parse) leaves as the library's own errors (``errors``), with the original
as ``__cause__``. ``open`` raises ConnectError, or NSQProtocolError when nsqd refused IDENTIFY or AUTH; a command's
future ends with its answer, NSQProtocolError, ConnectionClosed or CommandTimeout.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections import deque
from typing import Any, Callable

from .addresses import is_unix_socket, split_host_port
from .config import Config
from .errors import CommandTimeout, ConnectError, ConnectionClosed, NSQProtocolError, describe
from .protocol.compression import Codec, DeflateCodec, SnappyCodec
from .protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    HEARTBEAT,
    MAGIC_V2,
    FrameDecoder,
    Message,
    decode_message,
)

log = logging.getLogger("nsq.client")

# the only errors after which nsqd keeps the connection
NON_FATAL = (b"E_FIN_FAILED", b"E_REQ_FAILED", b"E_TOUCH_FAILED")
WRITE_AT_ONCE = 64 * 1024
_NO_DEADLINE = (math.inf, math.inf)


class Connection(asyncio.Protocol):
    def __init__(self, on_message: Callable[[Message], None] | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.server_settings: dict[str, Any] = {}
        self._decoder = FrameDecoder()
        self._waiting: deque[asyncio.Future[bytes]] = deque()
        # beside each waiting future: its deadline (inf without a timeout) and its timeout, for the error's message
        self._deadlines: deque[tuple[float, float]] = deque()
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_due = math.inf
        self._on_message = on_message
        self._closed = asyncio.get_running_loop().create_future()
        # set by a fatal error frame, a command's timeout or bytes that cannot be read: the connection is closing,
        # so nothing more may be sent on it
        self._failed = False
        self._loop = asyncio.get_running_loop()
        self._output: list[bytes] = []
        self._output_size = 0
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
        self._lost_reason: str | None = None  # why this end dropped the connection, for the commands it fails
        self._only_ok = False  # see expect_only_ok

    @classmethod
    async def open(cls, address: str, config: Config,
                   on_message: Callable[[Message], None] | None = None) -> Connection:
        """Connected to ``address`` (``host:port``, or a unix socket's path) and identified as ``config`` says,
        within its ``connect_timeout``: upgraded to TLS and compression if it asks for them and nsqd agrees,
        authenticated if nsqd requires it."""
        loop = asyncio.get_running_loop()
        timeout = config.connect_timeout
        if is_unix_socket(address):
            host, connecting = "localhost", loop.create_unix_connection(lambda: cls(on_message), address)
        else:
            host, port = split_host_port(address)
            connecting = loop.create_connection(lambda: cls(on_message), host, port)
        try:
            # not wait_for: on Python 3.11 a cancellation as the connection completes loses it unclosed
            async with asyncio.timeout(timeout):
                _, connection = await connecting
        except TimeoutError as error:
            raise ConnectError(f"no connection within {timeout:g} s") from error
        except OSError as error:
            raise ConnectError(describe(error)) from error
        try:
            await asyncio.wait_for(connection._handshake(config, host), timeout)
        except TimeoutError as error:
            connection.close()
            raise ConnectError(f"identifying: no answer within {timeout:g} s") from error
        except (OSError, ValueError, ConnectionClosed) as error:  # ssl.SSLError is an OSError
            connection.close()
            raise ConnectError(f"identifying: {describe(error)}") from error
        except BaseException:  # nsqd's refusal (NSQProtocolError), ConnectError, a cancellation
            connection.close()
            raise
        return connection

    async def _handshake(self, config: Config, host: str) -> None:
        assert self.transport is not None
        self.transport.write(MAGIC_V2)
        body = json.dumps(config.identify()).encode()
        self._upgrading = True
        reply = await self._command_then(b"IDENTIFY\n" + _sized(body), self._identified)
        if self.server_settings.get("tls_v1"):
            assert config.tls is not None
            tls_ok = self._expect_reply(self._start_compression)
            try:
                transport = await self._loop.start_tls(self.transport, self, config.tls,
                                                       server_hostname=config.tls_server_name or host)
            except BaseException:
                # the OK that would have followed is not awaited any more: the handshake's error is the one raised
                if not tls_ok.cancel() and not tls_ok.cancelled():
                    tls_ok.exception()
                raise
            if transport is None:
                raise ConnectionClosed("connection closed during the TLS handshake")
            self.transport = transport
            await tls_ok
        if self._compression_ok is not None:
            await self._compression_ok
        self._upgrading = False
        if reply != b"OK" and self.server_settings.get("auth_required"):
            if config.auth_secret is None:
                raise ConnectError("nsqd requires AUTH: give an auth secret")
            self.auth = json.loads(await self.command(b"AUTH\n" + _sized(config.auth_secret.encode())))

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
        self._wait(future, None)
        if hook is not None:
            self._reply_hooks[future] = hook
        return future

    def expect_only_ok(self) -> None:
        """From now on every command is one nsqd answers with OK or an error (a producer's): any other answer means
        the stream cannot be read (bytes lost on the way), and ends the connection before anything read after it
        can be taken for an answer."""
        self._only_ok = True

    @property
    def closed(self) -> bool:
        return self._failed or self._closed.done()

    def command(self, data: bytes, timeout: float | None = None) -> asyncio.Future[bytes]:
        """Sends a command that nsqd answers; the future gets the answer, NSQProtocolError, ConnectionClosed, or
        CommandTimeout when no answer came within ``timeout`` seconds (which closes the connection: what nsqd
        did with the command is unknown, and so is what it did with the commands sent after it)."""
        future: asyncio.Future[bytes] = self._loop.create_future()
        if self.transport is None or self.closed:
            future.set_exception(ConnectionClosed("not connected"))
            return future
        self._wait(future, timeout)
        self._write(data)
        return future

    def _wait(self, future: asyncio.Future[bytes], timeout: float | None) -> None:
        """``future`` gets the next answer not yet claimed, unless ``timeout`` seconds pass first."""
        self._waiting.append(future)
        if timeout is None:
            self._deadlines.append(_NO_DEADLINE)
            return
        deadline = self._loop.time() + timeout
        self._deadlines.append((deadline, timeout))
        if deadline < self._watchdog_due:
            self._watch(deadline)

    def _watch(self, deadline: float) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
        self._watchdog = self._loop.call_at(deadline, self._check_deadlines, deadline)
        self._watchdog_due = deadline

    def _next_waiting(self) -> asyncio.Future[bytes]:
        self._deadlines.popleft()
        return self._waiting.popleft()

    def _check_deadlines(self, due: float) -> None:
        """Runs at the earliest deadline it knew of, ``due`` (or a little before: uvloop's timers count whole
        milliseconds); answers may have come since, and commands been sent."""
        self._watchdog, self._watchdog_due = None, math.inf
        if not self._deadlines:
            return  # the next command with a timeout sets the watchdog again
        deadline, timeout = min(self._deadlines)  # a scan, once per deadline, not per command
        if deadline > max(due, self._loop.time()):
            if deadline != math.inf:
                self._watch(deadline)
            return
        future = self._waiting[self._deadlines.index((deadline, timeout))]
        if not future.done():
            future.set_exception(CommandTimeout(f"no answer within {timeout:g} s"))
        self._fail(f"closed after a command got no answer within {timeout:g} s")

    def send(self, data: bytes) -> None:
        """Sends a command nsqd does not answer (RDY, FIN, REQ, TOUCH, NOP)."""
        if self.transport is not None and not self.closed:
            self._write(data)

    def _write(self, data: bytes) -> None:
        if not self._output:
            self._loop.call_soon(self._flush)
        self._output.append(data)
        self._output_size += len(data)
        if self._output_size >= WRITE_AT_ONCE:
            self._flush()

    def _flush(self) -> None:
        if self._output and self.transport is not None and not self.transport.is_closing():
            data = b"".join(self._output)
            self.transport.write(data if self._codec is None else self._codec.compress(data))
        self._output.clear()
        self._output_size = 0

    def close(self) -> None:
        if self._lost_reason is None:
            self._lost_reason = "connection closed"
        if self.transport is not None:
            self._flush()
            self.transport.close()

    def _fail(self, reason: str) -> None:
        """Nothing more may be sent; the commands still waiting end with ConnectionClosed(reason) now. What was
        not written yet is dropped: it belongs to commands that fail, and an nsqd that stopped reading (a
        connection gone silent) would otherwise hold the close up for ever."""
        self._failed = True
        self._lost_reason = reason
        if self.transport is not None:
            self._output.clear()
            self._output_size = 0
            self.transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed)

    # -- asyncio.Protocol ------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self._receive(data)
        except ValueError as error:  # a corrupt compressed stream, or a message frame too short to be one
            log.error("nsqd sent what cannot be read, closing: %s", error)
            self._fail(f"nsqd sent what cannot be read: {error}")

    def _receive(self, data: bytes) -> None:
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
        if self._failed:
            return  # what follows a fatal error, in the same read, answers nothing
        if frame_type == FRAME_TYPE_MESSAGE:
            if self._on_message is not None:
                self._on_message(decode_message(payload))
        elif frame_type > FRAME_TYPE_MESSAGE:
            raise ValueError(f"unknown frame type {frame_type}")
        elif payload == HEARTBEAT and frame_type != FRAME_TYPE_ERROR:
            self.send(b"NOP\n")
        elif frame_type == FRAME_TYPE_ERROR and not payload.startswith(NON_FATAL):
            error = NSQProtocolError.from_frame(payload)
            self._answer(error)
            self._fail(f"nsqd closed the connection after {error.code}")
        elif self._waiting:
            if self._only_ok and payload != b"OK" and frame_type != FRAME_TYPE_ERROR:
                # raised before the command stops waiting: the connection's end fails it
                raise ValueError(f"{payload[:32]!r} answered a command only OK or an error can answer")
            future = self._next_waiting()
            hook = self._reply_hooks.pop(future, None) if self._reply_hooks else None
            if not future.done():
                if frame_type == FRAME_TYPE_ERROR:
                    future.set_exception(NSQProtocolError.from_frame(payload))
                else:
                    if hook is not None:
                        try:
                            hook(payload)
                        except ValueError as error:  # an answer that does not parse: open() fails with it
                            future.set_exception(error)
                            raise
                    future.set_result(payload)
        elif frame_type == FRAME_TYPE_ERROR:
            log.error("nsqd error with no command waiting: %s", payload.decode("utf-8", "replace"))

    def _answer(self, error: NSQProtocolError) -> None:
        if self._waiting:
            future = self._next_waiting()
            if not future.done():
                future.set_exception(error)
        else:
            log.error("nsqd error with no command waiting: %s", error)

    def connection_lost(self, exc: Exception | None) -> None:
        reason = self._lost_reason or (str(exc) if exc else "connection closed by nsqd")
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog, self._watchdog_due = None, math.inf
        while self._waiting:
            future = self._next_waiting()
            if not future.done():
                future.set_exception(ConnectionClosed(reason))
        if not self._closed.done():
            self._closed.set_result(None)


def _sized(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body
