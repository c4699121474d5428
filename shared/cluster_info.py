"""Reading the cluster over HTTP, as NSQ's ``internal/clusterinfo`` does for nsqd, nsqadmin and the tools: lookupd's
``/topics``, ``/channels``, ``/lookup`` and ``/nodes``, nsqd's ``/stats``, ``/info`` and ``/config`` (and, beyond
NSQ, its ``/topic/peek``, ``/channel/peek`` and ``/channel/replay``), and the POSTs of nsqadmin's actions.

A ``ClusterInfo`` sends every request on one aiohttp session, its own (``ClusterInfo.open``, with NSQ's
``--http-client-connect-timeout`` and ``--http-client-request-timeout``) or one it is given, and with its ``secret``
(``--http-client-auth-secret-file``) as ``Authorization: Bearer`` for nsqds and lookupds that ask for one
(``--http-auth-required``); their refusals are errors that say so. It asks for NSQ's V1
answers (bare JSON) and unwraps the ``{"status_code", "data"}`` envelope that lookupds and nsqds older than 1.0
answer with anyway. Whatever goes wrong with one request (refused, timed out, not 200, not JSON of the expected
shape) is a ``ClusterInfoError`` naming the URL, with the HTTP ``status`` when there was an answer: lookupd answers
``/lookup`` of a topic it does not know with 404. What a failed host means is the caller's decision;
``gather_answers`` asks several at once and hands back each answer or its error.

An address is ``host:port``, or a URL (``http://`` or ``https://``) as the tools accept for lookupds. A producer,
an entry of ``/lookup`` and ``/nodes``, is lookupd's JSON object, checked to have ``broadcast_address``,
``tcp_port`` and ``http_port``; ``tcp_address`` names it as clients connect to it, ``http_address`` as nsqadmin
and the tools ask it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

import aiohttp

from nsqclient.addresses import join_host_port
from nsqclient.errors import describe
from nsqclient.lookupd import http_url
from nsqclient.protocol.names import go_quote

from .http_conventions import ACCEPT_V1

Json = dict[str, Any]
T = TypeVar("T")

_HEADERS = {"Accept": ACCEPT_V1}
_BODY_IN_ERRORS = 200  # characters of a failed answer's body quoted in its error
# what an nsqd or lookupd under --http-auth-required means by its refusals
_AUTH_REFUSALS = {
    "AUTH_REQUIRED": "it asks for a secret (--http-auth-required) and none was sent: give one with "
                     "--http-client-auth-secret-file",
    "AUTH_FAILED": "its auth server refused the secret sent",
    "AUTH_UNAUTHORIZED": "the identity of the secret sent may not do this (its auth server's permissions)",
    "AUTH_ERROR": "it could not ask its auth server about the secret sent",
}


def _error_code(text: str) -> str:
    try:
        document = json.loads(text)
    except ValueError:
        return ""
    return str(document.get("message", "")) if isinstance(document, dict) else ""


class ClusterInfoError(Exception):
    """One request that got no usable answer; ``status`` is the HTTP status when the host answered."""

    def __init__(self, url: str, reason: str, status: int | None = None, method: str = "GET") -> None:
        super().__init__(f"{url}: {reason}" if method == "GET" else f"{method} {url}: {reason}")
        self.url = url
        self.reason = reason
        self.status = status


class ClusterInfo:
    """lookupd's and nsqd's HTTP APIs on one session; ``close()`` closes the session only if it is its own."""

    def __init__(self, session: aiohttp.ClientSession, *, owns_session: bool = False, secret: str = "") -> None:
        self._session = session
        self._owns_session = owns_session
        # sent to nsqd and lookupd only, never on the session (which may also reach graphite or a webhook)
        self._headers = {**_HEADERS, "Authorization": f"Bearer {secret}"} if secret else _HEADERS

    @classmethod
    def open(cls, connect_timeout: float, request_timeout: float, user_agent: str = "",
             secret: str = "") -> ClusterInfo:
        """A client with a session of its own (to be opened inside the running loop)."""
        timeout = aiohttp.ClientTimeout(total=request_timeout, sock_connect=connect_timeout)
        headers = {"User-Agent": user_agent} if user_agent else None
        return cls(aiohttp.ClientSession(timeout=timeout, headers=headers), owns_session=True, secret=secret)

    async def close(self) -> None:
        if self._owns_session:
            await self._session.close()

    async def __aenter__(self) -> ClusterInfo:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- lookupd -------------------------------------------------------------------------------------------------

    async def topics(self, lookupd: str) -> list[str]:
        """Every topic the lookupd knows."""
        url = http_url(lookupd, "/topics")
        return _strings(await self._get(url), "topics", url)

    async def channels(self, lookupd: str, topic: str) -> list[str]:
        """The channels the lookupd knows for ``topic``."""
        url = http_url(lookupd, "/channels", {"topic": topic})
        return _strings(await self._get(url), "channels", url)

    async def producers(self, lookupd: str, topic: str) -> list[Json]:
        """The nsqd that have ``topic`` (``/lookup``); a topic the lookupd does not know fails with status 404."""
        url = http_url(lookupd, "/lookup", {"topic": topic})
        return _producers(await self._get(url), url)

    async def nodes(self, lookupd: str) -> list[Json]:
        """Every nsqd registered with the lookupd, with its topics (``/nodes``)."""
        url = http_url(lookupd, "/nodes")
        return _producers(await self._get(url), url)

    async def identity(self, address: str) -> str:
        """What the auth server of an nsqd or lookupd under ``--http-auth-required`` named this client's secret
        (``GET /auth``)."""
        url = http_url(address, "/auth")
        identity = (await self._get(url)).get("identity")
        if not isinstance(identity, str):
            raise ClusterInfoError(url, "no identity in the answer")
        return identity

    # --- nsqd ----------------------------------------------------------------------------------------------------

    async def stats(self, nsqd: str, topic: str = "", channel: str = "", include_clients: bool = False) -> Json:
        """nsqd's ``/stats?format=json``, narrowed to ``topic`` and ``channel`` when given."""
        query = {"format": "json", "topic": topic, "channel": channel,
                 "include_clients": "true" if include_clients else "false"}
        return await self._get(http_url(nsqd, "/stats", {key: value for key, value in query.items() if value}))

    async def info(self, nsqd: str) -> Json:
        """nsqd's ``/info``: its version, broadcast address and ports."""
        return await self._get(http_url(nsqd, "/info"))

    async def config(self, nsqd: str, option: str) -> Any:
        """One of nsqd's options as its ``GET /config/<option>`` answers it, by NSQ's config name (``id``: its
        ``--node-id``); an nsqd of any version answers."""
        url = http_url(nsqd, f"/config/{option}")
        return _decoded(await self._request("GET", url), url)

    async def peek(self, nsqd: str, topic: str, channel: str = "", count: int = 10, queue: str = "") -> list[Json]:
        """Up to ``count`` messages queued in the channel (the topic's own queue without ``channel``; its dead
        letters with ``queue="dead"``), as nsqd's peek answers them: ``id``, ``timestamp``, ``attempts``, ``body``
        (base64). An nsqd without the route (NSQ's own) fails with status 404."""
        query = {"topic": topic, "channel": channel, "n": str(count), "queue": queue}
        path = "/channel/peek" if channel else "/topic/peek"
        url = http_url(nsqd, path, {key: value for key, value in query.items() if value})
        messages = (await self._get(url)).get("messages")
        if not isinstance(messages, list) or not all(_is_peeked(message) for message in messages):
            raise ClusterInfoError(url, "messages are not objects with id, timestamp, attempts and body")
        return messages

    # --- actions -------------------------------------------------------------------------------------------------

    async def post(self, address: str, path: str, **query: str) -> None:
        """An action on a lookupd or an nsqd (``/topic/create``, ``/channel/pause``, ...), answered 200."""
        url = http_url(address, path, query)
        await self._request("POST", url)

    async def replay(self, nsqd: str, topic: str, channel: str) -> int:
        """Beyond NSQ: every dead letter of the channel back to it (nsqd's ``POST /channel/replay``); how many."""
        url = http_url(nsqd, "/channel/replay", {"topic": topic, "channel": channel})
        replayed = (await self._get(url, "POST")).get("replayed")
        if type(replayed) is not int:
            raise ClusterInfoError(url, "replayed is not a number", method="POST")
        return replayed

    async def rewind(self, nsqd: str, topic: str, channel: str, since: str) -> int:
        """Beyond NSQ: what the topic retains since ``since`` back into the channel (nsqd's ``POST
        /channel/rewind``); how many messages."""
        url = http_url(nsqd, "/channel/rewind", {"topic": topic, "channel": channel, "since": since})
        rewound = (await self._get(url, "POST")).get("rewound")
        if type(rewound) is not int:
            raise ClusterInfoError(url, "rewound is not a number", method="POST")
        return rewound

    # --- one request ---------------------------------------------------------------------------------------------

    async def _get(self, url: str, method: str = "GET") -> Json:
        """The JSON object answered to ``method`` (a GET unless an action answers one)."""
        document = _decoded(await self._request(method, url), url, method)
        if isinstance(document, dict) and "status_code" in document and isinstance(document.get("data"), dict):
            document = document["data"]  # the envelope of NSQ before 1.0
        if not isinstance(document, dict):
            raise ClusterInfoError(url, "not a JSON object", method=method)
        return document

    async def _request(self, method: str, url: str) -> bytes:
        try:
            async with self._session.request(method, url, headers=self._headers) as response:
                body = await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as error:
            reason = "timed out" if isinstance(error, TimeoutError) else describe(error)
            raise ClusterInfoError(url, reason, method=method) from None
        if response.status != 200:
            text = body.decode("utf-8", "surrogateescape").strip()[:_BODY_IN_ERRORS]
            reason = f"got response {response.status} {response.reason} {go_quote(text)}"
            refusal = _AUTH_REFUSALS.get(_error_code(text)) if response.status in (401, 403, 502) else None
            raise ClusterInfoError(url, f"{refusal} ({reason})" if refusal else reason, response.status, method)
        return body


async def gather_answers(calls: Iterable[Awaitable[T]]) -> list[T | ClusterInfoError]:
    """Runs the calls at once: each one's result, or the ClusterInfoError it failed with, in order. Any other
    exception is raised."""
    answers: list[T | ClusterInfoError] = []
    for outcome in await asyncio.gather(*calls, return_exceptions=True):
        if isinstance(outcome, BaseException) and not isinstance(outcome, ClusterInfoError):
            raise outcome
        answers.append(outcome)
    return answers


def tcp_address(producer: Json) -> str:
    """``broadcast_address:tcp_port``: where clients connect to the nsqd, and how they tell nsqd apart."""
    return join_host_port(producer["broadcast_address"], producer["tcp_port"])


def http_address(producer: Json) -> str:
    """``broadcast_address:http_port``: where nsqadmin and the tools ask the nsqd."""
    return join_host_port(producer["broadcast_address"], producer["http_port"])


def _decoded(body: bytes, url: str, method: str = "GET") -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as error:
        raise ClusterInfoError(url, f"invalid JSON - {describe(error)}", method=method) from None


def _strings(document: Json, key: str, url: str) -> list[str]:
    values = document.get(key) or []
    if not isinstance(values, list) or not all(isinstance(value, str) for value in values):
        raise ClusterInfoError(url, f"{key} is not a list of strings")
    return values


def _producers(document: Json, url: str) -> list[Json]:
    producers = document.get("producers") or []
    if not isinstance(producers, list) or not all(_is_producer(producer) for producer in producers):
        raise ClusterInfoError(url, "producers are not objects with broadcast_address, tcp_port and http_port")
    return producers


def _is_producer(producer: Any) -> bool:
    return (isinstance(producer, dict) and isinstance(producer.get("broadcast_address"), str)
            and all(type(producer.get(port)) is int for port in ("tcp_port", "http_port")))


def _is_peeked(message: Any) -> bool:
    return (isinstance(message, dict) and isinstance(message.get("id"), str) and isinstance(message.get("body"), str)
            and all(type(message.get(count)) is int for count in ("timestamp", "attempts")))
