"""One ``ConnectionV1`` per nsqd connected to lookupd's TCP port: IDENTIFY, REGISTER, UNREGISTER, PING.

Replies are ``[int32 size][data]``; every error is answered and closes the connection, as NSQ's lookupd does.
When the connection ends, its producer leaves every registration.

An IDENTIFY that asks for TLS (``shared.protocol.lookup_v1``) is answered in plain, then the connection reads
nothing until the TLS handshake: bytes already sent behind the IDENTIFY are refused. The nsqd joins the registrations
once the handshake succeeded (its certificate verified, with ``--tls-root-ca-file``), so a node that fails it never
shows on ``/nodes``, and is then told ``OK``, which it waits for before any command.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from typing import TYPE_CHECKING, Callable, cast

from nsqclient.addresses import join_host_port
from nsqclient.errors import describe
from nsqclient.protocol.names import is_valid_channel_name, is_valid_topic_name
from shared import go_json
from shared.protocol.commands import Command
from shared.protocol.errors import FatalClientError, ProtocolError
from shared.protocol.lookup_v1 import MAGIC_V1, TLS_V1, LookupCommandParser, encode_response, lookupd_upgrades

from .registration_db import PeerInfo, Registration

if TYPE_CHECKING:
    from .lookupd import NSQLookupd

log = logging.getLogger("nsqlookupd")

CLIENT = Registration("client", "", "")
TLS_HANDSHAKE_TIMEOUT = 5.0


class ConnectionV1(asyncio.Protocol):
    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self.transport: asyncio.Transport
        self.remote_address = ""
        self.peer: PeerInfo | None = None
        self._parser = LookupCommandParser(MAGIC_V1)
        self._tls_asked = False  # IDENTIFY agreed to TLS: the handshake comes next
        self._upgrade: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = self.transport.get_extra_info("peername")
        self.remote_address = join_host_port(peer[0], peer[1]) if isinstance(peer, tuple) else str(peer)
        log.info("TCP: new client(%s)", self.remote_address)

    def connection_lost(self, exc: Exception | None) -> None:
        log.info("PROTOCOL(V1): [%s] exiting ioloop", self.remote_address)
        if self._upgrade is not None:
            self._upgrade.cancel()
        if self.peer is not None:
            db = self.lookupd.db
            for registration in db.lookup_registrations(self.peer.id):
                if db.remove_producer(registration, self.peer.id)[0]:
                    log.info("DB: client(%s) UNREGISTER category:%s key:%s subkey:%s", self.remote_address,
                             *registration)

    def data_received(self, data: bytes) -> None:
        if self._upgrade is not None and not self._upgrade.done():
            # only the TLS layer reads now, so this came over TLS before lookupd's OK: the nsqd did not wait
            log.error("CLIENT(%s): sent commands before the OK that ends the TLS upgrade", self.remote_address)
            self._upgrade.cancel()
            self.transport.abort()
            return
        out: list[bytes] = []
        try:
            self._run(data, out)
        except ProtocolError as error:
            log.error("[%s] - %s", self.remote_address, error)
            out.append(encode_response(error.frame_text))
            self.transport.write(b"".join(out))
            self.transport.close()
            return
        if out:
            self.transport.write(b"".join(out))
        if self._tls_asked:
            # the handshake's bytes must reach the TLS layer, not the command parser
            self.transport.pause_reading()
            self._upgrade = asyncio.create_task(self._start_tls(), name=f"TLS {self.remote_address}")

    def _run(self, data: bytes, out: list[bytes]) -> None:
        """Answers the commands in ``data`` into ``out``; nothing may follow an IDENTIFY that asked for TLS."""
        for command in self._parser.feed(data):
            self._before_tls()
            out.append(encode_response(_HANDLERS.get(command.name, ConnectionV1._unknown)(self, command)))
        if self._parser.buffered:
            self._before_tls()

    def _before_tls(self) -> None:
        if self._tls_asked:
            raise FatalClientError("E_INVALID", "cannot send commands between IDENTIFY and the TLS handshake")

    async def _start_tls(self) -> None:
        assert self.lookupd.tls_context is not None and self.peer is not None
        try:
            transport = await asyncio.get_running_loop().start_tls(
                self.transport, self, self.lookupd.tls_context, server_side=True,
                ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT)
        except (OSError, ssl.SSLError, TimeoutError) as error:
            # an nsqd that does not trust lookupd's certificate just closes
            hint = " (does the nsqd trust this certificate?)" if isinstance(error, ConnectionResetError) else ""
            log.error("CLIENT(%s): TLS handshake failed - %s%s", self.remote_address, describe(error), hint)
            self.transport.abort()
            return
        if transport is None:
            return  # the connection closed during the handshake
        self.transport = transport
        self._tls_asked = False
        log.info("CLIENT(%s): TLS %s", self.remote_address, _describe_tls(transport.get_extra_info("ssl_object")))
        self.peer.tls = True
        self.lookupd.db.add_producer(CLIENT, self.peer)
        transport.write(encode_response(b"OK"))

    def _unknown(self, command: Command) -> bytes:
        if command.error is not None:
            raise command.error
        raise FatalClientError("E_INVALID", f"invalid command {command.name.decode('utf-8', 'replace')}")

    def _ping(self, command: Command) -> bytes:
        if self.peer is not None:
            self.peer.last_update = time.time()
        return b"OK"

    def _identify(self, command: Command) -> bytes:
        if self.peer is not None:
            raise FatalClientError("E_INVALID", "cannot IDENTIFY again")
        if command.error is not None:
            raise command.error
        peer, tls_requested = _peer_info(command.body, self.remote_address)
        log.info("CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s%s", self.remote_address,
                 peer.broadcast_address, peer.tcp_port, peer.http_port, peer.version,
                 " TLS:requested" if tls_requested else "")
        offered = self.lookupd.tls_context is not None
        self._tls_asked = lookupd_upgrades(tls_requested, offered, self.lookupd.opts.tls_required)
        if tls_requested and not offered:
            log.warning("CLIENT(%s): asked for TLS, which this nsqlookupd does not offer (no --tls-cert)",
                        self.remote_address)
        self.peer = peer
        if not self._tls_asked:
            self.lookupd.db.add_producer(CLIENT, peer)
        return self._identify_answer()

    def _identify_answer(self) -> bytes:
        opts = self.lookupd.opts
        answer: dict[str, object] = {
            "tcp_port": self.lookupd.tcp_address[1], "http_port": self.lookupd.http_address[1],
            "version": self.lookupd.version, "broadcast_address": opts.broadcast_address,
            "hostname": self.lookupd.hostname}
        if self._tls_asked:
            answer[TLS_V1] = True
        return json.dumps(answer, separators=(",", ":")).encode()

    def _register(self, command: Command) -> bytes:
        peer = self._identified()
        topic, channel = _topic_and_channel("REGISTER", command.args)
        db = self.lookupd.db
        if channel:
            db.add_producer(Registration("channel", topic, channel), peer)
        db.add_producer(Registration("topic", topic, ""), peer)
        return b"OK"

    def _unregister(self, command: Command) -> bytes:
        peer = self._identified()
        topic, channel = _topic_and_channel("UNREGISTER", command.args)
        db = self.lookupd.db
        if channel:
            db.remove_producer(Registration("channel", topic, channel), peer.id)
            return b"OK"
        # a topic unregistration takes the producer out of the topic's channels too
        for registration in db.find_registrations("channel", topic, "*"):
            if db.remove_producer(registration, peer.id)[0]:
                log.warning("client(%s) unexpected UNREGISTER category:%s key:%s subkey:%s", self.remote_address,
                            *registration)
        db.remove_producer(Registration("topic", topic, ""), peer.id)
        return b"OK"

    def _identified(self) -> PeerInfo:
        if self.peer is None:
            raise FatalClientError("E_INVALID", "client must IDENTIFY")
        return self.peer


_PEER_FIELDS: dict[str, type] = {
    "broadcast_address": str, "tcp_port": int, "http_port": int, "version": str, "hostname": str,
    "topology_zone": str, "topology_region": str, "external_broadcast_address": str, "external_tcp_port": int,
    "external_http_port": int, TLS_V1: bool}


def _peer_info(body: bytes, remote_address: str) -> tuple[PeerInfo, bool]:
    """The IDENTIFY body as Go's json.Unmarshal fills NSQ's ``PeerInfo`` (the fields lookupd needs must be set),
    and whether it asks for TLS."""
    try:
        values = go_json.unmarshal(body, "nsqlookupd.PeerInfo", _PEER_FIELDS)
    except go_json.GoJSONError:
        raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
    if not values["broadcast_address"] or not values["tcp_port"] or not values["http_port"] or not values["version"]:
        raise FatalClientError("E_BAD_BODY", "IDENTIFY missing fields")
    tls_requested = values.pop(TLS_V1)
    return PeerInfo(id=remote_address, remote_address=remote_address, last_update=time.time(), **values), \
        tls_requested


def _describe_tls(ssl_object: ssl.SSLObject | None) -> str:
    """The version and cipher a connection negotiated, and whether the nsqd's certificate was verified."""
    if ssl_object is None:
        return ""
    cipher = ssl_object.cipher()
    verified = ", client certificate verified" if ssl_object.getpeercert() else ""
    return f"{ssl_object.version()} {cipher[0] if cipher else ''}{verified}"


def _topic_and_channel(command: str, args: list[bytes]) -> tuple[str, str]:
    if not args:
        raise FatalClientError("E_INVALID", f"{command} insufficient number of params")
    topic = args[0].decode("utf-8", "replace")
    channel = args[1].decode("utf-8", "replace") if len(args) > 1 else ""
    if not is_valid_topic_name(topic):
        raise FatalClientError("E_BAD_TOPIC", f"{command} topic name '{topic}' is not valid")
    if channel and not is_valid_channel_name(channel):
        raise FatalClientError("E_BAD_CHANNEL", f"{command} channel name '{channel}' is not valid")
    return topic, channel


_HANDLERS: dict[bytes, Callable[[ConnectionV1, Command], bytes]] = {
    b"PING": ConnectionV1._ping,
    b"IDENTIFY": ConnectionV1._identify,
    b"REGISTER": ConnectionV1._register,
    b"UNREGISTER": ConnectionV1._unregister,
}

