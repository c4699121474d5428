"""nsqd's lookup peer (services/nsqd/lookup_peer.py) against a stand-in lookupd that answers every command and
records it."""

from __future__ import annotations

import asyncio
import json
import struct

from services.nsqd.lookup_peer import LookupPeer

IDENTITY = {"broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}


class StandInLookupd:
    def __init__(self) -> None:
        self.commands: list[bytes] = []
        self.server: asyncio.Server | None = None

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readexactly(4)  # the magic
        while line := await reader.readline():
            name = line.split()[0]
            reply = b"OK"
            if name == b"IDENTIFY":
                await reader.readexactly(struct.unpack(">i", await reader.readexactly(4))[0])
                reply = json.dumps({"broadcast_address": "127.0.0.1", "http_port": 1}).encode()
            self.commands.append(name)
            writer.write(struct.pack(">i", len(reply)) + reply)
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
