"""Topology-aware delivery (NSQ's experiment): consumers in two zones and a region of one nsqd; the nsqd's own
zone gets the messages while it has room, then its region, and /stats counts them by locality."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from harness.processes import NSQDProcess, wait_for_async
from harness.wire import WireClient
from nsqclient import Consumer, Message


async def consumer(nsqd: NSQDProcess, zone: str, region: str) -> WireClient:
    client = await WireClient.connect(nsqd.tcp_address)
    await client.subscribe("orders", "archive", rdy=100, topology_zone=zone, topology_region=region)
    return client


def ready_counts(nsqd: NSQDProcess) -> list[int]:
    """Each consumer's RDY as nsqd sees it: a consumer counts once subscribed, but receives only once ready."""
    return sorted(client["ready_count"] for client in nsqd.channel_stats("orders", "archive").get("clients", []))


async def received(client: WireClient) -> int:
    """How many messages arrive before half a second passes without one."""
    count = 0
    try:
        while True:
            await client.read_message(timeout=0.5)
            count += 1
    except TimeoutError:
        return count


async def nearest_first(nsqd: NSQDProcess, region: WireClient, far: WireClient) -> None:
    in_zone: list[Message] = []

    async def handle(message: Message) -> None:
        in_zone.append(message)

    # the zone's consumer is this project's client, saying where it is through its Config
    zone = Consumer("orders", "archive", handle, nsqd_tcp_addresses=["%s:%d" % nsqd.tcp_address],
                    max_in_flight=100, topology_zone="eu-1a", topology_region="eu-1")
    await zone.start()
    try:
        await wait_for_async(lambda: ready_counts(nsqd) == [100, 100, 100], 5, "three consumers ready")
        for number in range(20):
            nsqd.publish("orders", b"%d" % number)
        assert [await received(client) for client in (region, far)] == [0, 0]
        assert len(in_zone) == 20
        stats = nsqd.channel_stats("orders", "archive")
        assert (stats["zone_local_msg_count"], "region_local_msg_count" in stats) == (20, False)
        clients = json.loads(nsqd.http("GET", "/stats?format=json&topic=orders")[2])["topics"][0]["channels"][0]
        assert {(c["topology_zone"], c["topology_region"]) for c in clients["clients"]} == {
            ("us-1b", "us-1"), ("eu-1c", "eu-1"), ("eu-1a", "eu-1")}
    finally:
        await zone.stop()
    await wait_for_async(lambda: nsqd.channel_stats("orders", "archive").get("client_count") == 2, 5,
                         "the zone's consumer gone")
    for number in range(10):
        nsqd.publish("orders", b"%d" % number)
    assert [await received(client) for client in (region, far)] == [10, 0]
    assert nsqd.channel_stats("orders", "archive")["region_local_msg_count"] == 10


def test_the_nearest_consumers_get_the_messages_while_they_have_room(
        nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory("--enable-experiment=topology-aware-consumption", "--topology-zone=eu-1a",
                        "--topology-region=eu-1")
    nsqd.http("POST", "/topic/create?topic=orders")
    nsqd.http("POST", "/channel/create?topic=orders&channel=archive")

    async def scenario() -> None:
        far = await consumer(nsqd, "us-1b", "us-1")
        region = await consumer(nsqd, "eu-1c", "eu-1")
        try:
            await nearest_first(nsqd, region, far)
        finally:
            for client in (region, far):
                await client.close()

    asyncio.run(scenario())
