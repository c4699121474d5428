"""One connection worker of nsqd (workers.py), started as ``main([LISTEN_FD, LINK_FD, SETTINGS])``.

It accepts clients from the listening socket it inherited, relays what they send to nsqd over the link and writes
what nsqd answers, and hand-shakes TLS when nsqd asks. It knows nothing of the protocol. It exits when the link
closes: nsqd stopped (every client closed first, what nsqd sent written) or died.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import ssl
import sys
from typing import Any

from nsqclient.addresses import join_host_port
from nsqclient.event_loop import install_uvloop
from shared.tls import server_context

from . import relay_frames as frames
from .relay_link import RelayLink
from .relayed import tls_session

# how long the clients of a worker whose nsqd is gone get to take what was written to them
_DRAIN_TIMEOUT = 5.0


class ClientSocket(asyncio.Protocol):
    """One client's connection, relayed to nsqd as connection ``id``."""

    def __init__(self, link: NSQDLink, connection_id: int) -> None:
        self.link = link
        self.id = connection_id
        self.transport: asyncio.Transport
        # reading stops while nsqd asks, while the link to nsqd is full, or while nsqd has not taken in most of
        # what was read (``INPUT_WINDOW``)
        self.paused_by_nsqd = False
        self.forwarded = self.consumed = 0
        self.reading = True
        # while the send buffer is above its high mark, nsqd's questions wait for it to drain (``ask_drained``)
        self.write_paused = False
        self.drains_asked = 0
        self.gone = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.link.clients[self.id] = self
        peer = transport.get_extra_info("peername")
        address = join_host_port(peer[0], peer[1]) if isinstance(peer, tuple) else str(peer or "")
        self.link.send(frames.OPENED, self.id, address.encode())
        self.apply_reading()

    def data_received(self, data: bytes) -> None:
        self.link.send(frames.RECEIVED, self.id, data)
        self.forwarded += len(data)
        if self.forwarded - self.consumed > frames.INPUT_WINDOW:
            self.apply_reading()

    def apply_reading(self) -> None:
        reading = not (self.paused_by_nsqd or self.link.reading_paused
                       or self.forwarded - self.consumed > frames.INPUT_WINDOW)
        if reading != self.reading:
            self.reading = reading
            if reading:
                self.transport.resume_reading()
            else:
                self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.link.clients.pop(self.id, None)
        self.link.send(frames.CLOSED, self.id, b"")
        self.gone.set_result(None)

    def ask_drained(self) -> None:
        if self.write_paused:
            self.drains_asked += 1
        else:
            self.link.send(frames.DRAINED, self.id, b"")

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        for _ in range(self.drains_asked):
            self.link.send(frames.DRAINED, self.id, b"")
        self.drains_asked = 0

    async def start_tls(self, context: ssl.SSLContext, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport = await loop.start_tls(self.transport, self, context, server_side=True,
                                             ssl_handshake_timeout=timeout)
        except (OSError, ssl.SSLError, TimeoutError):
            transport = None
        if transport is None:
            self.link.send(frames.TLS_STARTED, self.id, b"")
            self.transport.abort()
            return
        self.transport = transport
        self.link.send(frames.TLS_STARTED, self.id, tls_session(transport.get_extra_info("ssl_object")))


class NSQDLink(RelayLink):
    """The socket to nsqd: clients' bytes out, once per turn; nsqd's frames in, each to its client."""

    def __init__(self, tls_context: ssl.SSLContext | None) -> None:
        super().__init__()
        self._tls_context = tls_context
        self._tls_tasks: set[asyncio.Task[None]] = set()
        self.clients: dict[int, ClientSocket] = {}
        self.reading_paused = False  # nsqd does not keep up: no client is read from
        self.server: asyncio.AbstractServer | None = None
        self.closed = self._loop.create_future()

    def frames_received(self, received: list[tuple[int, int, bytes]]) -> None:
        clients = self.clients
        for kind, connection, payload in received:
            client = clients.get(connection)
            if kind == frames.SEND:
                if client is not None:
                    client.transport.write(payload)
            elif kind == frames.STOP_ACCEPTING:
                if self.server is not None:
                    self.server.close()
            elif client is None:
                continue
            elif kind == frames.CLOSE:
                client.transport.close()
            elif kind == frames.ABORT:
                client.transport.abort()
            elif kind == frames.CONSUMED:
                client.consumed = frames.read_count(payload)
                client.apply_reading()
            elif kind == frames.PAUSE_READING:
                client.paused_by_nsqd = True
                client.apply_reading()
            elif kind == frames.RESUME_READING:
                client.paused_by_nsqd = False
                client.apply_reading()
            elif kind == frames.ASK_DRAINED:
                client.ask_drained()
            elif kind == frames.START_TLS:
                self._start_tls(client, frames.read_timeout(payload))

    def _start_tls(self, client: ClientSocket, timeout: float) -> None:
        if self._tls_context is None:  # nsqd offers TLS only with a certificate: not reached
            self.send(frames.TLS_STARTED, client.id, b"")
            return
        task = asyncio.create_task(client.start_tls(self._tls_context, timeout))
        self._tls_tasks.add(task)
        task.add_done_callback(self._tls_tasks.discard)

    def pause_writing(self) -> None:
        self.reading_paused = True
        for client in self.clients.values():
            client.apply_reading()

    def resume_writing(self) -> None:
        self.reading_paused = False
        for client in self.clients.values():
            client.apply_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def serve(listen_fd: int, link_fd: int, settings: dict[str, Any]) -> None:
    loop = asyncio.get_running_loop()
    tls_context = server_context(settings["tls_cert"], settings["tls_key"], settings["tls_root_ca_file"],
                                 client_certificates=bool(settings["tls_client_auth_policy"]),
                                 min_version=settings["tls_min_version"])
    _, link = await loop.create_unix_connection(lambda: NSQDLink(tls_context),
                                                sock=socket.socket(fileno=link_fd))
    listening = socket.socket(fileno=listen_fd)
    ids = iter(range(1, 1 << 32))

    def client() -> ClientSocket:
        return ClientSocket(link, next(ids))

    if listening.family == socket.AF_UNIX:
        link.server = await loop.create_unix_server(client, sock=listening)
    else:
        link.server = await loop.create_server(client, sock=listening)
    link.send(frames.READY, 0, b"")
    await link.closed
    link.server.close()
    clients = list(link.clients.values())
    for each in clients:
        each.transport.close()  # what nsqd sent is written first
    if clients:
        await asyncio.wait([each.gone for each in clients], timeout=_DRAIN_TIMEOUT)


def main(argv: list[str]) -> None:
    # nsqd stops its workers itself, in order (a signal sent to the whole process group is nsqd's to handle): a worker
    # exits when its link to nsqd closes
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    install_uvloop()
    asyncio.run(serve(int(argv[0]), int(argv[1]), json.loads(argv[2])))

