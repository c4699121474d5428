"""Either end of the unix socket between nsqd and one of its workers (workers.py, worker.py): frames out, written
together once the event-loop turn ends; frames in, cut out of what arrives (relay_frames.py)."""

from __future__ import annotations

import asyncio
import logging

from . import relay_frames as frames
from .relay_frames import FrameError, FrameReader

log = logging.getLogger("nsqd")


class RelayLink(asyncio.Protocol):
    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._reader = FrameReader()
        self._out: list[bytes] = []
        self._socket: asyncio.Transport

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._socket = transport  # type: ignore[assignment]

    def send(self, kind: int, connection: int, payload: bytes) -> None:
        if not self._out:
            self._loop.call_soon(self.flush)
        self._out.append(frames.HEADER.pack(len(payload), kind, connection))
        if payload:
            self._out.append(payload)

    def flush(self) -> None:
        out, self._out = self._out, []
        if out and not self._socket.is_closing():
            self._socket.write(b"".join(out))

    def data_received(self, data: bytes) -> None:
        try:
            received = self._reader.feed(data)
        except FrameError as error:  # not the peer it should be, or a bug: the clients are better disconnected
            log.error("relay link: %s; closing it", error)
            self._socket.abort()
            return
        self.frames_received(received)

    def frames_received(self, received: list[tuple[int, int, bytes]]) -> None:
        raise NotImplementedError
