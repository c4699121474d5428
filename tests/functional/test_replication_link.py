"""An origin's records reach its mirror over a real loopback link: a publish is acknowledged once the mirror holds
it, a mirror that stops answering falls out of sync (and the publish is refused when too few copies are left), a
link that breaks resumes where the mirror got to, and a mirror that lost what it held is sent a snapshot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.nsqd.replication.mirror_server import MirrorLinkServer
from services.nsqd.replication.mirror_store import MirrorStore
from services.nsqd.replication.origin import Origin
from services.nsqd.topic import ReplicationError
from services.nsqd.replication.wire import Messages, Publish

TIMEOUT = 0.5


class Mirror:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.stores: dict[str, MirrorStore] = {}
        self.server: asyncio.AbstractServer | None = None
        self.port = 0
        self.links: list[MirrorLinkServer] = []

    async def start(self) -> None:
        def link() -> MirrorLinkServer:
            self.links.append(MirrorLinkServer(self.stores, set(), self.directory))
            return self.links[-1]

        self.server = await asyncio.get_running_loop().create_server(link, "127.0.0.1", self.port)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for link in self.links:
            if link.transport is not None:
                link.transport.abort()
        await self.server.wait_closed()
        self.links.clear()

    def ids(self, origin: str = "a:4150") -> set[bytes]:
        return {message[0] for _, _, message, _ in self.stores[origin].outstanding()}


@pytest.fixture
async def mirror(tmp_path: Path) -> AsyncIterator[Mirror]:
    started = Mirror(tmp_path)
    await started.start()
    yield started
    await started.stop()


def entries(*numbers: int) -> list[tuple[bytes, bytes, int, int]]:
    return [(f"{number:016x}".encode(), b"body", 1, 0) for number in numbers]


async def until(condition: object, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():  # type: ignore[operator]
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_acknowledged_once_the_mirror_holds_it_and_finishes_follow(mirror: Mirror) -> None:
    origin = Origin("a:4150", 1, min_in_sync=2, timeout=TIMEOUT)
    origin.set_mirrors({"b:4150": f"127.0.0.1:{mirror.port}"})
    link = origin.links["b:4150"]
    await until(lambda: link.in_sync)
    await origin.published("t", ("c",), 0, entries(1, 2))
    assert mirror.ids() == {b"0000000000000001", b"0000000000000002"}  # held before the OK
    origin.finished("t", "c", [b"0000000000000001"])
    await until(lambda: mirror.ids() == {b"0000000000000002"})
    await asyncio.gather(*origin.set_mirrors({}))


async def test_a_mirror_that_stops_answering_falls_out_and_too_few_copies_refuse(mirror: Mirror) -> None:
    origin = Origin("a:4150", 1, min_in_sync=2, timeout=TIMEOUT)
    origin.set_mirrors({"b:4150": f"127.0.0.1:{mirror.port}"})
    link = origin.links["b:4150"]
    await until(lambda: link.in_sync)
    for server_link in mirror.links:
        assert server_link.transport is not None
        server_link.transport.pause_reading()  # alive, but not answering
    with pytest.raises(ReplicationError, match="1 of 2 replicas acknowledged within 0.5s"):
        await origin.published("t", ("c",), 0, entries(1))
    assert not link.in_sync
    with pytest.raises(ReplicationError, match="1 of 2 in-sync replicas"):
        await origin.published("t", ("c",), 0, entries(2))  # refused at once now
    assert origin.refused == 2
    for server_link in mirror.links:
        assert server_link.transport is not None
        server_link.transport.resume_reading()
    await until(lambda: link.in_sync)  # it caught up with everything sent meanwhile
    assert mirror.ids() == {b"0000000000000001", b"0000000000000002"}
    await origin.published("t", ("c",), 0, entries(3))
    await asyncio.gather(*origin.set_mirrors({}))


async def test_a_broken_link_resumes_where_the_mirror_got_to(mirror: Mirror) -> None:
    origin = Origin("a:4150", 1, min_in_sync=1, timeout=TIMEOUT)
    origin.set_mirrors({"b:4150": f"127.0.0.1:{mirror.port}"})
    link = origin.links["b:4150"]
    await until(lambda: link.in_sync)
    await origin.published("t", ("c",), 0, entries(1))
    await mirror.stop()
    await until(lambda: not link.connected)
    await origin.published("t", ("c",), 0, entries(2))  # one copy is enough here: buffered for the mirror
    origin.finished("t", "c", [b"0000000000000001"])
    await mirror.start()  # same port, same stores: the mirror process lived on
    await until(lambda: link.in_sync)
    assert mirror.ids() == {b"0000000000000002"}
    await asyncio.gather(*origin.set_mirrors({}))


async def test_a_mirror_that_lost_what_it_held_is_sent_a_snapshot_and_counts_again(mirror: Mirror) -> None:
    origin = Origin("a:4150", 1, min_in_sync=2, timeout=TIMEOUT)
    # what the origin has outstanding, as its nsqd would list it
    origin.outstanding = lambda: lambda: [Publish(0, "t", ("c",), 0,
                                                  Messages.of([(b"0000000000000001", b"body", 1, 0)]))]
    origin.set_mirrors({"b:4150": f"127.0.0.1:{mirror.port}"})
    link = origin.links["b:4150"]
    await until(lambda: link.in_sync)
    await origin.published("t", ("c",), 0, entries(1))
    await mirror.stop()
    mirror.stores.clear()  # restarted empty
    await mirror.start()
    await until(lambda: link.in_sync)  # after the snapshot
    assert mirror.ids() == {b"0000000000000001"}
    assert mirror.stores["a:4150"].applied == 1
    await origin.published("t", ("c",), 0, entries(2))
    assert mirror.ids() == {b"0000000000000001", b"0000000000000002"}
    await asyncio.gather(*origin.set_mirrors({}))


async def test_an_older_epoch_is_refused(mirror: Mirror, caplog: pytest.LogCaptureFixture) -> None:
    newer = Origin("a:4150", 2, min_in_sync=2, timeout=TIMEOUT)
    newer.set_mirrors({"b:4150": f"127.0.0.1:{mirror.port}"})
    await until(lambda: newer.links["b:4150"].in_sync)
    older = Origin("a:4150", 1, min_in_sync=2, timeout=TIMEOUT)
    older.set_mirrors({"b:4150": f"127.0.0.1:{mirror.port}"})

    def refused() -> list[str]:  # what the mirror answered the older origin's link, as the link logs it
        return [record.getMessage() for record in caplog.records
                if record.getMessage().startswith("REPLICATION: link to b:4150") and "refused" in record.getMessage()]

    await until(refused)
    assert "epoch 1" in refused()[0] and not older.links["b:4150"].in_sync
    with pytest.raises(ReplicationError):
        await older.published("t", ("c",), 0, entries(1))
    assert mirror.stores["a:4150"].epoch == 2
    await asyncio.gather(*newer.set_mirrors({}), *older.set_mirrors({}))


async def test_nothing_is_acknowledged_once_the_lease_may_have_ended(mirror: Mirror) -> None:
    origin = Origin("a:4150", 1, min_in_sync=2, timeout=TIMEOUT)
    origin.set_mirrors({"b:4150": f"127.0.0.1:{mirror.port}"})
    await until(lambda: origin.links["b:4150"].in_sync)
    origin.lease_holds = lambda: False  # paused past its lease, say: the cluster may be adopting its messages
    with pytest.raises(ReplicationError, match="lease in etcd may have ended"):
        await origin.published("t", ("c",), 0, entries(1))
    assert mirror.ids() == {b"0000000000000001"}  # the mirror holds it; the producer was told it failed
    await asyncio.gather(*origin.set_mirrors({}))


async def test_a_snapshot_cut_off_before_the_mirror_had_it_is_sent_again(mirror: Mirror) -> None:
    origin = Origin("a:4150", 1, min_in_sync=2, timeout=TIMEOUT)
    made: list[int] = []

    def slow_snapshot() -> list[Publish]:  # the disk queues read on a thread, taking a while
        made.append(1)
        time.sleep(0.3)
        return [Publish(0, "t", ("c",), 0, Messages.of([(b"0000000000000001", b"body", 1, 0)]))]

    origin.outstanding = lambda: slow_snapshot
    origin.set_mirrors({"b:4150": f"127.0.0.1:{mirror.port}"})
    await until(lambda: made)
    await mirror.stop()  # the link breaks while the snapshot is being made; the mirror lives on
    await mirror.start()
    link = origin.links["b:4150"]
    await until(lambda: link.in_sync)
    assert mirror.ids() == {b"0000000000000001"} and len(made) == 2
    await asyncio.gather(*origin.set_mirrors({}))
