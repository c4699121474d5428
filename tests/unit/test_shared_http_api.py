"""shared/http_api.py: NSQ's error rendering and httprouter's own answers, on a small in-process aiohttp app."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from shared.http_api import HTTPError, nsq_errors, redirect_fixed_paths
from shared.http_conventions import fixed_path_candidates


async def ok(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def refuse(request: web.Request) -> web.Response:
    raise HTTPError(400, "MISSING_ARG_TOPIC")


async def crash(request: web.Request) -> web.Response:
    raise RuntimeError("boom")


@pytest.fixture
async def client() -> AsyncIterator[TestClient[web.Request, web.Application]]:
    app = web.Application(middlewares=[nsq_errors(logging.getLogger("test.http")), redirect_fixed_paths])
    app.router.add_get("/ping", ok, allow_head=False)
    app.router.add_get("/config/{opt}", ok, allow_head=False)
    app.router.add_post("/pub", refuse)
    app.router.add_get("/crash", crash, allow_head=False)
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def test_http_error_is_nsq_json(client: TestClient[web.Request, web.Application]) -> None:
    response = await client.post("/pub")
    assert response.status == 400
    assert response.headers["Content-Type"] == "application/json; charset=utf-8"
    assert response.headers["X-NSQ-Content-Type"] == "nsq; version=1.0"
    assert await response.text() == '{"message":"MISSING_ARG_TOPIC"}'


async def test_unexpected_exception_is_logged_internal_error(client: TestClient[web.Request, web.Application],
                                                             caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="test.http"):
        response = await client.get("/crash?x=1")
        assert (response.status, await response.json()) == (500, {"message": "INTERNAL_ERROR"})
    assert "panic in HTTP handler - GET /crash?x=1" in caplog.text and "RuntimeError: boom" in caplog.text


async def test_router_answers(client: TestClient[web.Request, web.Application]) -> None:
    response = await client.get("/nope")
    assert (response.status, await response.json()) == (404, {"message": "NOT_FOUND"})
    response = await client.head("/ping")
    assert (response.status, response.headers["Allow"]) == (405, "GET, OPTIONS")
    response = await client.options("/pub")
    assert (response.status, response.headers["Allow"], await response.read()) == (200, "OPTIONS, POST", b"")


async def test_redirects(client: TestClient[web.Request, web.Application]) -> None:
    response = await client.get("/config/x/?a=1&b=%20", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (301, "/config/x?a=1&b=%20")
    response = await client.post("/pub/", allow_redirects=False)
    assert (response.status, response.headers["Location"], await response.read()) == (307, "/pub", b"")
    response = await client.post("/ping/", allow_redirects=False)  # only a route for the same method counts
    assert response.status == 404


@pytest.mark.parametrize(("path", "candidates"), [
    ("/ping/", ["/ping"]),
    ("/ping", ["/ping/"]),
    ("//ping", ["//ping/", "/ping", "/ping/"]),
    ("/a/./b/../ping/", ["/a/./b/../ping", "/a/ping/", "/a/ping"]),
    ("/./", ["/.", "/"]),
])
def testfixed_path_candidates(path: str, candidates: list[str]) -> None:
    assert fixed_path_candidates(path) == candidates
