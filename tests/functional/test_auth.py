"""AUTH on a real nsqd asking the reference auth server (``nsq_auth_server``), as NSQ's clients see it: raw
protocol, pynsq and our client library."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.processes import NSQDProcess, start_auth_server, wait_for_async
from harness.pynsq import PynsqLoop
from harness.wire import WireClient
from nsqclient import Consumer, Message, NSQError, NSQProtocolError, Producer
from tests.functional.test_pynsq import pynsq  # noqa: F401  (the fixture)

ORDERS = {"identity": "billing", "identity_url": "https://example.com/billing",
          "authorizations": [{"topic": "^orders$", "channels": ["^billing$", "^audit", "^$"],
                              "permissions": ["subscribe", "publish"]},
                             {"topic": "^events", "channels": [".*"], "permissions": ["publish"]}]}
RULES: dict[str, Any] = {"ttl": 3600, "secrets": {"s3cret": ORDERS, "nothing": {"identity": "nobody"},
                                                   "short": {**ORDERS, "ttl": 1}}}


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "rules.json"
    path.write_text(json.dumps(RULES))
    return path


@pytest.fixture
def auth_server(rules: Path) -> Iterator[NSQDProcess]:
    server = start_auth_server(rules)
    yield server
    server.stop()


@pytest.fixture
def auth_nsqd(nsqd_factory: Callable[..., NSQDProcess], auth_server: NSQDProcess) -> NSQDProcess:
    return nsqd_factory(f"--auth-http-address=127.0.0.1:{auth_server.http_port}")


OPEN: list[WireClient] = []


@pytest.fixture(autouse=True)
async def close_clients() -> Any:
    yield
    while OPEN:
        await OPEN.pop().close()


async def identified(nsqd: NSQDProcess) -> WireClient:
    client = await WireClient.connect(nsqd.tcp_address)
    OPEN.append(client)
    reply = json.loads((await client.identify(feature_negotiation=True)).data)
    assert reply["auth_required"] is True
    return client


async def auth(client: WireClient, secret: bytes) -> bytes:
    await client.command(b"AUTH", body=secret)
    return (await client.read_frame()).data


async def test_commands_need_auth_first(auth_nsqd: NSQDProcess) -> None:
    client = await identified(auth_nsqd)
    await client.command(b"PUB", b"orders", body=b"x")
    assert (await client.read_frame()).data == b"E_AUTH_FIRST AUTH required before PUB"
    client = await identified(auth_nsqd)
    await client.command(b"SUB", b"orders", b"billing")
    assert (await client.read_frame()).data == b"E_AUTH_FIRST AUTH required before SUB"


async def test_auth_answers_identity_and_enforces_permissions(auth_nsqd: NSQDProcess) -> None:
    client = await identified(auth_nsqd)
    assert json.loads(await auth(client, b"s3cret")) == {
        "identity": "billing", "identity_url": "https://example.com/billing", "permission_count": 2}
    await client.command(b"PUB", b"orders", body=b"allowed")
    assert (await client.read_frame()).data == b"OK"
    await client.command(b"MPUB", b"events.click", body=b"\x00\x00\x00\x01\x00\x00\x00\x01x")
    assert (await client.read_frame()).data == b"OK"
    await client.command(b"PUB", b"secrets", body=b"denied")
    assert (await client.read_frame()).data == b'E_UNAUTHORIZED AUTH failed for PUB on "secrets" ""'
    assert await client.closed()

    subscriber = await identified(auth_nsqd)
    await auth(subscriber, b"s3cret")
    await subscriber.command(b"SUB", b"orders", b"marketing")
    assert (await subscriber.read_frame()).data == b'E_UNAUTHORIZED AUTH failed for SUB on "orders" "marketing"'
    subscriber = await identified(auth_nsqd)
    await auth(subscriber, b"s3cret")
    await subscriber.command(b"SUB", b"orders", b"audit-eu")  # unanchored at the end, as Go's MatchString
    assert (await subscriber.read_frame()).data == b"OK"
    clients = json.loads(auth_nsqd.http("GET", "/stats?format=json&topic=orders")[2])["topics"][0]["channels"]
    [stats] = [c for channel in clients for c in channel["clients"]]
    assert (stats["authed"], stats["auth_identity"], stats["auth_identity_url"]) == (
        True, "billing", "https://example.com/billing")


async def test_bad_secrets_and_repeated_auth(auth_nsqd: NSQDProcess) -> None:
    client = await identified(auth_nsqd)
    assert await auth(client, b"wrong") == b"E_AUTH_FAILED AUTH failed"
    assert await client.closed()
    client = await identified(auth_nsqd)
    assert await auth(client, b"nothing") == b"E_UNAUTHORIZED AUTH no authorizations found"
    client = await identified(auth_nsqd)
    await auth(client, b"s3cret")
    assert await auth(client, b"s3cret") == b"E_INVALID AUTH already set"


async def test_commands_pipelined_after_auth_wait_for_its_answer(auth_nsqd: NSQDProcess) -> None:
    client = await identified(auth_nsqd)
    client.send(b"AUTH\n" + len(b"s3cret").to_bytes(4, "big") + b"s3cret" + b"PUB orders\n\x00\x00\x00\x01x"
                + b"NOP\n" + b"PUB orders\n\x00\x00\x00\x01y")
    assert json.loads((await client.read_frame()).data)["identity"] == "billing"
    assert [(await client.read_frame()).data for _ in range(2)] == [b"OK", b"OK"]


async def test_expired_authorizations_are_asked_for_again(auth_nsqd: NSQDProcess, rules: Path) -> None:
    client = await identified(auth_nsqd)
    await auth(client, b"short")
    await client.command(b"PUB", b"orders", body=b"x")
    assert (await client.read_frame()).data == b"OK"
    rules.write_text(json.dumps({**RULES, "secrets": {**RULES["secrets"], "short": {
        **ORDERS, "ttl": 1, "authorizations": [{"topic": "^other$", "channels": [".*"],
                                               "permissions": ["publish"]}]}}}))
    await asyncio.sleep(1.2)  # the TTL of one second is over
    await client.command(b"PUB", b"orders", body=b"x")
    assert (await client.read_frame()).data == b'E_UNAUTHORIZED AUTH failed for PUB on "orders" ""'
    assert await client.closed()


async def test_auth_server_down_fails_auth(nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory("--auth-http-address=127.0.0.1:1")
    client = await identified(nsqd)
    assert await auth(client, b"s3cret") == b"E_AUTH_FAILED AUTH failed"
    assert await client.closed()


async def test_our_client_sends_its_secret(auth_nsqd: NSQDProcess) -> None:
    address = f"127.0.0.1:{auth_nsqd.tcp_port}"
    with pytest.raises(NSQError, match="requires AUTH"):
        async with Producer(address) as producer:
            await producer.publish("orders", b"x")
    async with Producer(address, auth_secret="s3cret") as producer:
        await producer.publish("orders", b"hello")
        with pytest.raises(NSQProtocolError, match="E_UNAUTHORIZED"):
            await producer.publish("secrets", b"x")
    received: list[Message] = []
    consumer = Consumer("orders", "billing", received.append, nsqd_tcp_addresses=[address],  # type: ignore[arg-type]
                        auth_secret="s3cret")
    await consumer.start()
    try:
        await wait_for_async(lambda: received, what="the message consumed")
        assert [message.body for message in received] == [b"hello"]
    finally:
        await consumer.stop()


def test_pynsq_authenticates(auth_nsqd: NSQDProcess, pynsq: PynsqLoop) -> None:
    writer = pynsq.writer(auth_nsqd.tcp_address, auth_secret="s3cret")
    assert writer.pub("orders", b"from pynsq") == b"OK"
    reader = pynsq.reader(auth_nsqd.tcp_address, "orders", "billing", auth_secret="s3cret")
    assert [message.body for message in reader.inbox.wait_count(1, timeout=10)] == [b"from pynsq"]
