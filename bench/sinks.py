"""Stand-in servers that do no work, to measure the load generators' own ceilings."""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import struct
import threading
from multiprocessing.process import BaseProcess

from nsqclient.protocol.frames import encode_message_frame

_OK_FRAME = struct.pack(">ii", 6, 0) + b"OK"
_SIZE = struct.Struct(">i")


def _serve(handler: "type[_Connection]", **params: object) -> tuple[tuple[str, int], socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def accept_loop() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handler(conn, **params).run, daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    return listener.getsockname(), listener


class _Connection:
    def __init__(self, conn: socket.socket, **params: object) -> None:
        self.conn = conn
        self.buffer = b""

    def read(self, count: int) -> bytes:
        while len(self.buffer) < count:
            chunk = self.conn.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        data, self.buffer = self.buffer[:count], self.buffer[count:]
        return data

    def read_line(self) -> bytes:
        while b"\n" not in self.buffer:
            chunk = self.conn.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def run(self) -> None:
        try:
            self.read(4)
            self.serve()
        except (EOFError, OSError):
            pass
        finally:
            self.conn.close()

    def serve(self) -> None:
        raise NotImplementedError


class _PublishSink(_Connection):
    """Answers every PUB/MPUB with OK without looking at the messages."""

    def serve(self) -> None:
        while True:
            self.read_line()
            (size,) = _SIZE.unpack(self.read(4))
            self.read(size)
            self.conn.sendall(_OK_FRAME)


class _MessageSource(_Connection):
    """After SUB, streams message frames as fast as it can and ignores the FINs."""

    def serve(self) -> None:
        self.read_line()
        frames = encode_message_frame(b"0123456789abcdef", b"x" * 200, 0, 1) * 500
        self.conn.setblocking(False)
        while True:
            try:
                self.conn.recv(1 << 20)
            except BlockingIOError:
                pass
            self.conn.setblocking(True)
            self.conn.sendall(frames)
            self.conn.setblocking(False)


def publish_sink() -> tuple[tuple[str, int], socket.socket]:
    return _serve(_PublishSink)


def message_source() -> tuple[tuple[str, int], socket.socket]:
    return _serve(_MessageSource)


_HTTP_OK = (b"HTTP/1.1 200 OK\r\nX-Nsq-Content-Type: nsq; version=1.0\r\nDate: Mon, 23 Nov 2026 00:00:00 GMT\r\n"
            b"Content-Length: 2\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nOK")


class _HTTPSink(asyncio.Protocol):
    """Parses each request (httptools, as nsqd does) and answers nsqd's OK without doing anything."""

    def __init__(self) -> None:
        import httptools

        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        self.transport.write(_HTTP_OK)


def _serve_http(listener: socket.socket) -> None:
    from nsqclient.event_loop import new_event_loop

    loop = new_event_loop()
    loop.run_until_complete(loop.create_server(_HTTPSink, sock=listener))
    loop.run_forever()


def http_sink() -> tuple[tuple[str, int], BaseProcess]:
    """A do-nothing HTTP server in a process of its own (uvloop and httptools, like nsqd): stop it with
    ``terminate()``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    process = multiprocessing.get_context("fork").Process(target=_serve_http, args=(listener,), daemon=True)
    process.start()
    address: tuple[str, int] = listener.getsockname()
    listener.close()
    return address, process
