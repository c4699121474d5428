"""A command nsqd cannot answer at once holds back everything the client sent after it, however the bytes arrive:
AUTH while the auth server (50 ms here) answers, a PUB on a topic that waits for lookupd's channels before it
starts, the TLS upgrade after IDENTIFY. Plain, deflate and snappy; the commands sent in one write, and put on the
wire a byte at a time. The decompressed input runs in 256 KiB pieces, so a 300 KB PUB after the waiting command
lands in a later piece."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import trustme
from aiohttp import web

from harness.processes import NSQDProcess, start_lookupd, start_nsqd, wait_for
from harness.wire import WireClient
from nsqclient.protocol.compression import Codec, DeflateCodec, SnappyCodec
from nsqclient.protocol.frames import (
    FRAME_TYPE_ERROR,
    FRAME_TYPE_RESPONSE,
    MAGIC_V2,
    Frame,
    FrameDecoder,
    encode_command,
)

BIG = b"x" * 300_000  # more than one 256 KiB piece once inflated
CODECS: dict[str, Callable[[], Codec] | None] = {"plain": None, "deflate": lambda: DeflateCodec(6),
                                                 "snappy": SnappyCodec}
ALLOWED = {"identity": "billing", "ttl": 3600,
           "authorizations": [{"topic": ".*", "channels": [".*"], "permissions": ["subscribe", "publish"]}]}


@pytest.fixture
async def slow_auth_server() -> AsyncIterator[str]:
    """An auth server that answers every secret after 50 ms; its address."""
    async def answer(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)
        return web.json_response(ALLOWED)

    app = web.Application()
    app.router.add_get("/auth", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def connect(nsqd: NSQDProcess, compression: str) -> WireClient:
    client = await WireClient.connect(nsqd.tcp_address)
    make_codec = CODECS[compression]
    if make_codec is None:
        await client.identify(feature_negotiation=True)
    else:
        await client.compress(make_codec(), feature_negotiation=True)
    return client


async def send(client: WireClient, data: bytes, bytewise: bool) -> None:
    # a plain 300 KB a byte a write would take minutes: there the start goes a byte at a time, the rest at once
    if bytewise and client.compressing:
        await client.send_in_pieces(data, 1)
    elif bytewise:
        await client.send_in_pieces(data[:400], 1)
        await client.send_in_pieces(data[400:], len(data))
    else:
        await client.send_in_pieces(data, len(data))


OK = Frame(FRAME_TYPE_RESPONSE, b"OK")
MODES = pytest.mark.parametrize("bytewise", [False, True], ids=["one-write", "bytewise"])
COMPRESSIONS = pytest.mark.parametrize("compression", list(CODECS))


@COMPRESSIONS
@MODES
async def test_a_publish_after_auth_waits_for_the_auth_servers_answer(
        nsqd_factory: Callable[..., NSQDProcess], slow_auth_server: str, compression: str, bytewise: bool) -> None:
    nsqd = nsqd_factory(f"--auth-http-address={slow_auth_server}")
    client = await connect(nsqd, compression)
    try:
        await send(client, encode_command(b"AUTH", body=b"s3cret") + encode_command(b"PUB", b"orders", body=BIG)
                   + encode_command(b"PUB", b"orders", body=b"small"), bytewise)
        assert json.loads((await client.read_frame()).data)["identity"] == "billing"
        assert [await client.read_frame() for _ in range(2)] == [OK, OK]
    finally:
        await client.close()
    assert nsqd.http("GET", "/stats?format=json&topic=orders")[2].count(b'"message_count":2') == 1


@COMPRESSIONS
@MODES
async def test_commands_after_a_publish_to_a_topic_not_started_wait_for_its_answer(
        nsqd_factory: Callable[..., NSQDProcess], tmp_path: Path, compression: str, bytewise: bool) -> None:
    """The topic waits for lookupd's channels (lookupd stopped: nsqd gives up after its 1 s request timeout). What
    follows the PUB (another PUB, then a FIN nsqd refuses and closes on) is answered after it, in order."""
    lookupd = start_lookupd()
    try:
        nsqd = nsqd_factory(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                            "--http-client-connect-timeout=1s", "--http-client-request-timeout=1s")
        wait_for(lambda: b'"tcp_port"' in lookupd.http("GET", "/nodes")[2], what="nsqd identified")
        assert nsqd.http("POST", "/topic/create?topic=existing")[0] == 200
        client = await connect(nsqd, compression)
        lookupd.process.send_signal(signal.SIGSTOP)
        try:
            await send(client, encode_command(b"PUB", b"fresh", body=b"first")
                       + encode_command(b"PUB", b"existing", body=BIG) + b"FIN 0123456789abcdef\n", bytewise)
            frames = [await client.read_frame(timeout=10) for _ in range(3)]
            assert frames == [OK, OK, Frame(FRAME_TYPE_ERROR, b"E_INVALID cannot FIN in current state")]
            assert await client.closed()
        finally:
            lookupd.process.send_signal(signal.SIGCONT)
            await client.close()
    finally:
        lookupd.stop()


# nsqd on asyncio's own loop, as where uvloop (an optional extra) is not installed: its TLS layer can hand over the
# first data in the same turn as the end of the handshake, before the upgrade is done
WITHOUT_UVLOOP = [sys.executable, "-c",
                  "import runpy, sys; sys.modules['uvloop'] = None; runpy.run_module('services.nsqd', "
                  "run_name='__main__')"]


def test_commands_sent_with_the_end_of_the_tls_handshake_are_answered(tmp_path: Path) -> None:
    """The client's last handshake record and a PUB in one write, before nsqd's OK over TLS: the PUB counts as sent
    over TLS (it was), not as bytes from before the handshake."""
    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    server.cert_chain_pems[0].write_to_path(str(cert))
    server.private_key_pem.write_to_path(str(key))
    nsqd = start_nsqd(f"--tls-cert={cert}", f"--tls-key={key}", data_path=tmp_path, program=WITHOUT_UVLOOP)
    context = ssl.create_default_context()
    authority.configure_trust(context)
    try:
        with socket.create_connection(nsqd.tcp_address, timeout=5) as raw:
            raw.sendall(MAGIC_V2 + encode_command(b"IDENTIFY", body=json.dumps(
                {"tls_v1": True, "feature_negotiation": True}).encode()))
            frames = FrameDecoder()
            while not frames.feed(raw.recv(65536), limit=1):
                pass
            incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
            tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
            while True:
                try:
                    tls.do_handshake()
                    break
                except ssl.SSLWantReadError:
                    if outgoing.pending:
                        raw.sendall(outgoing.read())
                    incoming.write(raw.recv(65536))
            tls.write(encode_command(b"PUB", b"t", body=b"with the handshake"))
            raw.sendall(outgoing.read())  # the handshake's end and the PUB, in one write
            received: list[Frame] = []
            while len(received) < 2:
                try:
                    received += frames.feed(tls.read(65536))
                except ssl.SSLWantReadError:
                    incoming.write(raw.recv(65536))
            assert received == [OK, OK]
        assert b'"message_count":1' in nsqd.http("GET", "/stats?format=json&topic=t")[2]
    finally:
        nsqd.stop()
    assert not [line for line in nsqd.log_lines if "before the TLS handshake" in line]
