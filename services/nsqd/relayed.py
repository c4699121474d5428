"""A client connection held by a worker process, as nsqd's side of protocol V2 sees it.

``RelayedTransport`` has the part of ``asyncio.Transport`` a ``ConnectionV2`` uses; what it writes, and what it
asks (close, pause reading, a TLS handshake), becomes frames to the worker (relay_frames.py), sent once per
event-loop turn with everything else for that worker (``WorkerLink``, workers.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Callable

from . import relay_frames as frames

if TYPE_CHECKING:
    from .protocol_v2 import ConnectionV2


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
        # what the worker said waits in the client's send buffer while it is full (0 once it drains)
        self.write_buffer_size = 0
        self._tls_started: asyncio.Future[bool] | None = None
        self.protocol: ConnectionV2

    # -- what ConnectionV2 and Client use ----------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not self._closing:
            self._send(frames.SEND, self.id, bytes(data))

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
        if not self._closing:
            self._send(frames.PAUSE_READING, self.id, b"")

    def resume_reading(self) -> None:
        if not self._closing:
            self._send(frames.RESUME_READING, self.id, b"")

    def get_write_buffer_size(self) -> int:
        return self.write_buffer_size

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    async def start_tls(self, handshake_timeout: float) -> bool:
        """The worker hand-shakes once what was written before is sent; False if the handshake failed."""
        self._tls_started = asyncio.get_running_loop().create_future()
        self._send(frames.START_TLS, self.id, frames.timeout_payload(handshake_timeout))
        return await self._tls_started

    # -- what the worker says ----------------------------------------------------------------------------

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
