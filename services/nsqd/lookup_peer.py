"""nsqd's side of discovery: one ``LookupPeer`` per ``--lookupd-tcp-address``.

Each peer keeps a connection to its lookupd (magic ``"  V1"``, IDENTIFY with nsqd's broadcast address and ports),
registers every topic and channel nsqd has, follows creations and deletions with REGISTER/UNREGISTER, and PINGs
every 15 s whatever else it sends (lookupd counts a producer active only while it PINGs, and topics or channels
changing more often than that must not hold the PING back). When the connection fails it reconnects with a growing
delay and registers everything again, so a restarted lookupd learns the whole node back on its own. The delay stops
growing where the longest wait and one connection attempt still fit in a ping interval: a lookupd that comes back,
or a network that heals, has the node registered again within one ping interval, as with NSQ (which reconnects at
its next PING).

What to register is a set, ``{(topic, "")} | {(topic, channel)}``, recomputed from nsqd's topics whenever they
change; a peer sends the difference between that and what it registered on its current connection.

With ``--lookupd-tls-root-ca-file`` a peer asks for TLS in IDENTIFY and goes on only over TLS, the lookupd's
certificate verified (``shared.protocol.lookup_v1`` says why the upgrade follows IDENTIFY): a lookupd that does not
agree, NSQ's among them, or a failed handshake counts as a failed connection, logged and tried again later.

A peer also reads its lookupd's HTTP API (at the address the lookupd gave in IDENTIFY), on one session kept until
the peer stops: ``channels_in_cluster`` asks every peer for a new topic's channels, which nsqd creates before the
topic starts.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import struct
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable

from nsqclient.addresses import join_host_port, split_host_port
from nsqclient.errors import describe
from shared.protocol.lookup_v1 import MAGIC_V1, TLS_V1, lookupd_agreed

if TYPE_CHECKING:
    from shared.cluster_info import ClusterInfo

    from .topic import Topic

log = logging.getLogger("nsqd")

PING_INTERVAL = 15.0
CONNECT_TIMEOUT = 3.0
MAX_RECONNECT_DELAY = PING_INTERVAL - CONNECT_TIMEOUT

_SIZE = struct.Struct(">i")

Registration = tuple[str, str]


def reconnect_delay(failures: int) -> float:
    """Seconds to wait after ``failures`` (1 or more) connections or attempts in a row failed: 1, 2, 4, 8, then
    ``MAX_RECONNECT_DELAY``."""
    return min(2.0 ** (failures - 1), MAX_RECONNECT_DELAY)


def registrations(topics: dict[str, Topic]) -> set[Registration]:
    wanted: set[Registration] = set()
    for topic in topics.values():
        wanted.add((topic.name, ""))
        wanted.update((topic.name, channel) for channel in topic.channels)
    return wanted


class LookupdError(Exception):
    """lookupd answered with an error or closed the connection."""


class LookupPeer:
    def __init__(self, address: str, identity: Callable[[], dict[str, Any]],
                 wanted: Callable[[], set[Registration]], ping_interval: float = PING_INTERVAL,
                 tls: ssl.SSLContext | None = None, tls_server_name: str = "",
                 identified: Callable[[], None] = lambda: None) -> None:
        """``tls``: register over TLS only, the lookupd's certificate verified for ``tls_server_name`` (the host
        of ``address`` when empty); ``identified`` is called each time the lookupd has taken nsqd's IDENTIFY."""
        self.address = address
        self._identified = identified
        self.ping_interval = ping_interval
        self._tls = tls
        self._tls_server_name = tls_server_name
        self._identity = identity
        self._wanted = wanted
        self._changed = asyncio.Event()
        self._registered: set[Registration] = set()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._stopping = False
        self.task: asyncio.Task[None] | None = None
        # what the lookupd said of itself in IDENTIFY (broadcast_address, http_port, ...)
        self.info: dict[str, Any] = {}
        self._http: ClusterInfo | None = None  # the lookupd's HTTP API, opened when first asked

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name=f"lookupd {self.address}")

    async def stop(self) -> None:
        self._stopping = True
        # Python 3.11's wait_for can swallow a cancellation that meets the reply it waited for: cancel until done
        while self.task is not None and not self.task.done():
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=1.0)
        self._close()
        if self._http is not None:
            await self._http.close()

    @property
    def http_address(self) -> str:
        """The lookupd's HTTP address as it gave it in IDENTIFY; empty until then."""
        if not self.info.get("broadcast_address"):
            return ""
        return join_host_port(self.info["broadcast_address"], self.info["http_port"])

    async def channels(self, topic: str, open_client: Callable[[], ClusterInfo]) -> list[str]:
        """The channels this lookupd knows for ``topic`` (asked with the client ``open_client`` opens at the first
        call); none, logged, when it does not answer."""
        address = self.http_address
        if not address or self._stopping:
            return []
        from shared.cluster_info import ClusterInfoError  # aiohttp: not on the registration path

        if self._http is None:
            self._http = open_client()
        try:
            return await self._http.channels(address, topic)
        except ClusterInfoError as error:
            log.error("LOOKUPD(%s): failed to get channels of topic %s - %s", address, topic, error)
            return []

    def changed(self) -> None:
        """nsqd's topics or channels changed: send the difference soon."""
        self._changed.set()

    async def _run(self) -> None:
        failures = 0
        while not self._stopping:
            try:
                await self._connect()
                failures = 0
                self._identified()
                await self._serve()
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, LookupdError, ValueError) as error:
                failures += 1
                log.error("LOOKUPD(%s): %s - reconnecting in %.0fs", self.address, describe(error),
                          reconnect_delay(failures))
            self._close()
            await asyncio.sleep(reconnect_delay(failures))

    async def _connect(self) -> None:
        host, port = split_host_port(self.address)
        # asyncio.timeout rather than wait_for: on Python 3.11 a stop that cancels wait_for as the connection
        # completes loses the connection unclosed
        async with asyncio.timeout(CONNECT_TIMEOUT):
            self._reader, writer = await asyncio.open_connection(host, port)
        self._writer = writer
        writer.write(MAGIC_V1)
        identity = {**self._identity(), TLS_V1: True} if self._tls is not None else self._identity()
        body = json.dumps(identity).encode()
        reply = await self._command(b"IDENTIFY\n" + _SIZE.pack(len(body)) + body)
        info = json.loads(reply)
        if self._tls is not None:
            await self._start_tls(writer, self._tls, info, self._tls_server_name or host)
        self.info = info
        log.info("LOOKUPD(%s): peer info %s", self.address, self.info)
        self._registered = set()

    async def _start_tls(self, writer: asyncio.StreamWriter, context: ssl.SSLContext, info: dict[str, Any],
                         server_name: str) -> None:
        if not lookupd_agreed(info):
            raise LookupdError("lookupd did not agree to TLS (its IDENTIFY answer has no tls_v1: NSQ's "
                               "nsqlookupd, or one without --tls-cert); with --lookupd-tls-root-ca-file nsqd "
                               "registers over TLS only")
        try:
            await asyncio.wait_for(writer.start_tls(context, server_hostname=server_name), CONNECT_TIMEOUT)
        except ssl.SSLError as error:
            raise LookupdError(f"TLS handshake failed - {error}") from error
        await self._confirm_tls(writer)

    async def _confirm_tls(self, writer: asyncio.StreamWriter) -> None:
        # lookupd's OK after the handshake: with TLS 1.3 a refused certificate shows only here, and counts as a
        # failed connection (tried again with a growing delay), not as a lookupd gone once registered
        try:
            confirmation = await self._response()
        except (OSError, asyncio.IncompleteReadError) as error:
            detail = "" if isinstance(error, asyncio.IncompleteReadError) else f" ({describe(error)})"
            raise LookupdError(f"lookupd closed the connection after the TLS handshake{detail}: does it want a "
                               f"client certificate it trusts (--lookupd-tls-cert)?") from error
        if confirmation != b"OK":
            raise LookupdError(f"lookupd answered the TLS handshake with {confirmation!r} instead of OK")
        ssl_object = writer.get_extra_info("ssl_object")
        log.info("LOOKUPD(%s): TLS %s %s", self.address, ssl_object.version(), (ssl_object.cipher() or ("",))[0])

    async def _serve(self) -> None:
        assert self._reader is not None
        loop = asyncio.get_running_loop()
        next_ping = loop.time() + self.ping_interval
        while True:
            await self._sync()
            # lookupd sends nothing unasked, so a read that completes means it went away: reconnect at once
            # instead of at the next PING
            gone = asyncio.ensure_future(self._reader.read(1))
            changed = asyncio.ensure_future(self._changed.wait())
            done, pending = await asyncio.wait({gone, changed}, timeout=max(0.0, next_ping - loop.time()),
                                               return_when=asyncio.FIRST_COMPLETED)
            for future in pending:
                future.cancel()
            await asyncio.wait({gone, changed})
            if gone in done:
                error = gone.exception()
                raise LookupdError(f"connection closed by lookupd{f' ({error})' if error else ''}")
            if loop.time() >= next_ping:
                await self._command(b"PING\n")
                next_ping = loop.time() + self.ping_interval

    async def _sync(self) -> None:
        self._changed.clear()
        wanted = self._wanted()
        for topic, channel in sorted(wanted - self._registered):
            await self._command(b"REGISTER " + _line(topic, channel))
            self._registered.add((topic, channel))
            log.info("LOOKUPD(%s): REGISTER %s %s", self.address, topic, channel)
        for topic, channel in sorted(self._registered - wanted, key=lambda r: (r[0], r[1] == "")):
            await self._command(b"UNREGISTER " + _line(topic, channel))
            self._registered.discard((topic, channel))
            log.info("LOOKUPD(%s): UNREGISTER %s %s", self.address, topic, channel)

    async def _command(self, data: bytes) -> bytes:
        assert self._reader is not None and self._writer is not None
        self._writer.write(data)
        await self._writer.drain()
        return await self._response()

    async def _response(self) -> bytes:
        assert self._reader is not None
        header = await asyncio.wait_for(self._reader.readexactly(4), CONNECT_TIMEOUT)
        (size,) = _SIZE.unpack(header)
        reply = await asyncio.wait_for(self._reader.readexactly(size), CONNECT_TIMEOUT)
        if reply.startswith(b"E_"):
            raise LookupdError(reply.decode("utf-8", "replace"))
        return reply

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


def _line(topic: str, channel: str) -> bytes:
    return (f"{topic} {channel}" if channel else topic).encode() + b"\n"


async def channels_in_cluster(peers: Iterable[LookupPeer], topic: str,
                              open_client: Callable[[], ClusterInfo]) -> set[str]:
    """The channels the peers' lookupds know for ``topic``, asked at once over their HTTP APIs; a lookupd that does
    not answer is logged and left out."""
    found = await asyncio.gather(*(peer.channels(topic, open_client) for peer in peers))
    return {channel for channels in found for channel in channels}
