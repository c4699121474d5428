"""The asyncio side of protocol V2: one ``ConnectionV2`` per TCP client.

The connection feeds the bytes it receives to the client's ``SessionV2`` (``shared.protocol.session_v2``), which
parses them and checks every command against NSQ's rules, and acts on the requests that come out; the replies are
written once the received bytes are processed. What it needs of nsqd is a ``Broker`` (topics, and being told of
connections) and the ``ListenerContext`` every connection of the TCP listener shares.

After an IDENTIFY that negotiated them, ``upgrade`` switches the connection to TLS, then to snappy or deflate: from
then on ``data_received`` inflates what it reads through the codec (``inflate_with``).

A request that cannot be answered at once (AUTH, a command on a topic not started yet, the TLS handshake) makes the
session wait (``SessionV2.wait``): reading pauses, nothing after it is checked or run, and what was already read
stays in the session (or, compressed, in the codec's iterator) until the wait ends and it runs in order.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterator, Protocol, cast

from shared.addresses import join_host_port
from shared.protocol.compression import Codec, CompressionError
from shared.protocol.errors import ClientError, FatalClientError, ProtocolError
from shared.protocol.frames import CLOSE_WAIT, OK
from shared.protocol.session_v2 import (Auth, Close, CreateTopic, Finish, Identify, Limits, Publish, Ready,
                                        Reauthorize, Request, Requeue, SessionV2, Subscribe, Touch)

from . import auth, identify, upgrade
from .channel import Channel, ChannelError
from .client import Client, ClientDefaults, EndOfTurnFlush
from .heartbeat import Heartbeats
from .topic import Topic, TopicError

if TYPE_CHECKING:
    from shared.auth_reply import AuthState

    from .auth_client import AuthClient
    from .busy_poll import BusyPoll
    from .options import Options

# a request's answer: now, none, or once what it waits for is done (the connection reads on after it)
Reply = bytes | None | Awaitable[bytes | None]

log = logging.getLogger("nsqd")


class Broker(Protocol):
    """What a connection asks of nsqd while it runs."""

    def get_topic(self, name: str) -> Topic: ...

    def connected(self, connection: ConnectionV2) -> int:
        """Takes the connection into account; returns its client's id."""
        ...

    def disconnected(self, connection: ConnectionV2) -> None: ...


@dataclass(frozen=True)
class ListenerContext:
    """What every connection of the TCP listener shares: settings and the services they use."""

    opts: Options
    client_defaults: ClientDefaults
    tls_context: ssl.SSLContext | None
    auth_client: AuthClient | None
    flush: EndOfTurnFlush
    busy_poll: BusyPoll

    @cached_property
    def limits(self) -> Limits:
        """The flags each connection's session checks commands against (built once)."""
        opts = self.opts
        return Limits(opts.max_msg_size, opts.max_body_size, opts.max_rdy_count, int(opts.max_req_timeout * 1000),
                      opts.tls_required != "false", self.auth_client is not None)


class ConnectionV2(asyncio.Protocol):
    def __init__(self, broker: Broker, context: ListenerContext) -> None:
        self.broker = broker
        self.context = context
        self.session = SessionV2(context.limits)
        self.client: Client
        self.transport: asyncio.Transport
        self.heartbeats: Heartbeats
        self._loop = asyncio.get_running_loop()
        # set by FIN and REQ; the channel refills the client's window once per batch of received bytes
        self._window_changed = False
        self._inflate: Codec | None = None
        # compressed input read and not yet inflated: a request waits, and a small input may inflate enormously
        self._inflating: Iterator[bytes] | None = None
        # what the waiting request waits for (the auth server, a topic's start, the TLS handshake)
        self._wait: asyncio.Task[None] | None = None

    # -- connection lifecycle --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport but have its interface
        self.transport = cast(asyncio.Transport, transport)
        peer = self.transport.get_extra_info("peername")
        remote = join_host_port(peer[0], peer[1]) if isinstance(peer, tuple) else str(peer)
        self.client = Client(self.broker.connected(self), self.transport, remote, self.context.flush.request,
                             self.close, self.context.client_defaults, self.session)
        log.info("TCP: new client(%s)", remote)
        self.heartbeats = Heartbeats(self._loop, self.client)
        self.heartbeats.start()

    def connection_lost(self, exc: Exception | None) -> None:
        log.info("PROTOCOL(V2): [%s] exiting ioloop", self.client)
        self.session.disconnected()
        self.heartbeats.stop()
        if self._wait is not None:
            self._wait.cancel()
        self.client.disconnected()
        self.broker.disconnected(self)

    def close(self) -> None:
        """Flush and close; the client leaves its channel now, not when a peer that stopped reading lets the
        socket drain, and a socket that has not drained within a heartbeat interval is aborted."""
        client = self.client
        client.flush()
        self.session.closing()
        client.leave_channel()
        self.transport.close()
        if self.transport.get_write_buffer_size():
            self._loop.call_later(max(client.heartbeat_interval, 1.0), self.transport.abort)

    def pause_writing(self) -> None:
        self._set_write_paused(True)

    def resume_writing(self) -> None:
        self._set_write_paused(False)

    def _set_write_paused(self, paused: bool) -> None:
        """While the socket's send buffer is full, a consumer gets no more messages but its FINs are still read
        (until its replies pass ``_UNREAD_REPLIES_LIMIT``); anyone else stops being read from, so replies cannot
        pile up without bound. A client not read from is closed by its read deadline if it never drains."""
        client = self.client
        client.set_write_paused(paused)
        if paused and client.channel is None:
            self.transport.pause_reading()
        elif not paused and self._may_read():
            self.transport.resume_reading()

    def _limit_unread_replies(self) -> None:
        """A consumer that keeps sending but never reads would grow its replies (E_FIN_FAILED, OK) forever."""
        if self.client.write_paused and self.transport.get_write_buffer_size() > _UNREAD_REPLIES_LIMIT:
            self.transport.pause_reading()

    # -- bytes in --------------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self.heartbeats.last_read = self._loop.time()
        self.context.busy_poll.activity()
        if self._inflate is None:
            self._run(self.session.receive(data))
        else:
            inflated = self._inflate.decompress(data)
            self._inflating = inflated if self._inflating is None else itertools.chain(self._inflating, inflated)
        if self._inflating is not None:
            self._run_inflated()

    def _run_inflated(self) -> None:
        """Inflates compressed input piece by piece and runs each, until it is used up or a request waits (the rest
        stays compressed until the wait ends)."""
        assert self._inflating is not None
        try:
            while not self.session.waiting and not self.transport.is_closing():
                chunk = next(self._inflating, None)
                if chunk is None:
                    self._inflating = None
                    return
                self._run(self.session.receive(chunk))
        except CompressionError as error:
            self._inflating = None
            log.error("[%s] - %s", self.client, error)
            self.close()

    def inflate_with(self, codec: Codec) -> None:
        """What is received is compressed from here on, and so is what the session held since the IDENTIFY."""
        self._inflate = codec
        if held := self.session.take_held():
            self._inflating = codec.decompress(held)

    def _run(self, requests: Iterator[Request]) -> None:
        """Acts on requests in order until one has to wait (the session then holds the rest back)."""
        client = self.client
        try:
            for request in requests:
                try:
                    reply = _HANDLERS[request.__class__](self, request)
                except ClientError as error:
                    self._answer_error(error)
                    continue
                if reply is None:
                    continue
                if reply.__class__ is not bytes:  # it waits for something (the auth server, a topic's start)
                    self.wait_for(self._answer_when_done(cast(Awaitable[bytes | None], reply)))
                    return
                client.queue_response(reply)
        except ProtocolError as error:
            self._answer_error(error)
            self.close()
            return
        except Exception:
            # a bug of ours: the client still gets the replies to what came before, then the connection ends
            log.exception("[%s] - failed to process a command", client)
            self.close()
            return
        if self._window_changed:
            self._window_changed = False
            client.update_ready()
        client.flush()
        if client.write_paused:
            self._limit_unread_replies()

    def _answer_error(self, error: ProtocolError) -> None:
        log.error("[%s] - %s", self.client, error)
        self.client.queue_error(error.frame_text)

    def wait_for(self, work: Awaitable[None]) -> None:
        """Nothing more is read, checked or run until ``work`` is done, and then what was read meanwhile runs."""
        self.session.wait()
        self.client.flush()
        self.transport.pause_reading()
        self._wait = asyncio.ensure_future(work)
        self._wait.add_done_callback(self._waited)

    def _waited(self, wait: asyncio.Future[None]) -> None:
        self._wait = None
        if wait.cancelled():
            return
        if (error := wait.exception()) is not None:
            # a bug of ours: the client still gets the replies to what came before, then the connection ends
            log.error("[%s] - failed to process a command", self.client, exc_info=error)
            self.close()
            return
        if self.transport.is_closing():
            return
        self._run(self.session.resume())
        if self._inflating is not None:
            self._run_inflated()
        if self._may_read():
            self.transport.resume_reading()

    def _may_read(self) -> bool:
        """Whether reading may go on: no request waits, and the client is not one that backpressure stops reading
        (a producer whose replies are not read, or a consumer past ``_UNREAD_REPLIES_LIMIT``)."""
        client = self.client
        if self.session.waiting or self.transport.is_closing():
            return False
        return not client.write_paused or (client.channel is not None
                                           and self.transport.get_write_buffer_size() <= _UNREAD_REPLIES_LIMIT)

    async def _answer_when_done(self, work: Awaitable[bytes | None]) -> None:
        """A request's answer once what it waits for is done; a refusal closes the connection."""
        try:
            reply = await work
        except ProtocolError as error:
            self._answer_error(error)
            self.close()
            return
        if reply is not None:
            self.client.queue_response(reply)

    # -- AUTH ------------------------------------------------------------------------------------------------

    async def _query_auth(self, secret: str) -> AuthState:
        auth_client = self.context.auth_client
        assert auth_client is not None
        state = await auth.query(auth_client, self.client, secret)
        self.session.authenticated(state)
        return state

    # -- requests (checked by the session: they only act) ------------------------------------------------------

    def _identify(self, request: Identify) -> Reply:
        client, context = self.client, self.context
        identity = identify.negotiate(request.body, context.opts, client, context.tls_context is not None)
        client.identify(identity)
        self.session.identified(identity.heartbeat_interval)
        self.heartbeats.restart()
        if not identity.feature_negotiation:
            return OK
        reply = identify.response(identity, context.opts, auth_required=context.auth_client is not None)
        if not (identity.tls_v1 or identity.snappy or identity.deflate):
            return reply
        client.queue_response(reply)
        client.flush()
        upgrade.start(self, identity)
        return None

    async def _authenticate(self, request: Auth) -> bytes:
        state = await self._query_auth(request.secret.decode("utf-8", "surrogateescape"))
        if not state.authorizations:
            raise FatalClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
        return auth.auth_response(state)

    async def _reauthorize(self, request: Reauthorize) -> None:
        """Authorizations past their TTL are asked for again with the same secret before the command runs."""
        await self._query_auth(self.client.auth_secret)

    def _subscribe(self, request: Subscribe) -> Reply:
        topic = self.broker.get_topic(request.topic)
        try:
            self.client.subscribe(topic.get_channel(request.channel))
        except ChannelError as error:
            raise FatalClientError("E_SUB_FAILED", f"SUB failed {error}") from None
        return topic.when_started(OK)

    def _ready(self, request: Ready) -> None:
        self.client.set_ready(request.ready_count)

    def _finish(self, request: Finish) -> None:
        client = self.client
        finish = self._channel().finish
        self._window_changed = True
        for msg_id in request.ids:
            try:
                finish(client, msg_id)
            except ChannelError as error:
                self._answer_error(ClientError("E_FIN_FAILED", f"FIN {_text(msg_id)} failed {error}"))

    def _requeue(self, request: Requeue) -> None:
        try:
            self._channel().requeue(self.client, request.id, request.delay_ms / 1000)
        except ChannelError as error:
            raise ClientError("E_REQ_FAILED", f"REQ {_text(request.id)} failed {error}") from None
        self._window_changed = True

    def _touch(self, request: Touch) -> None:
        try:
            self._channel().touch(self.client, request.id)
        except ChannelError as error:
            raise ClientError("E_TOUCH_FAILED", f"TOUCH {_text(request.id)} failed {error}") from None

    def _close_subscription(self, request: Close) -> bytes:
        self.client.start_close()
        return CLOSE_WAIT

    def _publish(self, request: Publish) -> Reply:
        topic = self.broker.get_topic(request.topic)
        try:
            topic.publish(request.bodies, request.defer_ms)
        except TopicError as error:
            raise FatalClientError(f"E_{request.command}_FAILED", f"{request.command} failed {error}") from None
        self.client.published(request.topic, len(request.bodies))
        return topic.when_started(OK)

    def _create_topic(self, request: CreateTopic) -> None:
        self.broker.get_topic(request.topic)

    def _channel(self) -> Channel:
        assert self.client.channel is not None
        return self.client.channel


# how much a consumer whose socket does not drain may have waiting to be written before nsqd stops reading it
_UNREAD_REPLIES_LIMIT = 4 * 1024 * 1024


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")


_HANDLERS: dict[type, Callable[[ConnectionV2, Any], Reply]] = {
    Publish: ConnectionV2._publish,
    Finish: ConnectionV2._finish,
    Ready: ConnectionV2._ready,
    Requeue: ConnectionV2._requeue,
    Touch: ConnectionV2._touch,
    Subscribe: ConnectionV2._subscribe,
    Close: ConnectionV2._close_subscription,
    Identify: ConnectionV2._identify,
    Auth: ConnectionV2._authenticate,
    Reauthorize: ConnectionV2._reauthorize,
    CreateTopic: ConnectionV2._create_topic,
}
