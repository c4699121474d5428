from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import aiosqlite
import pytest
from aiohttp import web

from harness.processes import free_port
from services.admin.audit import AuditEntry, AuditLog
from services.admin.notifications import Notifier, notification_body
from services.admin.store import open_store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[aiosqlite.Connection]:
    connection = await open_store(str(tmp_path / "admin.db"))
    yield connection
    await connection.close()


def entry(ts: float, action: str = "delete_channel", **fields: Any) -> AuditEntry:
    return AuditEntry(ts, fields.pop("user", "ops"), "10.0.0.1:5123", "curl/8.0", action, "t", **fields)


async def test_record_recent_prune(store: aiosqlite.Connection) -> None:
    audit = AuditLog(store)
    first = await audit.record(entry(10.0, channel="c", node="n1:4151"))
    second = await audit.record(entry(20.0, "pause_topic", result="error: 500"))
    third = await audit.record(entry(20.0, "empty_topic"))
    assert first < second < third
    recent = await audit.recent()
    assert [e.id for e in recent] == [third, second, first]
    assert recent[2] == AuditEntry(10.0, "ops", "10.0.0.1:5123", "curl/8.0", "delete_channel", "t", "c", "n1:4151",
                                   "ok", "", first)
    assert recent[1].result == "error: 500"
    assert [e.id for e in await audit.recent(limit=1)] == [third]
    assert [e.id for e in await audit.recent(limit=1, offset=2)] == [first]
    assert await audit.prune(20.0) == 1
    assert [e.id for e in await audit.recent()] == [third, second]


async def test_unknown_actions_are_refused(store: aiosqlite.Connection) -> None:
    with pytest.raises(ValueError, match="drop_table"):
        await AuditLog(store).record(entry(1.0, "drop_table"))


def test_notification_body_in_nsqs_shape() -> None:
    full = notification_body(entry(1700000000.9, channel="c", node="n1:4151"), "http://a:4171/api/x", "adminhost")
    assert list(full.items()) == [
        ("action", "delete_channel"), ("topic", "t"), ("channel", "c"), ("node", "n1:4151"),
        ("timestamp", 1700000000), ("user", "ops"), ("remote_ip", "10.0.0.1:5123"), ("user_agent", "curl/8.0"),
        ("url", "http://a:4171/api/x"), ("via", "adminhost")]


def test_notification_body_omits_empty_channel_node_and_user() -> None:
    body = notification_body(entry(5.0, "create_topic", user=""), "http://a/", "h")
    assert body == {"action": "create_topic", "topic": "t", "timestamp": 5, "remote_ip": "10.0.0.1:5123",
                    "user_agent": "curl/8.0", "url": "http://a/", "via": "h"}


class Endpoint:
    """A real HTTP server that records what it is sent and answers with ``status``, optionally after ``release``."""

    def __init__(self, status: int = 200, hang: bool = False) -> None:
        self.status = status
        self.hang = hang
        self.release = asyncio.Event()
        self.received: list[tuple[str, Any]] = []
        self.arrived = asyncio.Event()

    async def handle(self, request: web.Request) -> web.Response:
        self.received.append((request.content_type, await request.json()))
        self.arrived.set()
        if self.hang:
            await self.release.wait()
        return web.Response(status=self.status)


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as client:
        yield client


async def serve(endpoint: Endpoint) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_post("/notify", endpoint.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    return runner, f"http://127.0.0.1:{port}/notify"


TIMEOUT = aiohttp.ClientTimeout(total=0.5)


async def test_notifier_posts_the_exact_json(session: aiohttp.ClientSession,
                                             caplog: pytest.LogCaptureFixture) -> None:
    endpoint = Endpoint()
    runner, url = await serve(endpoint)
    try:
        notifier = Notifier(session, url, TIMEOUT)
        body = notification_body(entry(1700000000.0, channel="c"), "http://a:4171/api/topics/t/c", "adminhost")
        notifier.send(body)
        await notifier.close()
        assert endpoint.received == [("application/json", body)]
        assert "nsqadmin" not in [record.name for record in caplog.records]
    finally:
        await runner.cleanup()


async def test_endpoint_down_is_logged(session: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture) -> None:
    notifier = Notifier(session, f"http://127.0.0.1:{free_port()}/notify", TIMEOUT)
    with caplog.at_level(logging.WARNING, logger="nsqadmin"):
        notifier.send(notification_body(entry(1.0), "http://a/", "h"))
        started = time.monotonic()
        await notifier.close()
    assert time.monotonic() - started < 3
    assert "failed to POST notification to http://127.0.0.1:" in caplog.text


async def test_endpoint_error_status_is_logged(session: aiohttp.ClientSession,
                                               caplog: pytest.LogCaptureFixture) -> None:
    endpoint = Endpoint(status=500)
    runner, url = await serve(endpoint)
    try:
        notifier = Notifier(session, url, TIMEOUT)
        with caplog.at_level(logging.WARNING, logger="nsqadmin"):
            notifier.send(notification_body(entry(1.0), "http://a/", "h"))
            await notifier.close()
        assert len(endpoint.received) == 1
        assert f"notification POST to {url} answered 500 Internal Server Error" in caplog.text
    finally:
        await runner.cleanup()


async def test_endpoint_slower_than_the_timeout_is_logged(session: aiohttp.ClientSession,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    endpoint = Endpoint(hang=True)
    runner, url = await serve(endpoint)
    try:
        notifier = Notifier(session, url, aiohttp.ClientTimeout(total=0.2))
        with caplog.at_level(logging.WARNING, logger="nsqadmin"):
            notifier.send(notification_body(entry(1.0), "http://a/", "h"))
            started = time.monotonic()
            await notifier.close()
        assert time.monotonic() - started < 3
        assert f"failed to POST notification to {url} - " in caplog.text
    finally:
        endpoint.release.set()
        await runner.cleanup()


async def test_close_cancels_posts_still_pending(session: aiohttp.ClientSession) -> None:
    endpoint = Endpoint(hang=True)
    runner, url = await serve(endpoint)
    try:
        notifier = Notifier(session, url, aiohttp.ClientTimeout(total=30))
        notifier.send(notification_body(entry(1.0), "http://a/", "h"))
        await endpoint.arrived.wait()
        started = time.monotonic()
        await notifier.close(grace=0.1)
        assert time.monotonic() - started < 1
        notifier.send(notification_body(entry(2.0), "http://a/", "h"))  # after close: dropped, nothing started
        await notifier.close()
        assert len(endpoint.received) == 1
    finally:
        endpoint.release.set()
        await runner.cleanup()
