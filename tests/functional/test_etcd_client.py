"""The etcd client against a real etcd (Debian's etcd-server): keys, transactions, leases, watches, and a member
lost from a three-member cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from harness.etcd import EtcdCluster, start_etcd
from shared.etcd import messages
from shared.etcd.client import Etcd, EtcdUnavailable
from shared.etcd.messages import EtcdError


@pytest.fixture(scope="module")
def etcd() -> Iterator[EtcdCluster]:
    cluster = start_etcd()
    yield cluster
    cluster.stop()


async def test_keys_and_transactions(etcd: EtcdCluster) -> None:
    client = Etcd(etcd.addresses)
    try:
        first = await client.put("/t1/a", b"1")
        await client.put("/t1/b", b"2")
        await client.put("/t10", b"not under /t1/")
        assert (await client.get("/t1/a")).value == b"1"  # type: ignore[union-attr]
        assert await client.get("/t1/none") is None
        found, revision = await client.get_prefix("/t1/")
        assert [(kv.key, kv.value) for kv in found] == [("/t1/a", b"1"), ("/t1/b", b"2")]
        assert revision > first
        # compare-and-swap on the revision a key was last written at: the second writer loses
        assert (await client.transaction([messages.mod_revision_is("/t1/a", first)], [messages.put("/t1/a", b"x")]))[0]
        won, responses = await client.transaction([messages.mod_revision_is("/t1/a", first)],
                                                  [messages.put("/t1/a", b"y")], [messages.get("/t1/a")])
        assert not won
        assert messages.key_values(responses[0]["response_range"])[0].value == b"x"
        assert (await client.transaction([messages.version_is("/t1/c", 0)], [messages.put("/t1/c", b"new")]))[0]
        assert await client.delete("/t1/", prefix=True) == 3
        assert (await client.get_prefix("/t1/"))[0] == []
    finally:
        await client.close()


async def test_a_key_goes_with_its_lease(etcd: EtcdCluster) -> None:
    client = Etcd(etcd.addresses)
    try:
        lease = await client.grant(2)
        await client.put("/t2/node", b"alive", lease)
        assert await client.keep_alive(lease) == 2
        await asyncio.sleep(3.2)  # not kept alive: it ends, and the key with it
        assert await client.get("/t2/node") is None
        assert await client.keep_alive(lease) == 0
        lease = await client.grant(30)
        await client.put("/t2/node", b"alive", lease)
        await client.revoke(lease)
        assert await client.get("/t2/node") is None
        await client.revoke(lease)  # twice is no error
    finally:
        await client.close()


async def test_a_watch_sees_puts_and_deletes_from_a_revision_on(etcd: EtcdCluster) -> None:
    client = Etcd(etcd.addresses)
    try:
        _, revision = await client.get_prefix("/t3/")
        await client.put("/t3/early", b"1")  # after the revision read: the watch must still see it

        async def changes() -> list[tuple[bool, str, bytes]]:
            seen: list[tuple[bool, str, bytes]] = []
            async for _, events in client.watch("/t3/", prefix=True, start_revision=revision + 1):
                seen += [(event.deleted, event.kv.key, event.kv.value) for event in events]
                if len(seen) == 3:
                    return seen
            return seen

        watching = asyncio.create_task(changes())
        await asyncio.sleep(0.2)
        await client.put("/t3/late", b"2")
        await client.put("/t4/elsewhere", b"-")
        await client.delete("/t3/early")
        assert await asyncio.wait_for(watching, 10) == [
            (False, "/t3/early", b"1"), (False, "/t3/late", b"2"), (True, "/t3/early", b"")]
    finally:
        await client.close()


async def test_no_endpoint_answering_is_an_error_of_its_own(etcd: EtcdCluster) -> None:
    from harness.processes import free_port

    client = Etcd([f"127.0.0.1:{free_port()}"], timeout=1)
    try:
        with pytest.raises(EtcdUnavailable):
            await client.get("/x")
    finally:
        await client.close()
    client = Etcd(etcd.addresses)
    try:
        with pytest.raises(EtcdError, match="lease"):
            await client.put("/x", b"", lease=12345)  # etcd's own refusal: no such lease
    finally:
        await client.close()


async def test_the_client_moves_to_a_member_that_answers() -> None:
    cluster = start_etcd(3)
    client = Etcd(cluster.addresses, timeout=2)
    last_member = Etcd([cluster.members[2].address])
    try:
        await client.put("/t5/k", b"before")
        cluster.stop_member(cluster.members[0])  # the member the client was using
        assert (await client.get("/t5/k")).value == b"before"  # type: ignore[union-attr]
        await client.put("/t5/k", b"after")  # two of three members are a quorum
        assert (await last_member.get("/t5/k")).value == b"after"  # type: ignore[union-attr]
    finally:
        await client.close()
        await last_member.close()
        cluster.stop()
