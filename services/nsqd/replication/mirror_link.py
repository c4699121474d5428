"""The link from this nsqd, as an origin, to one of its mirrors: records go out in order, the mirror's cumulative
acknowledgements say how far it holds them, and a mirror that lacks records no longer buffered is sent a snapshot
(origin.py says when a mirror counts as in sync, and what a publish waits for).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import cast

from nsqclient.addresses import split_host_port

from .wire import MAGIC, Ack, FrameReader, Hello, Refuse, WireError, encode

log = logging.getLogger("nsqd")

MAX_UNACKED_BYTES = 256 * 1024 * 1024
RECONNECT = 1.0  # seconds between attempts to reach a mirror


class MirrorLink:
    """The link to one mirror: records go out in order, and the mirror's acknowledgements say how far it holds
    them. Records sent are written by ``flush``, which the origin calls once per turn of the event loop."""

    def __init__(self, origin: str, epoch: int, mirror: str, address: str, next_sequence: int,
                 latest: Callable[[], int], on_change: Callable[[], None] = lambda: None,
                 on_in_sync: Callable[[], None] = lambda: None,
                 snapshot: Callable[[], Callable[[], list[bytes]]] = lambda: list) -> None:
        self.origin = origin
        self.epoch = epoch
        self.mirror = mirror
        self.address = address
        self.acked = next_sequence - 1
        # whether the mirror can have everything outstanding here: not until it was sent a snapshot, since even
        # at an epoch's first record this nsqd may hold messages (from its disk, or from before the epoch)
        self.complete = False
        self.in_sync = False
        self.connected = False
        self._unacked: deque[tuple[int, bytes]] = deque()
        self._unacked_bytes = 0
        self._transport: asyncio.Transport | None = None  # once the mirror answered the hello (and has its snapshot)
        self._sending: asyncio.Future[None] | None = None  # a snapshot being made and sent
        # a snapshot went out (or is being made) and the mirror has not acknowledged anything since: a link that
        # breaks meanwhile sends it again
        self._snapshot_unconfirmed = False
        self._outbox: list[bytes] = []  # records of this turn, not written yet
        self._task: asyncio.Task[None] | None = None
        self._latest = latest  # the number of the origin's newest record
        self._on_change = on_change  # told when what the mirror acknowledged, or whether it is in sync, changed
        self._on_in_sync = on_in_sync
        # the origin's outstanding messages as of now, as a job that makes the snapshot's frames (on any thread)
        self._snapshot = snapshot

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"mirror-link-{self.mirror}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})

    def send(self, sequence: int, frame: bytes) -> None:
        if not self.complete:
            return
        self._unacked.append((sequence, frame))
        self._unacked_bytes += len(frame)
        if self._unacked_bytes > MAX_UNACKED_BYTES:
            log.error("REPLICATION: %s is %d bytes behind: no longer a complete mirror of this epoch",
                      self.mirror, self._unacked_bytes)
            self._lose_records()
            return
        if self._transport is not None:
            self._outbox.append(frame)

    def flush(self) -> None:
        outbox, self._outbox = self._outbox, []
        if self._transport is not None and outbox:
            self._transport.write(outbox[0] if len(outbox) == 1 else b"".join(outbox))

    def fall_out(self) -> None:
        if self.in_sync:
            log.warning("REPLICATION: %s out of sync (acknowledged %d)", self.mirror, self.acked)
        self.in_sync = False

    def _lose_records(self) -> None:
        self.complete = False
        self.in_sync = False
        self._unacked.clear()
        self._unacked_bytes = 0
        if self._transport is not None:
            self._transport.close()
        self._on_change()

    def _acked(self, sequence: int, latest: int) -> None:
        self._snapshot_unconfirmed = False  # a mirror acknowledges nothing until its snapshot is whole
        self.acked = max(self.acked, sequence)
        while self._unacked and self._unacked[0][0] <= sequence:
            self._unacked_bytes -= len(self._unacked.popleft()[1])
        if not self.in_sync and self.complete and self.acked >= latest:
            self.in_sync = True
            log.info("REPLICATION: %s in sync at record %d", self.mirror, self.acked)
            self._on_in_sync()
        self._on_change()

    async def _run(self) -> None:
        while True:
            try:
                await self._serve()
            except (OSError, WireError) as error:
                log.warning("REPLICATION: link to %s (%s): %s", self.mirror, self.address, error)
            finally:
                self._disconnected()
            await asyncio.sleep(RECONNECT)

    def _disconnected(self) -> None:
        self._transport, self._outbox, self.connected = None, [], False
        if self._snapshot_unconfirmed:
            self._snapshot_unconfirmed = False
            if self._sending is not None:
                self._sending.cancel()
            self._lose_records()
        if self.in_sync:
            self.fall_out()
            self._on_change()

    async def _serve(self) -> None:
        host, port = split_host_port(self.address)
        first = self._unacked[0][0] if self._unacked else self.acked + 1
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        transport, _ = await loop.create_connection(lambda: _LinkProtocol(self, first, ended), host, port)
        try:
            await ended
        finally:
            transport.close()

    def _resume(self, applied: int, first: int, transport: asyncio.Transport) -> None:
        """The mirror holds every record up to ``applied``: what it lacks is sent again, or, where it lacks records
        no longer buffered (or was never sent a snapshot), a snapshot."""
        if applied < first - 1:
            log.warning("REPLICATION: %s holds records up to %d only, %d and on are gone here: sending it a "
                        "snapshot", self.mirror, applied, applied + 1)
            self._lose_records()
        self.connected = True
        if not self.complete:
            job = self._snapshot()  # what memory holds is copied now; the disk queues are read by the job
            self.complete = True  # what follows is buffered, and sent after the snapshot
            self._snapshot_unconfirmed = True
            self._sending = asyncio.ensure_future(self._send_snapshot(job, transport))
            return
        self._transport = transport
        transport.write(b"".join(frame for sequence, frame in self._unacked if sequence > applied))
        log.info("REPLICATION: linked to %s (%s) from record %d", self.mirror, self.address, applied + 1)

    async def _send_snapshot(self, job: Callable[[], list[bytes]], transport: asyncio.Transport) -> None:
        """The snapshot, made on a thread so that reading the disk queues holds nothing else up, then every record
        since."""
        try:
            frames = await asyncio.get_running_loop().run_in_executor(None, job)
        except Exception as error:  # a disk that fails a read: the link starts over, and so does the snapshot
            log.error("REPLICATION: a snapshot for %s: %s", self.mirror, error)
            transport.close()
            return
        if transport.is_closing():
            return
        transport.write(b"".join(frames))
        transport.write(b"".join(frame for _, frame in self._unacked))
        self._transport = transport
        log.info("REPLICATION: linked to %s (%s), sent a snapshot (%d frames)", self.mirror, self.address,
                 len(frames))


class _LinkProtocol(asyncio.Protocol):
    """The link's connection: the hello out, the mirror's acknowledgements in; ``ended`` fails with what ended it."""

    def __init__(self, link: MirrorLink, first: int, ended: asyncio.Future[None]) -> None:
        self._link = link
        self._first = first
        self._ended = ended
        self._frames = FrameReader()
        self._answered = False
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        link = self._link
        self._transport.write(MAGIC + encode(Hello(link.origin, link.epoch, self._first)))

    def data_received(self, data: bytes) -> None:
        link = self._link
        try:
            for frame in self._frames.feed(data):
                if isinstance(frame, Refuse):
                    raise WireError(f"refused: {frame.reason}")
                if not isinstance(frame, Ack):
                    raise WireError(f"unexpected {type(frame).__name__}")
                if self._answered:
                    link._acked(frame.sequence, link._latest())
                else:  # the hello's answer: where the mirror got to
                    self._answered = True
                    assert self._transport is not None
                    link._resume(frame.sequence, self._first, self._transport)
        except WireError as error:
            self._end(error)

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc or OSError("closed by the mirror"))

    def _end(self, error: Exception) -> None:
        if not self._ended.done():
            self._ended.set_exception(error)
            self._link._disconnected()  # at once: publishes waiting for this mirror go on without it
        if self._transport is not None:
            self._transport.close()
