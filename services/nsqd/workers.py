"""nsqd's connection workers (``--workers``): processes that hold the clients' sockets, while nsqd keeps the
topics, channels, clients and every rule of the protocol.

Every worker accepts from the one listening socket nsqd bound (the kernel hands each new connection to a worker
waiting in ``accept``), reads what its clients send and writes what nsqd answers, and negotiates TLS for them. What
they exchange with nsqd is frames (relay_frames.py) over one unix socket per worker, batched per event-loop turn
on both sides, so that nsqd pays one system call for many clients' requests. To nsqd a relayed client is a
``ConnectionV2`` like any other, over a ``RelayedTransport`` (relayed.py).

A worker that dies is started again (after a pause that doubles up to ``_MAX_BACKOFF`` while it keeps dying); its
clients are disconnected, as when a client's connection breaks, and what nsqd acknowledged is already in its
queues. A worker stops when nsqd does, or when its socket to nsqd closes (nsqd died).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import sys
from typing import TYPE_CHECKING, Callable, Protocol

from nsqclient.addresses import is_unix_socket, join_host_port
from shared.addresses import listening_socket, listening_unix_socket
from shared.listeners import listen_tcp

from . import relay_frames as frames
from .relay_link import RelayLink
from .relayed import RelayedTransport

if TYPE_CHECKING:
    from .options import Options
    from .protocol_v2 import ConnectionV2

log = logging.getLogger("nsqd")

_FIRST_BACKOFF = 0.1
_MAX_BACKOFF = 10.0
# a worker that ran this long before dying is started again after the first pause, not a doubled one
_STABLE_AFTER = 30.0
# how long a stopping nsqd waits for its workers to write what it sent and exit
_STOP_TIMEOUT = 10.0
# (a compiled module cannot be run with ``-m``)
_WORKER_MAIN = "import sys; from services.nsqd.worker import main; main(sys.argv[1:])"


class WorkerLink(RelayLink):
    """nsqd's end of the socket to one worker: frames in, each to its connection; frames out, once per turn."""

    def __init__(self, new_connection: Callable[[], ConnectionV2]) -> None:
        super().__init__()
        self._new_connection = new_connection
        self.transports: dict[int, RelayedTransport] = {}
        self.ready: asyncio.Future[None] = self._loop.create_future()
        self.closed: asyncio.Future[None] = self._loop.create_future()

    def frames_received(self, received: list[tuple[int, int, bytes]]) -> None:
        transports = self.transports
        for kind, connection, payload in received:
            if kind == frames.RECEIVED:
                transports[connection].received(payload)
            elif kind == frames.OPENED:
                transport = transports[connection] = RelayedTransport(connection, payload.decode(), self.send)
                transport.protocol = self._new_connection()
                transport.protocol.connection_made(transport)  # type: ignore[arg-type]
            elif kind == frames.CLOSED:
                self._lost(transports.pop(connection))
            elif kind == frames.DRAINED:
                transports[connection].drained()
            elif kind == frames.TLS_STARTED:
                transports[connection].tls_started(payload)
            elif kind == frames.READY:
                self.ready.set_result(None)

    def _lost(self, transport: RelayedTransport) -> None:
        transport.lost()
        transport.protocol.connection_lost(None)

    def pause_writing(self) -> None:
        # the worker is not keeping up with what nsqd sends: its clients get nothing more until it does
        for transport in self.transports.values():
            transport.set_link_paused(True)

    def resume_writing(self) -> None:
        for transport in self.transports.values():
            transport.set_link_paused(False)

    def connection_lost(self, exc: Exception | None) -> None:
        transports, self.transports = self.transports, {}
        for transport in transports.values():
            self._lost(transport)
        if not self.closed.done():
            self.closed.set_result(None)
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("the worker exited before it was ready"))

    def stop_accepting(self) -> None:
        self.send(frames.STOP_ACCEPTING, 0, b"")

    def close(self) -> None:
        """Once every frame sent so far is written: the worker then writes them out and exits."""
        self.flush()
        self._socket.close()


class Workers:
    """The worker processes of one listening socket, started again when they die."""

    def __init__(self, count: int, listening: socket.socket, opts: Options,
                 new_connection: Callable[[], ConnectionV2]) -> None:
        self._count = count
        self._listening = listening
        self._settings = json.dumps(_worker_settings(opts))
        self._new_connection = new_connection
        self._links: dict[int, WorkerLink] = {}
        self._processes: dict[int, asyncio.subprocess.Process] = {}
        self._keepers: list[asyncio.Task[None]] = []
        self._stopping = False

    async def start(self) -> None:
        started = [asyncio.get_running_loop().create_future() for _ in range(self._count)]
        self._keepers = [asyncio.create_task(self._keep(index, started[index]), name=f"worker-{index}")
                         for index in range(self._count)]
        await asyncio.gather(*started)

    async def _keep(self, index: int, started: asyncio.Future[None]) -> None:
        """Runs worker ``index``, and again each time it dies, until nsqd stops."""
        loop = asyncio.get_running_loop()
        backoff = _FIRST_BACKOFF
        while not self._stopping:
            began = loop.time()
            link = await self._spawn(index)
            try:
                await link.ready
            except ConnectionError as error:
                if not started.done():  # at start nsqd fails rather than waiting for a worker that cannot run
                    started.set_exception(error)
                    return
            if not started.done():
                started.set_result(None)
            await link.closed
            process = self._processes[index]
            if self._stopping:
                return
            if process.returncode is None:
                process.kill()
            code = await process.wait()
            log.error("worker %d (pid %d) exited with %d; its clients were disconnected", index, process.pid, code)
            backoff = _FIRST_BACKOFF if loop.time() - began > _STABLE_AFTER else min(backoff * 2, _MAX_BACKOFF)
            await asyncio.sleep(backoff)

    async def _spawn(self, index: int) -> WorkerLink:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with theirs:
            fds = (self._listening.fileno(), theirs.fileno())
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _WORKER_MAIN, str(fds[0]), str(fds[1]), self._settings,
                pass_fds=fds)
        self._processes[index] = process
        _, link = await asyncio.get_running_loop().create_unix_connection(
            lambda: WorkerLink(self._new_connection), sock=ours)
        self._links[index] = link
        log.info("worker %d: pid %d", index, process.pid)
        return link

    # -- stopping, as an ``asyncio.Server`` is stopped --------------------------------------------------------

    def close(self) -> None:
        """No more clients are accepted."""
        self._stopping = True
        for link in self._links.values():
            link.stop_accepting()

    async def wait_closed(self) -> None:
        """After nsqd closed its connections: every worker writes what it was sent, then exits."""
        self._stopping = True
        for link in self._links.values():
            link.close()
        for keeper in self._keepers:
            keeper.cancel()
        for process in self._processes.values():
            try:
                await asyncio.wait_for(process.wait(), _STOP_TIMEOUT)
            except TimeoutError:
                log.error("worker pid %d did not exit; killed", process.pid)
                process.kill()
                await process.wait()
        self._listening.close()


async def listen(opts: Options, new_connection: Callable[[], ConnectionV2],
                 log: logging.Logger) -> tuple[Listener, tuple[str, int]]:
    """nsqd's TCP listener: its own (``--workers=1``), or the workers'."""
    address = opts.tcp_address
    if opts.workers == 1:
        return await listen_tcp(address, new_connection, log, unix=True)
    unix = is_unix_socket(address)
    sock = listening_unix_socket(address) if unix else listening_socket(address)
    bound: tuple[str, int] = (address, -1) if unix else sock.getsockname()[:2]
    workers = Workers(opts.workers, sock, opts, new_connection)
    try:
        await workers.start()
    except BaseException:
        workers.close()
        await workers.wait_closed()
        raise
    log.info("TCP: listening on %s (%d workers)", address if unix else join_host_port(*bound), opts.workers)
    return workers, bound


class Listener(Protocol):
    def close(self) -> None: ...

    async def wait_closed(self) -> None: ...


def _worker_settings(opts: Options) -> dict[str, object]:
    """What a worker needs of nsqd's flags: the certificate its clients upgrade to."""
    return {"tls_cert": opts.tls_cert, "tls_key": opts.tls_key, "tls_root_ca_file": opts.tls_root_ca_file,
            "tls_client_auth_policy": opts.tls_client_auth_policy, "tls_min_version": opts.tls_min_version}
