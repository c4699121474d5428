"""shared.http_auth without sockets: the secret in an Authorization header, what each route's need allows, what
stats show, and the gate's cache (its TTL, its brief memory of refusals, one question for concurrent requests, its
bound)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from typing import Any

import pytest

from shared.auth_reply import HTTP_PERMISSIONS, AuthError, AuthRefused, AuthState, parse_auth_reply
from shared.http_auth import (
    ACCEPTED,
    ADMIN_CHANNEL,
    ADMIN_NODE,
    ADMIN_TOPIC,
    OPEN,
    PUBLISH,
    SUBSCRIBE,
    SUBSCRIBE_TOPIC,
    HTTPAuth,
    Peer,
    allowed,
    credential,
    may_see,
)
from shared.http_router import Request, Response, Route

PEER = Peer("127.0.0.1", False, "")


def state(*authorizations: dict[str, Any], ttl: int = 60) -> AuthState:
    return parse_auth_reply(json.dumps({"ttl": ttl, "authorizations": list(authorizations)}), time.time(),
                            HTTP_PERMISSIONS)


def test_the_secret_is_a_bearer_token_or_basics_password() -> None:
    assert credential(b"Bearer s3cret") == "s3cret"
    assert credential(b"bearer   s3cret ") == "s3cret"
    assert credential(b"Basic " + base64.b64encode(b"user:pa:ss")) == "pa:ss"
    assert credential(b"Basic " + base64.b64encode(b":only-password")) == "only-password"
    for value in (b"Basic " + base64.b64encode(b"user-only"), b"Basic !!", b"Bearer", b"Digest x", b""):
        assert credential(value) is None


def test_a_need_is_checked_against_the_names_the_query_gives() -> None:
    orders = state({"topic": "^orders$", "channels": [".*"], "permissions": ["publish", "subscribe"]},
                   {"topic": "^audit$", "channels": ["^archive$"], "permissions": ["subscribe", "admin"]})
    query = {"topic": "orders", "channel": "c"}
    assert allowed(ACCEPTED, orders, {})
    assert allowed(PUBLISH, orders, query) and allowed(SUBSCRIBE, orders, query)
    assert allowed(SUBSCRIBE_TOPIC, orders, query)
    assert not allowed(ADMIN_TOPIC, orders, query) and not allowed(ADMIN_NODE, orders, {})
    assert not allowed(PUBLISH, orders, {"topic": "audit"})
    assert allowed(ADMIN_CHANNEL, orders, {"topic": "audit", "channel": "archive"})
    assert not allowed(ADMIN_TOPIC, orders, {"topic": "audit"})  # the channel "" is not "archive"
    assert not allowed(SUBSCRIBE_TOPIC, orders, {"topic": "audit"})
    assert allowed(PUBLISH, orders, {}) and allowed(SUBSCRIBE, orders, {"topic": "x"})  # the handler's 400
    everything = state({"topic": ".*", "channels": [".*"], "permissions": ["admin"]})
    assert allowed(ADMIN_NODE, everything, {}) and not allowed(PUBLISH, everything, query)


def test_stats_show_the_topics_named_and_the_channels_subscribed_or_administered() -> None:
    identity = state({"topic": "^orders$", "channels": ["^archive$"], "permissions": ["subscribe"]},
                     {"topic": "^audit", "channels": [".*"], "permissions": ["admin"]})
    assert may_see(identity, "orders") and may_see(identity, "audit-log") and not may_see(identity, "payroll")
    assert may_see(identity, "orders", "archive") and not may_see(identity, "orders", "other")
    assert may_see(identity, "audit-log", "anything")


class Servers:
    """What the gate's client would get from the auth servers: one answer per call, counted."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.answer: AuthState | Exception = state({"topic": ".*", "channels": [".*"], "permissions": ["publish"]})
        self.delay = 0.0

    async def query(self, remote_ip: str, tls: bool, secret: str, common_name: str = "",
                    now: float | None = None, interface: str = "") -> AuthState:
        self.calls.append((secret, interface))
        await asyncio.sleep(self.delay)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def request(secret: str | None, need: Any = PUBLISH, query: str = "topic=t") -> Request:
    headers = [(b"Authorization", f"Bearer {secret}".encode())] if secret is not None else []
    built = Request("POST", f"/pub?{query}".encode(), headers)
    built.route = Route(lambda request: Response(), None, "/pub", need)
    built.authorization = headers[0][1] if headers else b""
    return built


async def outcome(gate: HTTPAuth, built: Request) -> Response | None:
    """The gate's answer to a request on a connection of its own: what is kept is the gate's, not a connection's."""
    admitted = gate.connection(PEER).admit(built)
    if admitted is None or isinstance(admitted, Response):
        return admitted
    return await admitted


def gate(servers: Servers, max_answers: int = 100) -> HTTPAuth:
    return HTTPAuth(servers, "nsqd", logging.getLogger("test"), max_answers)  # type: ignore[arg-type]


async def test_answers_are_kept_for_their_ttl_and_asked_about_the_http_interface() -> None:
    servers = Servers()
    guard = gate(servers)
    assert await outcome(guard, request("s")) is None
    assert guard.connection(PEER).admit(request("s")) is None  # kept: no question, no await
    assert servers.calls == [("s", "http")]
    servers.answer = state({"topic": ".*", "channels": [".*"], "permissions": ["publish"]}, ttl=1)
    assert await outcome(guard, request("short")) is None
    await asyncio.sleep(1.1)
    assert await outcome(guard, request("short")) is None
    assert [call for call in servers.calls if call[0] == "short"] == [("short", "http")] * 2


async def test_the_answers_of_the_gate() -> None:
    servers = Servers()
    guard = gate(servers)
    assert (await outcome(guard, request(None))).status == 401  # type: ignore[union-attr]
    assert await outcome(guard, request("s", OPEN)) is None and not servers.calls
    denied = await outcome(guard, request("s", SUBSCRIBE, "topic=t&channel=c"))
    assert denied is not None and (denied.status, json.loads(denied.body)) == (403, {"message": "AUTH_UNAUTHORIZED"})
    servers.answer = AuthError("connection refused")
    failed = await outcome(guard, request("other"))
    assert failed is not None and (failed.status, json.loads(failed.body)) == (502, {"message": "AUTH_ERROR"})
    await outcome(guard, request("other"))
    assert len([call for call in servers.calls if call[0] == "other"]) == 2  # an error is never kept
    servers.answer = AuthRefused("403")
    refused = await outcome(guard, request("bad"))
    assert refused is not None and (refused.status, json.loads(refused.body)) == (401, {"message": "AUTH_FAILED"})
    assert ("WWW-Authenticate", 'Bearer realm="nsqd", error="invalid_token"') in refused.headers
    for _ in range(3):
        assert guard.connection(PEER).admit(request("bad")) is refused  # kept briefly: the auth server is not asked
    assert len([call for call in servers.calls if call[0] == "bad"]) == 1
    servers.answer = state()  # a reply granting nothing is a refusal
    assert (await outcome(guard, request("empty"))).status == 401  # type: ignore[union-attr]


async def test_concurrent_requests_with_one_secret_ask_once_and_the_cache_is_bounded() -> None:
    servers = Servers()
    servers.delay = 0.05
    guard = gate(servers, max_answers=3)
    assert await asyncio.gather(*(outcome(guard, request("same")) for _ in range(20))) == [None] * 20
    assert servers.calls == [("same", "http")]
    servers.delay = 0
    for secret in ("a", "b", "c"):
        await outcome(guard, request(secret))
    await outcome(guard, request("same"))  # the oldest answer went to make room
    assert servers.calls.count(("same", "http")) == 2


@pytest.mark.parametrize("peer", [Peer("10.0.0.1", False, ""), Peer("127.0.0.1", True, ""),
                                  Peer("127.0.0.1", True, "client")])
async def test_an_answer_is_kept_for_the_question_it_answered(peer: Peer) -> None:
    servers = Servers()
    guard = gate(servers)
    await outcome(guard, request("s"))
    admitted = guard.connection(peer).admit(request("s"))
    assert admitted is not None and not isinstance(admitted, Response)
    assert await admitted is None
    assert len(servers.calls) == 2


async def test_a_connection_remembers_its_secret_until_the_answer_expires_and_decides_per_name() -> None:
    servers = Servers()
    servers.answer = state({"topic": "^t$", "channels": [".*"], "permissions": ["publish"]}, ttl=1)
    connection = gate(servers).connection(PEER)
    first = connection.admit(request("s"))
    assert first is not None and not isinstance(first, Response) and await first is None
    assert connection.admit(request("s")) is None
    denied = connection.admit(request("s", query="topic=other"))
    assert isinstance(denied, Response) and denied.status == 403
    changed = connection.admit(request("another"))  # another secret on the same connection is asked about
    assert changed is not None and not isinstance(changed, Response) and await changed is None
    await asyncio.sleep(1.1)
    again = connection.admit(request("another"))
    assert again is not None and not isinstance(again, Response)
    assert await again is None
    assert servers.calls == [("s", "http"), ("another", "http"), ("another", "http")]
