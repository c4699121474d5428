"""The HTTP APIs of nsqd and lookupd answering to the auth server (``--http-auth-required``).

- The secret comes as ``Authorization: Bearer <secret>``, or as the password of ``Basic`` authentication (``curl -u
  any:<secret>``, a browser's prompt).
- Every route names what it ``Need``s: nothing (``/ping``, ``/info``, lookupd's ``/lookup``), any secret the auth
  server accepts, or a permission: ``publish`` or ``subscribe`` on the topic (and channel) its query names, or
  ``admin`` on them or, for what concerns the whole node, on the topic and channel ``""`` (which ``.*`` matches, as a
  publish is checked against the channel ``""`` in NSQ). A request that names no topic or channel where its route
  needs one is left to its handler's own 400.
- The auth server is asked as for a TCP AUTH, plus ``interface=http``; its answers are kept, keyed by a digest of
  the secret and what else was asked (the remote address, TLS, the certificate's common name), for their TTL, in one
  bounded cache per service; a refusal is kept for ``REFUSAL_SECONDS``, so that a flood of bad secrets is not a
  flood on the auth server, and concurrent requests with one secret ask once.
- Answers: no secret, 401 ``AUTH_REQUIRED``; a secret refused (401 or 403 from every auth server, or a reply
  granting nothing), 401 ``AUTH_FAILED`` (both with ``WWW-Authenticate`` naming Basic and Bearer, RFC 6750);
  an identity asking for what it may not, 403 ``AUTH_UNAUTHORIZED``; no auth server reachable or none answering a
  valid reply, 502 ``AUTH_ERROR``: never an open door.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable
from typing import TYPE_CHECKING, NamedTuple

from shared.auth_reply import AuthError, AuthRefused, AuthState
from shared.http_router import Request, Response, error_response, json_document

if TYPE_CHECKING:
    from shared.auth_client import AuthClient

MAX_ANSWERS = 10_000
REFUSAL_SECONDS = 2.0


class Need(NamedTuple):
    """What a route asks of a request's identity: ``permission`` ``""`` (nothing, not even a secret), ``"any"`` (an
    accepted secret), ``publish``, ``subscribe`` or ``admin``, on the ``scope`` its query names: ``node``,
    ``topic`` or ``channel``."""

    permission: str
    scope: str = "node"

    def describe(self) -> str:
        """As the README's route table says it."""
        if not self.permission:
            return "open"
        if self.permission == "any":
            return "any accepted secret"
        return f"{self.permission} on the {self.scope}"


OPEN = Need("")
ACCEPTED = Need("any")
PUBLISH = Need("publish", "topic")
SUBSCRIBE_TOPIC = Need("subscribe", "topic")
SUBSCRIBE = Need("subscribe", "channel")
ADMIN_NODE = Need("admin")
ADMIN_TOPIC = Need("admin", "topic")
ADMIN_CHANNEL = Need("admin", "channel")


def identity_answer(request: Request) -> Response:
    """``GET /auth``: what the auth server named this request's secret, as nsqd answers a TCP AUTH (the admin
    records it with each action); 404 ``AUTH_DISABLED`` from a service without ``--http-auth-required``."""
    state = request.identity
    if state is None:
        return error_response(404, "AUTH_DISABLED")
    return json_document({"identity": state.identity, "identity_url": state.identity_url,
                          "permission_count": len(state.authorizations)})


class Peer(NamedTuple):
    """What the auth server is told of a connection."""

    remote_ip: str
    tls: bool
    common_name: str


def credential(authorization: bytes) -> str | None:
    """The secret in an ``Authorization`` header's value, None when it carries none."""
    scheme, _, rest = authorization.strip().partition(b" ")
    scheme, rest = scheme.lower(), rest.strip()
    if scheme == b"bearer":
        secret = rest
    elif scheme == b"basic":
        try:
            secret = base64.b64decode(rest, validate=True).partition(b":")[2]
        except (binascii.Error, ValueError):
            return None
    else:
        return None
    return secret.decode("utf-8", "surrogateescape") or None


def allowed(need: Need, state: AuthState, query: dict[str, str]) -> bool:
    """Whether ``state`` grants what ``need`` asks for the names in ``query``."""
    if need.permission == "any":
        return True
    if need.scope == "node":
        return state.allows("", "", need.permission)
    topic = query.get("topic")
    channel = "" if need.scope == "topic" else query.get("channel")
    if topic is None or channel is None:
        return True  # the handler answers its 400 MISSING_ARG_...
    return state.allows(topic, channel, need.permission)


def may_see(state: AuthState, topic: str, channel: str | None = None) -> bool:
    """Whether stats show ``state`` the topic (one an authorization names) or the channel (one it may subscribe to
    or administer)."""
    if channel is None:
        return state.names_topic(topic)
    return state.allows(topic, channel, "subscribe") or state.allows(topic, channel, "admin")


class HTTPAuth:
    """One service's gate: asks the auth servers through ``client`` and keeps their answers."""

    def __init__(self, client: AuthClient, realm: str, log: logging.Logger, max_answers: int = MAX_ANSWERS) -> None:
        self._client = client
        self._log = log
        self._max_answers = max_answers
        # an identity, or the time.time() a refusal ends; the oldest entry goes first when full
        self._answers: OrderedDict[bytes, AuthState | float] = OrderedDict()
        self._asking: dict[bytes, asyncio.Task[AuthState]] = {}
        challenges = (("WWW-Authenticate", f'Basic realm="{realm}", charset="UTF-8"'),)
        self._required = error_response(401, "AUTH_REQUIRED", headers=(
            *challenges, ("WWW-Authenticate", f'Bearer realm="{realm}"')))
        self._failed = error_response(401, "AUTH_FAILED", headers=(
            *challenges, ("WWW-Authenticate", f'Bearer realm="{realm}", error="invalid_token"')))
        self.unauthorized = error_response(403, "AUTH_UNAUTHORIZED")
        self._error = error_response(502, "AUTH_ERROR")

    def connection(self, peer: Peer) -> ConnectionGate:
        """The gate of one connection from ``peer``."""
        return ConnectionGate(self, peer)

    def admit(self, request: Request, connection: ConnectionGate) -> Response | Awaitable[Response | None] | None:
        """None when the request may go on (its ``identity`` set), the refusal to answer, or what to await for
        either when the auth server must be asked."""
        assert request.route is not None
        need = request.route.need
        if not request.authorization:
            return self._required
        secret = credential(request.authorization)
        if secret is None:
            return self._required
        peer = connection.peer
        key = hashlib.sha256("\0".join((secret, *map(str, peer))).encode("utf-8", "surrogateescape")).digest()
        answer = self._answers.get(key)
        if answer is not None:
            if isinstance(answer, AuthState):
                if not answer.is_expired(time.time()):
                    return connection.granted(request, need, answer)
            elif answer > time.time():
                return self._failed
            del self._answers[key]
        return self._ask(request, need, key, secret, connection)

    async def _ask(self, request: Request, need: Need, key: bytes, secret: str,
                   connection: ConnectionGate) -> Response | None:
        task = self._asking.get(key)
        if task is None:
            task = self._asking[key] = asyncio.get_running_loop().create_task(
                self._query(key, secret, connection.peer))
            task.add_done_callback(lambda done: self._asked(key, done))
        try:
            state = await asyncio.shield(task)
        except AuthRefused:
            return self._failed
        except AuthError:
            return self._error
        return connection.granted(request, need, state)

    async def _query(self, key: bytes, secret: str, peer: Peer) -> AuthState:
        try:
            state = await self._client.query(peer.remote_ip, peer.tls, secret, peer.common_name, interface="http")
            if not state.authorizations:
                raise AuthRefused("the reply grants nothing")
        except AuthRefused as refused:
            self._log.warning("HTTP: auth refused for %s - %s", peer.remote_ip, refused)
            self._keep(key, time.time() + REFUSAL_SECONDS)
            raise
        except AuthError as error:
            # never kept: the next request asks again, as the auth server may be back
            self._log.error("HTTP: no auth server answered for %s - %s", peer.remote_ip, error)
            raise
        self._keep(key, state)
        return state

    def _asked(self, key: bytes, task: asyncio.Task[AuthState]) -> None:
        self._asking.pop(key, None)
        if not task.cancelled():
            task.exception()  # retrieved here, whoever waited for it has gone

    def _keep(self, key: bytes, answer: AuthState | float) -> None:
        self._answers[key] = answer
        while len(self._answers) > self._max_answers:
            self._answers.popitem(last=False)


class ConnectionGate:
    """One connection's side of the gate: the peer the auth server is told of, and the identity its last secret was
    granted, with what it was found to allow: a keep-alive client sends one secret with every request, which then
    costs a comparison and a lookup."""

    MAX_DECISIONS = 256

    def __init__(self, gate: HTTPAuth, peer: Peer) -> None:
        self.gate = gate
        self.peer = peer
        self._authorization = b""
        self._state: AuthState | None = None
        self._decisions: dict[tuple[Need, str | None, str | None], bool] = {}

    def admit(self, request: Request) -> Response | Awaitable[Response | None] | None:
        """As ``HTTPAuth.admit``."""
        assert request.route is not None
        need = request.route.need
        if not need.permission:
            return None
        state = self._state
        if state is not None and request.authorization == self._authorization and state.expires_at >= time.time():
            return self._decide(request, need, state)
        return self.gate.admit(request, self)

    def granted(self, request: Request, need: Need, state: AuthState) -> Response | None:
        if state is not self._state:
            self._state, self._decisions = state, {}
        self._authorization = request.authorization
        return self._decide(request, need, state)

    def _decide(self, request: Request, need: Need, state: AuthState) -> Response | None:
        request.identity = state
        query = request.query
        asked = (need, query.get("topic"), query.get("channel"))
        decision = self._decisions.get(asked)
        if decision is None:
            if len(self._decisions) >= self.MAX_DECISIONS:
                self._decisions.clear()
            decision = self._decisions[asked] = allowed(need, state, query)
        return None if decision else self.gate.unauthorized
