"""The client's lookupd discovery (urllib on threads of its own) against real sockets: a lookupd that hangs is
given up at the timeout, answers that are not HTTP or an address that is not one are failures (logged, None),
the environment's proxy is not used, and the client says who it is."""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from nsqclient import user_agent
from nsqclient.lookupd import lookup_nodes, lookup_topic

NODES = {"producers": [{"broadcast_address": "10.0.0.7", "tcp_port": 4150, "http_port": 4151}]}


@pytest.fixture
async def lookupd() -> AsyncIterator[tuple[str, list[web.Request]]]:
    """A real HTTP server answering /nodes as lookupd does, and the requests it got."""
    requests: list[web.Request] = []

    async def nodes(request: web.Request) -> web.Response:
        requests.append(request)
        return web.json_response(NODES)

    app = web.Application()
    app.router.add_get("/nodes", nodes)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    yield f"127.0.0.1:{runner.addresses[0][1]}", requests
    await runner.cleanup()


async def test_a_lookupd_that_never_answers_is_given_up_at_the_timeout(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        started = time.monotonic()
        with caplog.at_level(logging.ERROR, "nsq.client"):
            assert await lookup_nodes(f"127.0.0.1:{silent.getsockname()[1]}", 0.3) is None
        assert time.monotonic() - started < 2
    assert caplog.records[0].getMessage().endswith("/nodes: timed out")


async def test_what_is_not_a_lookupd_is_a_failure_not_an_exception(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as not_http:
        not_http.bind(("127.0.0.1", 0))
        not_http.listen()

        async def answer_garbage() -> None:
            loop = asyncio.get_running_loop()
            not_http.setblocking(False)
            connection, _ = await loop.sock_accept(not_http)
            with connection:
                await loop.sock_recv(connection, 4096)
                await loop.sock_sendall(connection, b"  V2 E_INVALID\r\n\r\n")

        serving = asyncio.create_task(answer_garbage())
        with caplog.at_level(logging.ERROR, "nsq.client"):
            assert await lookup_topic(f"127.0.0.1:{not_http.getsockname()[1]}", "t", 2.0) is None
            assert await lookup_topic("127.0.0.1:41x1", "t", 2.0) is None
        await serving
    assert len(caplog.records) == 2


async def test_the_proxy_of_the_environment_is_not_used_and_the_client_names_itself(
        lookupd: tuple[str, list[web.Request]], monkeypatch: pytest.MonkeyPatch) -> None:
    address, requests = lookupd
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    assert await lookup_nodes(address, 2.0) == ["10.0.0.7:4150"]
    assert requests[0].headers["User-Agent"] == user_agent()
    assert requests[0].headers["Accept"] == "application/vnd.nsq; version=1.0"
