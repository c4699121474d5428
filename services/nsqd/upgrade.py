"""The upgrades an IDENTIFY negotiates on a V2 connection, made after its reply in NSQ's order, each confirmed by an
``OK``: TLS (``loop.start_tls`` on the same transport), then snappy or deflate (a codec the connection inflates
what it receives through, and ``Client.flush`` compresses what it writes through).

The session holds the bytes received after the IDENTIFY until this says how they are framed. Before a TLS handshake
they are no TLS record and are dropped (NSQ drops them too: a client waits for the answer); the handshake makes the
connection wait, so what the TLS layer hands over before the upgrade is done is held until then. After a switch to
compression they are compressed already, and go to be inflated.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nsqclient.protocol.compression import Codec, DeflateCodec, SnappyCodec
from nsqclient.protocol.frames import OK

if TYPE_CHECKING:
    from .commands_v2 import Connection
    from .identify import Identity

log = logging.getLogger("nsqd")

# seconds a client has to complete the TLS handshake it asked for
HANDSHAKE_TIMEOUT = 5.0


def start(connection: Connection, identity: Identity) -> None:
    """Upgrades as ``identity`` negotiated, once the IDENTIFY's reply is written."""
    if identity.tls_v1:
        # the client's handshake must reach the TLS layer, not the command parser
        if early := connection.drop_held():
            log.warning("[%s] - %d bytes sent before the TLS handshake ignored", connection.client, early)
        connection.wait_for(_start_tls(connection, identity))
    else:
        _start_compression(connection, identity)


async def _start_tls(connection: Connection, identity: Identity) -> None:
    """The TLS handshake, OK over TLS, then compression on top if it was negotiated too."""
    if not await connection.switch_to_tls(HANDSHAKE_TIMEOUT):
        return
    client = connection.client
    client.queue_response(OK)
    client.flush()
    _start_compression(connection, identity)


def _start_compression(connection: Connection, identity: Identity) -> None:
    """Compression from here on, both ways."""
    if identity.snappy or identity.deflate:
        client = connection.client
        codec: Codec = SnappyCodec() if identity.snappy else DeflateCodec(identity.deflate_level)
        client.compress_with(codec)
        client.queue_response(OK)
        client.flush()
        connection.inflate_with(codec)
