"""nsqd's lookup peer (services/nsqd/lookup_peer.py): its PINGs against a stand-in lookupd that answers every
command and records it, and its reconnect delays; a peer that asks for TLS goes on only when lookupd agrees."""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
from typing import Any

from services.nsqd.lookup_peer import CONNECT_TIMEOUT, MAX_RECONNECT_DELAY, PING_INTERVAL, LookupPeer, reconnect_delay

IDENTITY = {"broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}


class StandInLookupd:
    def __init__(self) -> None:
        self.commands: list[bytes] = []
        self.identities: list[dict[str, Any]] = []
        self.disconnected = asyncio.Event()  # a connection ended from the peer's side
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in self.writers:
            writer.close()
            await writer.wait_closed()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        await reader.readexactly(4)  # the magic
        while line := await reader.readline():
            name = line.split()[0]
            reply = b"OK"
            if name == b"IDENTIFY":
                body = await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
                self.identities.append(json.loads(body))
                reply = json.dumps({"broadcast_address": "127.0.0.1", "http_port": 1}).encode()
            self.commands.append(name)
            writer.write(struct.pack(">i", len(reply)) + reply)
        self.disconnected.set()
        writer.close()


async def test_pings_keep_their_interval_while_topics_change_more_often() -> None:
    lookupd = StandInLookupd()
    address = await lookupd.start()
    topics: set[tuple[str, str]] = set()
    peer = LookupPeer(address, lambda: IDENTITY, lambda: set(topics), ping_interval=0.3)
    peer.start()
    try:
        for n in range(30):  # a new topic every 50 ms for 1.5 s: a change well within every interval
            topics.add((f"t{n}", ""))
            peer.changed()
            await asyncio.sleep(0.05)
    finally:
        await peer.stop()
        await lookupd.stop()
    assert lookupd.commands.count(b"REGISTER") == 30
    assert lookupd.commands.count(b"PING") >= 3, lookupd.commands


async def test_a_peer_asking_for_tls_registers_nothing_with_a_lookupd_that_does_not_agree() -> None:
    lookupd = StandInLookupd()  # answers IDENTIFY as NSQ's lookupd does: without tls_v1
    address = await lookupd.start()
    peer = LookupPeer(address, lambda: IDENTITY, lambda: {("orders", "")}, tls=ssl.create_default_context())
    peer.start()
    try:
        await asyncio.wait_for(lookupd.disconnected.wait(), 2)  # it closes after the answer, to try again later
    finally:
        await peer.stop()
        await lookupd.stop()
    assert lookupd.identities == [{**IDENTITY, "tls_v1": True}]
    assert lookupd.commands == [b"IDENTIFY"]
    assert peer.info == {}


def test_reconnect_delays_double_up_to_their_cap() -> None:
    assert [reconnect_delay(failures) for failures in range(1, 8)] == [1, 2, 4, 8, 12, 12, 12]


def test_a_lookupd_back_is_reached_within_one_ping_interval() -> None:
    # the worst moment to come back is just after an attempt began: it times out, then the longest wait
    # (NSQ reconnects at its next PING: within one interval too)
    assert max(reconnect_delay(failures) for failures in range(1, 100)) == MAX_RECONNECT_DELAY
    assert MAX_RECONNECT_DELAY + CONNECT_TIMEOUT <= PING_INTERVAL
