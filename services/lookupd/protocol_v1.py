"""One ``ConnectionV1`` per nsqd connected to lookupd's TCP port: IDENTIFY, REGISTER, UNREGISTER, PING.

Replies are ``[int32 size][data]``; every error is answered and closes the connection, as NSQ's lookupd does.
When the connection ends, its producer leaves every registration.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Callable, cast

from shared import go_json
from shared.addresses import join_host_port
from shared.names import is_valid_channel_name, is_valid_topic_name
from shared.protocol.commands import Command
from shared.protocol.errors import FatalClientError, ProtocolError
from shared.protocol.lookup_v1 import MAGIC_V1, LookupCommandParser, encode_response

from .registration_db import PeerInfo, Registration

if TYPE_CHECKING:
    from .lookupd import NSQLookupd

log = logging.getLogger("nsqlookupd")

CLIENT = Registration("client", "", "")


class ConnectionV1(asyncio.Protocol):
    def __init__(self, lookupd: NSQLookupd) -> None:
        self.lookupd = lookupd
        self.transport: asyncio.Transport
        self.remote_address = ""
        self.peer: PeerInfo | None = None
        self._parser = LookupCommandParser(MAGIC_V1)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = self.transport.get_extra_info("peername")
        self.remote_address = join_host_port(peer[0], peer[1]) if isinstance(peer, tuple) else str(peer)
        log.info("TCP: new client(%s)", self.remote_address)

    def connection_lost(self, exc: Exception | None) -> None:
        log.info("PROTOCOL(V1): [%s] exiting ioloop", self.remote_address)
        if self.peer is not None:
            db = self.lookupd.db
            for registration in db.lookup_registrations(self.peer.id):
                if db.remove_producer(registration, self.peer.id)[0]:
                    log.info("DB: client(%s) UNREGISTER category:%s key:%s subkey:%s", self.remote_address,
                             *registration)

    def data_received(self, data: bytes) -> None:
        out = []
        for command in self._parser.feed(data):
            try:
                response = _HANDLERS.get(command.name, ConnectionV1._unknown)(self, command)
            except ProtocolError as error:
                log.error("[%s] - %s", self.remote_address, error)
                out.append(encode_response(error.frame_text))
                self.transport.write(b"".join(out))
                self.transport.close()
                return
            out.append(encode_response(response))
        if out:
            self.transport.write(b"".join(out))

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
        self.peer = _peer_info(command.body, self.remote_address)
        log.info("CLIENT(%s): IDENTIFY Address:%s TCP:%d HTTP:%d Version:%s", self.remote_address,
                 self.peer.broadcast_address, self.peer.tcp_port, self.peer.http_port, self.peer.version)
        self.lookupd.db.add_producer(CLIENT, self.peer)
        opts = self.lookupd.opts
        return json.dumps({"tcp_port": self.lookupd.tcp_address[1], "http_port": self.lookupd.http_address[1],
                           "version": self.lookupd.version, "broadcast_address": opts.broadcast_address,
                           "hostname": self.lookupd.hostname}, separators=(",", ":")).encode()

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
    "external_http_port": int}


def _peer_info(body: bytes, remote_address: str) -> PeerInfo:
    """The IDENTIFY body as Go's json.Unmarshal fills NSQ's ``PeerInfo``; the fields lookupd needs must be set."""
    try:
        values = go_json.unmarshal(body, "nsqlookupd.PeerInfo", _PEER_FIELDS)
    except go_json.GoJSONError:
        raise FatalClientError("E_BAD_BODY", "IDENTIFY failed to decode JSON body") from None
    if not values["broadcast_address"] or not values["tcp_port"] or not values["http_port"] or not values["version"]:
        raise FatalClientError("E_BAD_BODY", "IDENTIFY missing fields")
    return PeerInfo(id=remote_address, remote_address=remote_address, last_update=time.time(), **values)


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

