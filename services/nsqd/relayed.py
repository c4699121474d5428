"""A client connection held by a worker process, as nsqd's side of protocol V2 sees it.

``RelayedTransport`` has the part of ``asyncio.Transport`` a ``ConnectionV2`` uses; what it writes, and what it
asks (close, pause reading, a TLS handshake), becomes frames to the worker (relay_frames.py), sent once per
event-loop turn with everything else for that worker (``WorkerLink``, workers.py).
"""

from __future__ import annotations

import asyncio
import collections
import json
from typing import TYPE_CHECKING, Any, Callable

from . import relay_frames as frames

if TYPE_CHECKING:
    from .protocol_v2 import ConnectionV2


# a client's deliveries pause once this much is not confirmed written by its worker, and go on below LOW_WATER; the
# worker is asked to confirm every ASK_EVERY bytes (and confirms once its own send buffer is below its low mark)
HIGH_WATER = 256 * 1024
LOW_WATER = 64 * 1024
ASK_EVERY = 64 * 1024


class RelayedTLS:
    """The TLS session a worker negotiated, with the ``ssl.SSLObject`` methods /stats and AUTH read."""

    def __init__(self, session: dict[str, Any]) -> None:
        self._session = session

    def cipher(self) -> tuple[str, str, int] | None:
        cipher = self._session.get("cipher")
        return (cipher[0], cipher[1], cipher[2]) if cipher else None

    def version(self) -> str | None:
        version: str | None = self._session.get("version")
        return version

    def selected_alpn_protocol(self) -> str | None:
        protocol: str | None = self._session.get("alpn")
        return protocol

    def getpeercert(self) -> dict[str, Any] | None:
        certificate: dict[str, Any] | None = self._session.get("peercert")
        return certificate


def tls_session(ssl_object: Any) -> bytes:
    """A worker's TLS session as TLS_STARTED carries it."""
    return json.dumps({"cipher": ssl_object.cipher(), "version": ssl_object.version(),
                       "alpn": ssl_object.selected_alpn_protocol(), "peercert": ssl_object.getpeercert()}).encode()


class RelayedTransport:
    """One relayed client's transport. ``send`` is the worker link's, which batches frames until the turn ends."""

    def __init__(self, connection_id: int, peername: str, send: Callable[[int, int, bytes], None]) -> None:
        self.id = connection_id
        self._send = send
        self._extra: dict[str, Any] = {"peername": _peer(peername)}
        self._closing = False
        # flow control: bytes sent to the worker, and of those the ones it confirmed written (DRAINED answers the
        # ASK_DRAINED sent at each position of ``_asked``)
        self._sent = self._confirmed = self._last_ask = 0
        self._asked: collections.deque[int] = collections.deque()
        self._paused = self._link_paused = False
        # input: what arrives while reading is paused waits here, as a socket's unread bytes would
        self._reading_paused = False
        self._held: collections.deque[bytes] = collections.deque()
        self._consumed = self._consumed_told = 0
        self._tls_started: asyncio.Future[bool] | None = None
        self.protocol: ConnectionV2

    # -- what ConnectionV2 and Client use ----------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        self._send(frames.SEND, self.id, bytes(data))
        sent = self._sent = self._sent + len(data)
        if sent - self._last_ask >= ASK_EVERY:
            self._last_ask = sent
            self._asked.append(sent)
            self._send(frames.ASK_DRAINED, self.id, b"")
        if sent - self._confirmed > HIGH_WATER and not self._paused:
            self._paused = True
            if not self._link_paused:
                self.protocol.pause_writing()

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._send(frames.CLOSE, self.id, b"")

    def abort(self) -> None:
        self._closing = True
        self._send(frames.ABORT, self.id, b"")

    def pause_reading(self) -> None:
        if not self._closing and not self._reading_paused:
            self._reading_paused = True
            self._send(frames.PAUSE_READING, self.id, b"")

    def resume_reading(self) -> None:
        if not self._closing and self._reading_paused:
            self._reading_paused = False
            self._send(frames.RESUME_READING, self.id, b"")
            if self._held:  # later, as a socket's transport would: never inside the caller
                asyncio.get_running_loop().call_soon(self._release_held)

    def get_write_buffer_size(self) -> int:
        """What the worker has not confirmed written yet."""
        return self._sent - self._confirmed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    async def start_tls(self, handshake_timeout: float) -> bool:
        """The worker hand-shakes once what was written before is sent; False if the handshake failed."""
        self._tls_started = asyncio.get_running_loop().create_future()
        self._send(frames.START_TLS, self.id, frames.timeout_payload(handshake_timeout))
        return await self._tls_started

    # -- what the worker says ----------------------------------------------------------------------------

    def received(self, data: bytes) -> None:
        if self._reading_paused or self._held:
            self._held.append(data)
        else:
            self._take_in(data)

    def _take_in(self, data: bytes) -> None:
        consumed = self._consumed = self._consumed + len(data)
        if consumed - self._consumed_told >= frames.CONSUMED_EVERY:
            self._consumed_told = consumed
            self._send(frames.CONSUMED, self.id, frames.count_payload(consumed))
        self.protocol.data_received(data)

    def _release_held(self) -> None:
        held = self._held
        while held and not self._reading_paused and not self._closing:
            self._take_in(held.popleft())

    def drained(self) -> None:
        self._confirmed = self._asked.popleft()
        if self._paused and self._sent - self._confirmed <= LOW_WATER:
            self._paused = False
            if not self._link_paused:
                self.protocol.resume_writing()

    def set_link_paused(self, paused: bool) -> None:
        """The link to the worker is full (or no longer): as if this client's were."""
        if paused != self._link_paused:
            self._link_paused = paused
            if not self._paused:
                if paused:
                    self.protocol.pause_writing()
                else:
                    self.protocol.resume_writing()

    def tls_started(self, payload: bytes) -> None:
        if payload:
            self._extra["ssl_object"] = RelayedTLS(json.loads(payload))
        if self._tls_started is not None and not self._tls_started.done():
            self._tls_started.set_result(bool(payload))

    def lost(self) -> None:
        self._closing = True
        if self._tls_started is not None and not self._tls_started.done():
            self._tls_started.set_result(False)


def _peer(address: str) -> tuple[str, int] | str:
    """``host:port`` as a socket's peername; a unix socket's peer stays a string."""
    host, _, port = address.rpartition(":")
    if host and port.isdigit():
        return host.strip("[]"), int(port)
    return address
