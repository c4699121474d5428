"""lookupd's HTTP API refusing what a browser sends for another site's page, on a lookupd in this process."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest

from services.lookupd.lookupd import NSQLookupd
from services.lookupd.options import Options

FRAME_DENY = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY"}
ACTIONS = ["/topic/create?topic=orders", "/topic/tombstone?topic=orders&node=n:4151",
           "/channel/create?topic=orders&channel=c", "/topic/delete?topic=orders"]


class Client:
    """Requests to one lookupd's HTTP listener, by path."""

    def __init__(self, session: aiohttp.ClientSession, address: tuple[str, int]) -> None:
        self.session = session
        self.host, self.port = address

    async def get(self, path: str, allow_redirects: bool = True) -> aiohttp.ClientResponse:
        return await self.session.get(f"http://{self.host}:{self.port}{path}", allow_redirects=allow_redirects)

    async def post(self, path: str, headers: dict[str, str] | None = None) -> aiohttp.ClientResponse:
        return await self.session.post(f"http://{self.host}:{self.port}{path}", headers=headers)


@asynccontextmanager
async def _client(allow_cross_site: bool = False) -> AsyncIterator[tuple[Client, NSQLookupd]]:
    lookupd = NSQLookupd(Options(tcp_address="127.0.0.1:0", http_address="127.0.0.1:0",
                                 http_allow_cross_site=allow_cross_site))
    await lookupd.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(session, lookupd.http_address), lookupd
    finally:
        await lookupd.stop()


@pytest.mark.parametrize("headers", [{"Origin": "http://127.0.0.2:39999"}, {"Sec-Fetch-Site": "cross-site"},
                                     {"Origin": "null", "Sec-Fetch-Site": "cross-site"}])
@pytest.mark.parametrize("path", ACTIONS)
async def test_cross_site_actions_are_refused_and_change_nothing(
        path: str, headers: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    async with _client() as (client, lookupd):
        with caplog.at_level(logging.WARNING, logger="nsqlookupd"):
            response = await client.post(path, headers=headers)
        assert response.status == 403
        assert response.headers["Content-Type"] == "application/json; charset=utf-8"
        assert await response.text() == '{"message":"CROSS_SITE_REQUEST"}'
        assert lookupd.db.registrations == {}
        assert lookupd.request_counts == {(path.partition("?")[0], 403): 1}
    (line,) = [message for message in caplog.messages if "refused" in message]
    source = headers.get("Origin") or headers["Sec-Fetch-Site"]
    assert f'POST "{path.partition("?")[0]}" from "{source}"' in line


@pytest.mark.parametrize("headers", [{}, {"Sec-Fetch-Site": "same-origin"}, {"Origin": "http://{host}"},
                                     {"Origin": "https://nsq.example", "X-Forwarded-Host": "nsq.example"}])
async def test_other_requests_are_served(headers: dict[str, str]) -> None:
    async with _client() as (client, lookupd):
        host = f"{client.host}:{client.port}"
        response = await client.post("/topic/create?topic=orders",
                                     headers={name: value.format(host=host) for name, value in headers.items()})
        assert response.status == 200
        assert [registration.key for registration in lookupd.db.registrations] == ["orders"]


async def test_answers_to_get_forbid_framing() -> None:
    async with _client() as (client, _):
        for path in ("/nodes", "/nope", "/nodes/"):  # answers, errors, redirects
            response = await client.get(path, allow_redirects=False)
            assert FRAME_DENY.items() <= response.headers.items(), path
        response = await client.post("/topic/create?topic=orders")
        assert not FRAME_DENY.keys() & response.headers.keys()


async def test_allowing_cross_site_is_nsqs_behaviour() -> None:
    async with _client(allow_cross_site=True) as (client, lookupd):
        response = await client.post("/topic/create?topic=orders", headers={"Origin": "http://127.0.0.2:39999"})
        assert response.status == 200 and len(lookupd.db.registrations) == 1
        response = await client.get("/nodes")
        assert not FRAME_DENY.keys() & response.headers.keys()
