"""What nsqd does for each request a V2 session lets through: one handler per request type, found in ``HANDLERS``.

The session (``shared.protocol.session_v2``) has checked every rule by the time a handler runs, so a handler only
acts: on the broker's topics and channels (PUB, MPUB, DPUB, SUB), on the client's window (RDY, FIN, REQ, TOUCH,
CLS), on its settings (IDENTIFY, whose TLS and compression are ``upgrade``'s) or on its authorizations (AUTH, asked
of the auth servers through ``auth.query``).

A handler returns its ``Reply``: the bytes to answer now, None for no answer, or an awaitable the connection waits
for before it reads on (the auth server, a topic that is not started yet). It raises ``ClientError`` for an error
answered on an open connection (E_FIN_FAILED, E_REQ_FAILED, E_TOUCH_FAILED) and ``FatalClientError`` for one that
closes it. FIN and REQ set the connection's ``window_changed``: the channel refills the client's window once per
batch of received bytes, not once per message.

A handler sees its connection as a ``Connection``: the broker, the client, the listener's settings, and the few
things it may ask of the connection itself.

Dispatch costs one dict lookup and one call per request (``HANDLERS[request.__class__](connection, request)``): the
handlers are plain functions, so a producer's PUB passes through no further layer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Protocol

from nsqclient.protocol.frames import CLOSE_WAIT, OK
from shared.protocol.errors import ClientError, FatalClientError
from shared.protocol.session_v2 import (
    Auth,
    Close,
    CreateTopic,
    Finish,
    Identify,
    Publish,
    Ready,
    Reauthorize,
    Requeue,
    Subscribe,
    Touch,
)

from . import auth, identify, upgrade
from .channel import ChannelError
from .topic import ReplicationError, Topic, TopicError

if TYPE_CHECKING:
    import ssl

    from nsqclient.protocol.compression import Codec
    from shared.auth_reply import AuthState
    from shared.protocol.errors import ProtocolError

    from shared.auth_client import AuthClient
    from .channel import Channel
    from .client import Client
    from .listener_context import Broker
    from .options import Options

# a request's answer: now, none, or once what it waits for is done (the connection reads on after it)
Reply = bytes | None | Awaitable[bytes | None]


class Connection(Protocol):
    """What a handler (and ``upgrade``) may ask of the connection its request came on (``ConnectionV2``)."""

    broker: Broker
    client: Client
    window_changed: bool  # FIN and REQ set it: the client's window is refilled once the bytes received are run

    @property
    def opts(self) -> Options: ...

    @property
    def tls_context(self) -> ssl.SSLContext | None: ...

    @property
    def auth_client(self) -> AuthClient | None: ...

    def identified(self, heartbeat_interval: float) -> None:
        """The client's IDENTIFY took effect: its heartbeats and read deadline follow it."""

    def authenticated(self, state: AuthState) -> None: ...

    def answer_error(self, error: ProtocolError) -> None:
        """An error answered on the open connection."""

    def wait_for(self, work: Awaitable[None]) -> None:
        """Nothing more is read or run until ``work`` is done."""

    def drop_held(self) -> int:
        """Drops the bytes received since the IDENTIFY and not run (before a TLS handshake); how many."""

    async def switch_to_tls(self, handshake_timeout: float) -> bool:
        """The TLS handshake on this connection; False if it failed (the connection is aborted)."""

    def inflate_with(self, codec: Codec) -> None:
        """What is received is compressed from here on."""


# -- the client's settings and authorizations --------------------------------------------------------------------

def identify_client(connection: Connection, request: Identify) -> Reply:
    client, opts = connection.client, connection.opts
    identity = identify.negotiate(request.body, opts, client, connection.tls_context is not None)
    client.identify(identity)
    connection.identified(identity.heartbeat_interval)
    if not identity.feature_negotiation:
        return OK
    reply = identify.response(identity, opts, auth_required=connection.auth_client is not None)
    if not (identity.tls_v1 or identity.snappy or identity.deflate):
        return reply
    client.queue_response(reply)
    client.flush()
    upgrade.start(connection, identity)
    return None


async def authenticate(connection: Connection, request: Auth) -> bytes:
    state = await _query_auth(connection, _text(request.secret))
    if not state.authorizations:
        raise FatalClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
    return auth.auth_response(state)


async def reauthorize(connection: Connection, request: Reauthorize) -> None:
    """Authorizations past their TTL are asked for again with the same secret before the command runs."""
    await _query_auth(connection, connection.client.auth_secret)


async def _query_auth(connection: Connection, secret: str) -> AuthState:
    auth_client = connection.auth_client
    assert auth_client is not None
    state = await auth.query(auth_client, connection.client, secret)
    connection.authenticated(state)
    return state


# -- topics and channels -----------------------------------------------------------------------------------------

def publish(connection: Connection, request: Publish) -> Reply:
    topic = connection.broker.get_topic(request.topic)
    try:
        replicated = topic.publish(request.bodies, request.defer_ms)
    except TopicError as error:
        raise FatalClientError(f"E_{request.command}_FAILED", f"{request.command} failed {error}") from None
    if replicated is not None:
        return _once_replicated(connection, request, topic, asyncio.ensure_future(replicated))
    connection.client.published(request.topic, len(request.bodies))
    return topic.when_started(OK)


def _once_replicated(connection: Connection, request: Publish, topic: Topic,
                     replicated: asyncio.Future[None]) -> asyncio.Future[bytes]:
    """OK once the mirrors hold the publish; too few copies fail it as a refused write does. Callbacks rather than
    a task: a task per publish would cost as much again as the rest of the wait."""
    answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def copied(_: asyncio.Future[None]) -> None:
        if answer.done():  # cancelled: the connection went away
            return
        if replicated.cancelled():
            answer.cancel()
            return
        error = replicated.exception()
        if isinstance(error, ReplicationError):
            answer.set_exception(FatalClientError(f"E_{request.command}_FAILED", f"{request.command} failed {error}"))
        elif error is not None:
            answer.set_exception(error)
        else:
            connection.client.published(request.topic, len(request.bodies))
            reply = topic.when_started(OK)
            if isinstance(reply, bytes):
                answer.set_result(reply)
            else:
                asyncio.ensure_future(reply).add_done_callback(
                    lambda started: None if answer.done() else answer.set_result(started.result()))

    replicated.add_done_callback(copied)
    return answer


def create_topic(connection: Connection, request: CreateTopic) -> None:
    connection.broker.get_topic(request.topic)


def subscribe(connection: Connection, request: Subscribe) -> Reply:
    topic = connection.broker.get_topic(request.topic)
    try:
        connection.client.subscribe(topic.get_channel(request.channel))
    except ChannelError as error:
        raise FatalClientError("E_SUB_FAILED", f"SUB failed {error}") from None
    return topic.when_started(OK)


# -- the client's window ------------------------------------------------------------------------------------------

def set_ready(connection: Connection, request: Ready) -> None:
    connection.client.set_ready(request.ready_count)


def finish(connection: Connection, request: Finish) -> None:
    connection.window_changed = True

    def refuse(msg_id: bytes, reason: str) -> None:
        connection.answer_error(ClientError("E_FIN_FAILED", f"FIN {_text(msg_id)} failed {reason}"))

    _channel(connection).finish_all(connection.client, request.ids, refuse)


def requeue(connection: Connection, request: Requeue) -> None:
    try:
        _channel(connection).requeue(connection.client, request.id, request.delay_ms / 1000)
    except ChannelError as error:
        raise ClientError("E_REQ_FAILED", f"REQ {_text(request.id)} failed {error}") from None
    connection.window_changed = True


def touch(connection: Connection, request: Touch) -> None:
    try:
        _channel(connection).touch(connection.client, request.id)
    except ChannelError as error:
        raise ClientError("E_TOUCH_FAILED", f"TOUCH {_text(request.id)} failed {error}") from None


def close_subscription(connection: Connection, request: Close) -> bytes:
    connection.client.start_close()
    return CLOSE_WAIT


def _channel(connection: Connection) -> Channel:
    channel = connection.client.channel
    assert channel is not None  # the session lets FIN, REQ and TOUCH through only once subscribed
    return channel


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


HANDLERS: dict[type, Callable[[Connection, Any], Reply]] = {
    Publish: publish,
    Finish: finish,
    Ready: set_ready,
    Requeue: requeue,
    Touch: touch,
    Subscribe: subscribe,
    Close: close_subscription,
    Identify: identify_client,
    Auth: authenticate,
    Reauthorize: reauthorize,
    CreateTopic: create_topic,
}
