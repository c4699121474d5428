"""nsqd's AUTH: the auth server's reply as NSQ validates it, what it allows, and the client that asks the servers
(against real HTTP servers on loopback ports)."""

from __future__ import annotations

import asyncio
import json
import random
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import trustme
from aiohttp import web

from harness.processes import free_port
from services.nsqd.auth import auth_response
from shared.auth_client import AuthClient, endpoint
from shared.auth_reply import AuthError, Authorization, AuthState, parse_auth_reply
from tests.unit.http_hosts import serve_on_loopback

NOW = 1_700_000_000.0
REPLY: dict[str, Any] = {
    "ttl": 3600, "identity": "billing", "identity_url": "https://example.com/billing",
    "authorizations": [{"topic": "^orders$", "channels": [".*"], "permissions": ["subscribe", "publish"]}],
}


def reply(**changes: Any) -> str:
    return json.dumps({**REPLY, **changes})


def authorization(topic: str, channels: Any, permissions: Any) -> dict[str, Any]:
    return {"topic": topic, "channels": channels, "permissions": permissions}


# --- the reply ---------------------------------------------------------------------------------------------------

def test_a_good_reply_is_cached_until_now_plus_ttl() -> None:
    state = parse_auth_reply(reply().encode(), NOW)
    assert (state.identity, state.identity_url, state.expires_at) == ("billing", "https://example.com/billing",
                                                                      NOW + 3600)
    [granted] = state.authorizations
    assert (granted.topic.pattern, [c.pattern for c in granted.channels]) == ("^orders$", [".*"])
    assert granted.permissions == {"subscribe", "publish"}


@pytest.mark.parametrize(("body", "message"), [
    (reply(authorizations=[authorization(".*", [".*"], ["subscribe", "admin"])]), "unknown permission admin"),
    (reply(authorizations=[authorization(".*", [".*"], ["Publish"])]), "unknown permission Publish"),
    (reply(authorizations=[authorization("(", [".*"], ["publish"])]), 'unable to compile topic "("'),
    (reply(authorizations=[authorization(".*", ["ok", "[z-a]"], ["publish"])]), 'unable to compile channel "[z-a]"'),
    (reply(ttl=0), "invalid TTL 0 (must be >0)"),
    (reply(ttl=-5), "invalid TTL -5 (must be >0)"),
    # NSQ checks the authorizations first
    (reply(ttl=0, authorizations=[authorization(".*", [], ["x"])]), "unknown permission x"),
    ("not json", "invalid JSON reply"),
    ("", "invalid JSON reply"),
    (reply() + " {}", "invalid JSON reply"),
    ('{"ttl": NaN}', "invalid JSON reply"),
    ("[]", "cannot unmarshal array"),
    ('"x"', "cannot unmarshal string"),
    (reply(ttl="3600"), "cannot unmarshal string into Go struct field auth.State.ttl of type int"),
    (reply(ttl=3600.0), "cannot unmarshal number 3600.0"),
    (reply(ttl=True), "cannot unmarshal bool"),
    (reply(ttl=1 << 63), "of type int"),
    (reply(identity=7), "auth.State.identity of type string"),
    (reply(authorizations={}), "cannot unmarshal object into Go struct field auth.State.authorizations"),
    (reply(authorizations=["x"]), "cannot unmarshal string"),
    (reply(authorizations=[authorization(".*", ".*", ["publish"])]), "channels of type []string"),
    (reply(authorizations=[authorization(".*", [1], ["publish"])]), "cannot unmarshal number 1"),
])
def test_a_reply_nsq_refuses_is_an_auth_error(body: str, message: str) -> None:
    with pytest.raises(AuthError) as raised:
        parse_auth_reply(body, NOW)
    assert message in str(raised.value)


@pytest.mark.parametrize("body", [
    json.dumps({key: value for key, value in REPLY.items() if key != "ttl"}),
    "{}",
    "null",
    reply(ttl=None),
])
def test_a_missing_ttl_is_zero(body: str) -> None:
    with pytest.raises(AuthError, match=r"invalid TTL 0 \(must be >0\)"):
        parse_auth_reply(body, NOW)


def test_fields_are_decoded_as_gos_encoding_json_does() -> None:
    """Missing and null fields keep their zero value, keys match case-insensitively (the last one wins, a null
    changes nothing), unknown keys are ignored."""
    state = parse_auth_reply('{"TTL": 5, "ttl": null, "Identity": "a", "identity": "b", "extra": [1, {}], '
                             '"authorizations": [{"topic": "t", "channels": null, "permissions": ["publish"]}]}', NOW)
    assert (state.expires_at, state.identity, state.identity_url) == (NOW + 5, "b", "")
    # a null permission is the empty string, which is not a permission
    with pytest.raises(AuthError, match="unknown permission $"):
        parse_auth_reply(reply(authorizations=[{"topic": "t", "channels": [], "permissions": [None]}]), NOW)


def test_a_reply_without_authorizations_is_valid_and_allows_nothing() -> None:
    """nsqd then answers AUTH with E_UNAUTHORIZED, which is its decision, not a failed query."""
    state = parse_auth_reply('{"ttl": 60, "identity": "nobody"}', NOW)
    assert state.authorizations == ()
    assert not state.allows("t", "", "publish")


def test_invalid_utf8_in_the_reply_is_read_as_replacement_characters() -> None:
    state = parse_auth_reply(b'{"ttl": 1, "identity": "a\xffb"}', NOW)
    assert state.identity == "a\ufffdb"


# --- what a state allows ---------------------------------------------------------------------------------------

def state_of(*authorizations: dict[str, Any], ttl: int = 60) -> AuthState:
    return parse_auth_reply(reply(ttl=ttl, authorizations=list(authorizations)), NOW)


@pytest.mark.parametrize(("topic", "channel", "permission", "allowed"), [
    ("orders", "shipping", "subscribe", True),
    ("orders", "", "publish", True),
    ("orders", "shipping", "touch", False),
    ("xordersx", "shipping", "subscribe", True),  # unanchored: "orders" is found inside
    ("ORDERS", "shipping", "subscribe", False),
    ("order", "shipping", "subscribe", False),
])
def test_regexes_are_unanchored(topic: str, channel: str, permission: str, allowed: bool) -> None:
    state = state_of(authorization("orders", ["."], ["subscribe"]), authorization("orders", [""], ["publish"]))
    assert state.allows(topic, channel, permission) is allowed


def test_publishing_needs_a_channel_regex_that_matches_the_empty_channel() -> None:
    state = state_of(authorization("^t$", ["^c$", "."], ["publish", "subscribe"]))
    assert state.allows("t", "c", "subscribe")
    assert not state.allows("t", "", "publish")  # neither "^c$" nor "." matches ""
    assert state_of(authorization("^t$", ["^c$", "^$"], ["publish"])).allows("t", "", "publish")


def test_the_topic_and_one_channel_must_both_match() -> None:
    state = state_of(authorization("^t$", ["^a$", "^b$"], ["subscribe"]))
    assert state.allows("t", "b", "subscribe")
    assert not state.allows("t", "c", "subscribe")
    assert not state.allows("u", "a", "subscribe")
    assert not state_of(authorization(".*", [], ["subscribe"])).allows("t", "a", "subscribe")


def test_any_authorization_may_allow() -> None:
    state = state_of(authorization("^a$", [".*"], ["publish"]), authorization("^b$", [".*"], ["subscribe"]))
    assert state.allows("a", "", "publish") and state.allows("b", "c", "subscribe")
    assert not state.allows("a", "c", "subscribe") and not state.allows("b", "", "publish")


def test_an_authorization_is_a_value() -> None:
    [granted] = state_of(authorization("^t$", [".*"], ["publish"])).authorizations
    assert isinstance(granted, Authorization) and hash(granted) == hash(granted)
    assert granted.allows("t", "", "publish")


def test_a_state_expires_after_its_ttl() -> None:
    state = state_of(ttl=10)
    assert not state.is_expired(NOW)
    assert not state.is_expired(NOW + 10)
    assert state.is_expired(NOW + 10.001)


def test_the_auth_ok_reply_is_nsqs_compact_json() -> None:
    state = state_of(authorization("a", ["b"], ["publish"]), authorization("c", ["d"], ["subscribe"]))
    assert auth_response(state) == (b'{"identity":"billing","identity_url":"https://example.com/billing",'
                                    b'"permission_count":2}')
    state.identity, state.identity_url = "<b>&ü", ""
    assert auth_response(state) == '{"identity":"\\u003cb\\u003e\\u0026ü","identity_url":"","permission_count":2}' \
        .encode()


# --- the client, against real servers ---------------------------------------------------------------------------

def test_an_address_is_host_port_or_a_full_url() -> None:
    assert endpoint("127.0.0.1:4181") == "http://127.0.0.1:4181/auth"
    assert endpoint("[::1]:4181") == "http://[::1]:4181/auth"
    assert endpoint("https://auth.example.com/nsq/check") == "https://auth.example.com/nsq/check"


@dataclass
class Seen:
    method: str
    path: str
    raw_query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Authd:
    """A real auth server on a loopback port that records each request and answers ``status`` and ``body``
    (a hanging one only once released)."""

    status: int = 200
    body: str = field(default_factory=reply)
    hang: bool = False
    release: asyncio.Event = field(default_factory=asyncio.Event)
    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        self.seen.append(Seen(request.method, request.path, request.rel_url.raw_query_string, dict(request.headers),
                              await request.read()))
        if self.hang:
            await self.release.wait()
        return web.Response(status=self.status, text=self.body, content_type="application/json")


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[Authd]]]:
    runners: list[tuple[web.AppRunner, Authd]] = []

    async def start(**settings: Any) -> Authd:
        authd = Authd(**settings)
        runner, authd.port = await serve_on_loopback(authd.handle)
        runners.append((runner, authd))
        return authd

    yield start
    for runner, authd in runners:
        authd.release.set()
        await runner.cleanup()


class FirstAsked(random.Random):
    """Starts the rotation at a chosen address instead of a random one."""

    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def randrange(self, *args: Any, **kwargs: Any) -> int:
        return self.index


@pytest.fixture
async def clients() -> AsyncIterator[Callable[..., AuthClient]]:
    made: list[AuthClient] = []

    def make(addresses: list[str], method: str = "get", start: int = 0, **settings: Any) -> AuthClient:
        client = AuthClient(addresses, method, rng=FirstAsked(start), **settings)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def test_get_sends_nsqs_query(serve: Callable[..., Awaitable[Authd]],
                                    clients: Callable[..., AuthClient]) -> None:
    authd = await serve()
    state = await clients([authd.address]).query("10.0.0.7", True, "s3 cr/et&=", "client.example", now=NOW)
    assert state.identity == "billing" and state.expires_at == NOW + 3600
    [seen] = authd.seen
    assert (seen.method, seen.path, seen.body) == ("GET", "/auth", b"")
    # Go's url.Values.Encode: keys sorted, QueryEscape (space as +)
    assert seen.raw_query == "common_name=client.example&remote_ip=10.0.0.7&secret=s3+cr%2Fet%26%3D&tls=true"
    assert seen.headers["Accept"] == "application/vnd.nsq; version=1.0"


async def test_post_sends_the_values_as_json_lists(serve: Callable[..., Awaitable[Authd]],
                                                   clients: Callable[..., AuthClient]) -> None:
    authd = await serve()
    await clients([authd.address], "post").query("1.2.3.4", False, "s<e>cret", "")
    [seen] = authd.seen
    assert (seen.method, seen.path, seen.raw_query) == ("POST", "/auth", "")
    assert seen.body == (b'{"common_name":[""],"remote_ip":["1.2.3.4"],"secret":["s\\u003ce\\u003ecret"],'
                         b'"tls":["false"]}')
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers["Accept"] == "application/vnd.nsq; version=1.0"


async def test_a_secret_that_is_not_utf8_is_sent_as_go_sends_it(serve: Callable[..., Awaitable[Authd]],
                                                               clients: Callable[..., AuthClient]) -> None:
    authd = await serve()
    secret = b"\xff\xfeok".decode("utf-8", errors="surrogateescape")
    await clients([authd.address]).query("1.2.3.4", False, secret, "")
    assert "secret=%FF%FEok" in authd.seen[0].raw_query
    # Go's json.Marshal writes each invalid byte as an escaped replacement character
    await clients([authd.address], "post").query("1.2.3.4", False, secret, "")
    assert b'"secret":["\\ufffd\\ufffdok"]' in authd.seen[1].body


async def test_expiry_counts_from_the_answer_by_default(serve: Callable[..., Awaitable[Authd]],
                                                        clients: Callable[..., AuthClient]) -> None:
    authd = await serve(body=reply(ttl=2))
    before = time.time()
    state = await clients([authd.address]).query("1.2.3.4", False, "s", "")
    assert before + 2 <= state.expires_at <= time.time() + 2


async def test_a_full_url_is_used_as_is(serve: Callable[..., Awaitable[Authd]],
                                        clients: Callable[..., AuthClient]) -> None:
    authd = await serve()
    for method in ("get", "post"):
        await clients([f"http://127.0.0.1:{authd.port}/custom/nsq-auth"], method).query("1.2.3.4", False, "s", "")
    assert [(seen.method, seen.path) for seen in authd.seen] == [("GET", "/custom/nsq-auth"),
                                                                 ("POST", "/custom/nsq-auth")]
    assert authd.seen[0].raw_query.startswith("common_name=&remote_ip=1.2.3.4")


async def test_the_first_address_down_the_next_is_asked(serve: Callable[..., Awaitable[Authd]],
                                                        clients: Callable[..., AuthClient]) -> None:
    authd = await serve()
    state = await clients([f"127.0.0.1:{free_port()}", authd.address]).query("1.2.3.4", False, "s", "")
    assert state.identity == "billing" and len(authd.seen) == 1


async def test_the_rotation_starts_at_the_random_index_and_wraps(serve: Callable[..., Awaitable[Authd]],
                                                                 clients: Callable[..., AuthClient]) -> None:
    first, second, third = await serve(status=500), await serve(status=500), await serve()
    client = clients([third.address, first.address, second.address], start=1)
    await client.query("1.2.3.4", False, "s", "")
    assert (len(first.seen), len(second.seen), len(third.seen)) == (1, 1, 1)
    # the third address in the list was asked last: it wrapped around
    await clients([first.address, third.address], start=1).query("1.2.3.4", False, "s", "")
    assert (len(first.seen), len(third.seen)) == (1, 2)


async def test_the_start_is_random_by_default(serve: Callable[..., Awaitable[Authd]]) -> None:
    servers = [await serve(), await serve()]
    client = AuthClient([authd.address for authd in servers], rng=random.Random(7))
    try:
        for _ in range(20):
            await client.query("1.2.3.4", False, "s", "")
    finally:
        await client.close()
    assert all(authd.seen for authd in servers)


async def test_all_down_is_one_error_naming_each(serve: Callable[..., Awaitable[Authd]],
                                                 clients: Callable[..., AuthClient]) -> None:
    refused = f"127.0.0.1:{free_port()}"
    failing = await serve(status=500, body="boom")
    invalid = await serve(body=reply(authorizations=[authorization(".*", [".*"], ["admin"])]))
    with pytest.raises(AuthError) as raised:
        await clients([refused, failing.address, invalid.address]).query("1.2.3.4", False, "s", "")
    parts = str(raised.value).split("; ")
    assert [part.split(" - ")[0] for part in parts] == [f"failed to auth against {address}" for address in
                                                        (refused, failing.address, invalid.address)]
    assert parts[1].endswith(' - got response 500 Internal Server Error "boom"')
    assert parts[2].endswith(" - unknown permission admin")
    assert "secret" not in str(raised.value)


@pytest.fixture
def certificate_authority() -> trustme.CA:
    return trustme.CA()


async def serve_https(ca: trustme.CA, authd: Authd) -> web.AppRunner:
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", authd.handle)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context).start()
    authd.port = runner.addresses[0][1]
    return runner


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def test_an_https_url_is_verified_against_the_given_context(certificate_authority: trustme.CA,
                                                                   clients: Callable[..., AuthClient]) -> None:
    authd = Authd()
    runner = await serve_https(certificate_authority, authd)
    try:
        url = f"https://127.0.0.1:{authd.port}/auth"
        state = await clients([url], ssl_context=client_context(certificate_authority)).query("1.2.3.4", True, "s")
        assert state.identity == "billing"
        with pytest.raises(AuthError, match="certificate verify failed"):
            await clients([url]).query("1.2.3.4", True, "s")  # the system's CAs do not know this one
    finally:
        await runner.cleanup()


async def test_a_403_naming_an_https_port_is_asked_again_over_https(certificate_authority: trustme.CA,
                                                                    serve: Callable[..., Awaitable[Authd]],
                                                                    clients: Callable[..., AuthClient]) -> None:
    secure = Authd()
    runner = await serve_https(certificate_authority, secure)
    try:
        plain = await serve(status=403, body=json.dumps({"https_port": secure.port}))
        client = clients([plain.address], ssl_context=client_context(certificate_authority))
        assert (await client.query("1.2.3.4", False, "s", "cn")).identity == "billing"
        assert len(plain.seen) == 1
        [seen] = secure.seen
        assert (seen.path, seen.raw_query) == ("/auth", plain.seen[0].raw_query)
        # over POST the body is sent again
        await clients([plain.address], "post", ssl_context=client_context(certificate_authority)).query(
            "1.2.3.4", False, "s", "cn")
        assert secure.seen[1].body == plain.seen[1].body != b""
    finally:
        await runner.cleanup()


async def test_a_403_without_an_https_port_is_not_retried(serve: Callable[..., Awaitable[Authd]],
                                                          clients: Callable[..., AuthClient]) -> None:
    for body in ('{"https_port": 0}', '{"message": "NOT_AUTHORIZED"}', "denied"):
        authd = await serve(status=403, body=body)
        with pytest.raises(AuthError, match="got response 403 Forbidden"):
            await clients([authd.address]).query("1.2.3.4", False, "s")
        assert len(authd.seen) == 1


async def test_a_slow_server_times_out_and_the_next_is_asked(serve: Callable[..., Awaitable[Authd]],
                                                             clients: Callable[..., AuthClient]) -> None:
    slow, fast = await serve(hang=True), await serve()
    client = clients([slow.address, fast.address], request_timeout=0.2)
    state = await client.query("1.2.3.4", False, "s", "")
    assert state.identity == "billing" and len(slow.seen) == 1


async def test_a_given_session_is_used_and_left_open(serve: Callable[..., Awaitable[Authd]]) -> None:
    authd = await serve()
    async with aiohttp.ClientSession() as session:
        client = AuthClient([authd.address], session=session)
        await client.query("1.2.3.4", False, "s", "")
        await client.close()
        assert not session.closed
        with pytest.raises(RuntimeError, match="closed"):
            await client.query("1.2.3.4", False, "s", "")


async def test_an_own_session_is_opened_lazily_and_closed() -> None:
    client = AuthClient([f"127.0.0.1:{free_port()}"])
    with pytest.raises(AuthError):
        await client.query("1.2.3.4", False, "s", "")
    await client.close()
    await client.close()  # closing twice is harmless


@pytest.mark.parametrize(("addresses", "method"), [([], "get"), (["a:1"], "GET"), (["a:1"], "put")])
def test_a_client_needs_addresses_and_a_known_method(addresses: list[str], method: str) -> None:
    with pytest.raises(ValueError):
        AuthClient(addresses, method)
