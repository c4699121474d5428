"""TLS, snappy and deflate on a real nsqd, negotiated by pynsq and by our client library, in every combination;
HTTPS, and what --tls-required and client certificates enforce."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme

from harness.processes import NSQDProcess
from harness.pynsq import PynsqLoop
from harness.wire import WireClient
from nsqclient import Consumer, Message, NSQProtocolError, Producer, TransportError
from tests.functional.test_pynsq import pynsq  # noqa: F401  (the fixture)

COMBINATIONS = [
    pytest.param({"tls": True}, id="tls"),
    pytest.param({"snappy": True}, id="snappy"),
    pytest.param({"deflate": True}, id="deflate"),
    pytest.param({"tls": True, "snappy": True}, id="tls+snappy"),
    pytest.param({"tls": True, "deflate": True}, id="tls+deflate"),
]


@dataclass
class Certificates:
    ca: Path
    cert: Path
    key: Path
    client_cert: Path  # certificate and key in one file

    def client_context(self, with_certificate: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_certificate:
            context.load_cert_chain(str(self.client_cert))
        return context


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    directory = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1", "localhost")
    client = authority.issue_cert("client@example.com")
    files = Certificates(directory / "ca.pem", directory / "cert.pem", directory / "key.pem", directory / "client.pem")
    authority.cert_pem.write_to_path(str(files.ca))
    server.cert_chain_pems[0].write_to_path(str(files.cert))
    server.private_key_pem.write_to_path(str(files.key))
    client.private_key_and_cert_chain_pem.write_to_path(str(files.client_cert))
    return files


@pytest.fixture
def tls_nsqd(nsqd_factory: Callable[..., NSQDProcess], certificates: Certificates) -> Callable[..., NSQDProcess]:
    def start(*flags: str) -> NSQDProcess:
        return nsqd_factory(f"--tls-cert={certificates.cert}", f"--tls-key={certificates.key}",
                            f"--tls-root-ca-file={certificates.ca}", "--https-address=127.0.0.1:0", *flags)
    return start


def client_stats(nsqd: NSQDProcess, topic: str) -> list[dict[str, Any]]:
    document = json.loads(nsqd.http("GET", f"/stats?format=json&topic={topic}")[2])
    return [client for topic_stats in document["topics"] or [] for channel in topic_stats["channels"]
            for client in channel["clients"]]


def transport_of(client: dict[str, Any]) -> dict[str, bool]:
    return {key: client[key] for key in ("tls", "snappy", "deflate")}


def expected(features: dict[str, bool]) -> dict[str, bool]:
    return {key: features.get(key, False) for key in ("tls", "snappy", "deflate")}


@pytest.mark.parametrize("features", COMBINATIONS)
def test_pynsq_publishes_and_consumes_over_every_combination(
        tls_nsqd: Callable[..., NSQDProcess], certificates: Certificates, pynsq: PynsqLoop,
        features: dict[str, bool]) -> None:
    nsqd = tls_nsqd()
    options: dict[str, Any] = {key: value for key, value in features.items() if key != "tls"}
    if features.get("tls"):
        options.update(tls_v1=True, tls_options={"ca_certs": str(certificates.ca)})
    writer = pynsq.writer(nsqd.tcp_address, **options)
    bodies = [b"small", b"x" * 100_000, bytes(range(256)) * 40]
    assert writer.pub("secure", bodies[0]) == b"OK"
    assert writer.mpub("secure", bodies[1:]) == b"OK"
    reader = pynsq.reader(nsqd.tcp_address, "secure", "c", max_in_flight=10, **options)
    received = reader.inbox.wait_count(3, timeout=10)
    assert sorted(message.body for message in received) == sorted(bodies)
    [consumer] = client_stats(nsqd, "secure")
    assert transport_of(consumer) == expected(features)
    if features.get("tls"):
        assert consumer["tls_version"] in ("TLS1.2", "TLS1.3") and consumer["tls_cipher_suite"]


@pytest.mark.parametrize("features", COMBINATIONS)
async def test_our_client_publishes_and_consumes_over_every_combination(
        tls_nsqd: Callable[..., NSQDProcess], certificates: Certificates, features: dict[str, bool]) -> None:
    nsqd = tls_nsqd()
    address = f"127.0.0.1:{nsqd.tcp_port}"
    tls = certificates.client_context() if features.get("tls") else None
    compression: dict[str, Any] = {key: True for key in ("snappy", "deflate") if features.get(key)}  # IDENTIFY
    bodies = [b"message %d " % index * (index + 1) for index in range(500)]
    async with Producer(address, tls=tls, **compression) as producer:
        await producer.multi_publish("secure", bodies[:250])
        for body in bodies[250:]:
            await producer.publish("secure", body)
    received: list[bytes] = []
    done = asyncio.Event()

    async def handler(message: Message) -> None:
        received.append(message.body)
        if len(received) == len(bodies):
            done.set()

    consumer = Consumer("secure", "c", handler, nsqd_tcp_addresses=[address], max_in_flight=100, tls=tls,
                        connect_timeout=5, **compression)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 10)
        [stats] = await asyncio.to_thread(client_stats, nsqd, "secure")
        assert transport_of(stats) == expected(features)
        assert stats["finish_count"] >= len(bodies) - 100
    finally:
        await consumer.stop()
    assert sorted(received) == sorted(bodies)


async def test_snappy_and_deflate_together_are_refused(nsqd: NSQDProcess) -> None:
    client = await WireClient.connect(nsqd.tcp_address)
    await client.command(b"IDENTIFY", body=json.dumps(
        {"feature_negotiation": True, "snappy": True, "deflate": True}).encode())
    frame = await client.read_frame()
    assert frame.data == b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression"
    await client.close()


async def test_tls_required_refuses_commands_before_the_upgrade(tls_nsqd: Callable[..., NSQDProcess],
                                                                certificates: Certificates) -> None:
    nsqd = tls_nsqd("--tls-required=true")
    client = await WireClient.connect(nsqd.tcp_address)
    await client.command(b"PUB", b"plain", body=b"x")
    frame = await client.read_frame()
    assert frame.data == b"E_INVALID cannot PUB in current state (TLS required)"
    await client.close()
    with pytest.raises(NSQProtocolError, match="TLS required"):
        async with Producer(f"127.0.0.1:{nsqd.tcp_port}") as producer:
            await producer.publish("plain", b"x")
    async with Producer(f"127.0.0.1:{nsqd.tcp_port}", tls=certificates.client_context()) as producer:
        await producer.publish("encrypted", b"x")


def test_https_serves_the_api_and_tls_required_closes_plain_http(
        tls_nsqd: Callable[..., NSQDProcess], certificates: Certificates) -> None:
    nsqd = tls_nsqd("--tls-required=true")
    https_port = int(next(line for line in nsqd.log_lines if "HTTPS: listening" in line).rsplit(":", 1)[1])
    context = certificates.client_context()
    with urllib.request.urlopen(f"https://127.0.0.1:{https_port}/ping", context=context, timeout=5) as response:
        assert response.read() == b"OK"
    request = urllib.request.Request(f"https://127.0.0.1:{https_port}/pub?topic=over_https", data=b"hi")
    with urllib.request.urlopen(request, context=context, timeout=5) as response:
        assert response.read() == b"OK"
    status, headers, body = nsqd.http("GET", "/ping")
    # NSQ 1.3's own text, spacing included
    assert (status, body) == (403, f'{{"message": "TLS_REQUIRED", "https_port": {https_port}}}'.encode())
    assert headers["Content-Type"] == "application/json; charset=utf-8"
    assert headers["X-Nsq-Content-Type"] == "nsq; version=1.0"


async def test_client_certificate_required_and_verified(tls_nsqd: Callable[..., NSQDProcess],
                                                        certificates: Certificates) -> None:
    nsqd = tls_nsqd("--tls-client-auth-policy=require-verify")
    address = f"127.0.0.1:{nsqd.tcp_port}"
    async with Producer(address, tls=certificates.client_context(with_certificate=True)) as producer:
        await producer.publish("mutual", b"x")
    # with TLS 1.3 the client learns only after its handshake that nsqd refused it and closed the connection
    with pytest.raises(TransportError):
        async with Producer(address, tls=certificates.client_context(), connect_timeout=3) as producer:
            await producer.publish("mutual", b"y")


async def test_a_certificate_for_another_name_is_checked_against_tls_server_name(
        nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path) -> None:
    """nsqd behind a name its address does not carry (a unix socket has none at all): the client checks the
    certificate against ``tls_server_name``, and refuses it without."""
    authority = trustme.CA()
    issued = authority.issue_cert("nsqd.internal.example")
    ca, cert, key = tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem"
    authority.cert_pem.write_to_path(str(ca))
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    nsqd = nsqd_factory(f"--tls-cert={cert}", f"--tls-key={key}", "--https-address=")
    context = ssl.create_default_context(cafile=str(ca))
    with pytest.raises(TransportError, match="certificate verify failed"):
        async with Producer(nsqd.tcp_address_text, tls=context, connect_timeout=3) as producer:
            await producer.publish("named", b"x")
    async with Producer(nsqd.tcp_address_text, tls=context, tls_server_name="nsqd.internal.example") as producer:
        await producer.publish("named", b"x")
        (publisher,) = json.loads(nsqd.http("GET", "/stats?format=json&topic=named")[2])["producers"]
        assert transport_of(publisher) == expected({"tls": True})


async def test_a_failed_handshake_leaves_nsqd_serving(tls_nsqd: Callable[..., NSQDProcess]) -> None:
    """A client that asks for TLS and then sends garbage instead of a handshake is dropped; others go on."""
    nsqd = tls_nsqd()
    client = await WireClient.connect(nsqd.tcp_address)
    await client.command(b"IDENTIFY", body=json.dumps({"feature_negotiation": True, "tls_v1": True}).encode())
    assert json.loads((await client.read_frame()).data)["tls_v1"] is True
    client.send(b"this is not a TLS client hello" * 10)
    assert await client.closed()
    async with Producer(f"127.0.0.1:{nsqd.tcp_port}") as producer:
        await producer.publish("still_serving", b"x")


async def test_corrupt_compressed_stream_closes_only_that_connection(nsqd: NSQDProcess) -> None:
    client = await WireClient.connect(nsqd.tcp_address)
    await client.command(b"IDENTIFY", body=json.dumps({"feature_negotiation": True, "deflate": True}).encode())
    assert json.loads((await client.read_frame()).data)["deflate"] is True
    client.send(b"\xff" * 64)  # not a deflate stream
    assert await client.closed()
    async with Producer(f"127.0.0.1:{nsqd.tcp_port}") as producer:
        await producer.publish("still_serving", b"x")


def test_unreadable_certificate_fails_the_start(tmp_path: Path) -> None:
    from harness.processes import start_nsqd

    (tmp_path / "data").mkdir()
    with pytest.raises(RuntimeError, match="failed to build TLS config"):
        start_nsqd(f"--tls-cert={tmp_path}/missing.pem", f"--tls-key={tmp_path}/missing.key",
                   data_path=tmp_path / "data", timeout=10)
    with pytest.raises(RuntimeError, match="cannot require TLS client connections without TLS key and cert"):
        start_nsqd("--tls-required=true", data_path=tmp_path / "data", timeout=10)
