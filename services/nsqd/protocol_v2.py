"""The asyncio side of protocol V2: one ``ConnectionV2`` per TCP client, the loop that moves its bytes.

The connection feeds the bytes it receives to the client's ``SessionV2`` (``shared.protocol.session_v2``), which
parses them and checks every command against NSQ's rules, hands each request that comes out to its handler
(``commands_v2.HANDLERS``: they see it as ``commands_v2.Connection``) and writes the replies once the received bytes
are processed. What it needs of nsqd is a ``Broker`` and the ``ListenerContext`` every connection of the TCP
listener shares (listener_context.py). Besides that loop it owns:

- waiting: a request that cannot be answered at once (AUTH, a command on a topic not started yet, the TLS handshake
  of an ``upgrade``) makes the session wait (``SessionV2.wait``): reading pauses, nothing after it is checked or
  run, and what was already read stays in the session (or, compressed, in the codec's iterator) until the wait ends
  and it runs in order;
- publishes answered in order (publish_answers.py); any other request waits until the publishes before it are
  answered;
- compressed input, once ``upgrade`` switched to snappy or deflate (compressed_input.py);
- backpressure: while the socket's send buffer is full, what is read from the client is limited.

Its ``Heartbeats`` (``heartbeat.py``) send heartbeats and close a client that went silent.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from typing import TYPE_CHECKING, Awaitable, Iterator, cast

from nsqclient.addresses import join_host_port
from nsqclient.protocol.compression import Codec, CompressionError
from shared.protocol.errors import ClientError, ProtocolError
from shared.protocol.session_v2 import CreateTopic, Publish, Request, SessionV2

from .client import Client
from .commands_v2 import HANDLERS
from .compressed_input import CompressedInput
from .heartbeat import Heartbeats
from .listener_context import Broker, ListenerContext
from .publish_answers import PublishAnswers
from .relayed import RelayedTransport

if TYPE_CHECKING:
    from shared.auth_reply import AuthState

log = logging.getLogger("nsqd")


class ConnectionV2(asyncio.Protocol):
    """One client's TCP connection: the ``asyncio.Protocol`` callbacks, and what ``commands_v2.Connection`` says
    a handler may ask of it."""

    def __init__(self, broker: Broker, context: ListenerContext) -> None:
        self.broker = broker
        self.context = context
        self.opts, self.tls_context, self.auth_client = context.opts, context.tls_context, context.auth_client
        self.session = SessionV2(context.limits)
        self.client: Client
        self.transport: asyncio.Transport
        self.heartbeats: Heartbeats
        self._loop = asyncio.get_running_loop()
        # set by FIN and REQ; the channel refills the client's window once per batch of received bytes
        self.window_changed = False
        self._compressed: CompressedInput | None = None
        # what the waiting request waits for (the auth server, a topic's start, the TLS handshake)
        self._wait: asyncio.Task[None] | None = None
        # publishes not answered yet; a request that is not a publish waits for them (``_postponed``)
        self._answers: PublishAnswers
        self._postponed: Request | None = None

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
        self._answers = PublishAnswers(self)

    def connection_lost(self, exc: Exception | None) -> None:
        log.info("PROTOCOL(V2): [%s] exiting ioloop", self.client)
        self.session.disconnected()
        self.heartbeats.stop()
        if self._wait is not None:
            self._wait.cancel()
        self._answers.cancel()
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

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    # -- what a handler may ask (commands_v2.Connection) ------------------------------------------------------

    def identified(self, heartbeat_interval: float) -> None:
        self.session.identified(heartbeat_interval)
        self.heartbeats.restart()

    def authenticated(self, state: AuthState) -> None:
        self.session.authenticated(state)

    def drop_held(self) -> int:
        return self.session.drop_held()

    async def switch_to_tls(self, handshake_timeout: float) -> bool:
        context = self.context.tls_context
        assert context is not None
        if isinstance(self.transport, RelayedTransport):  # the worker holding the socket hand-shakes
            if not await self.transport.start_tls(handshake_timeout):
                log.error("[%s] - E_IDENTIFY_FAILED IDENTIFY failed TLS handshake", self.client)
                return False
            transport: asyncio.Transport | None = self.transport
        else:
            try:
                transport = await self._loop.start_tls(self.transport, self, context, server_side=True,
                                                       ssl_handshake_timeout=handshake_timeout)
            except (OSError, ssl.SSLError, TimeoutError) as error:
                log.error("[%s] - E_IDENTIFY_FAILED IDENTIFY failed TLS handshake - %s", self.client, error)
                self.transport.abort()
                return False
        if transport is None:
            return False
        self.transport = transport
        self.client.upgraded_to_tls(transport)
        self.session.upgraded_to_tls()
        return True

    # -- backpressure ----------------------------------------------------------------------------------------

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
        if self._compressed is None:
            self._run(self.session.receive(data))
        else:
            self._compressed.feed(data)
            self._run_inflated()

    def _run_inflated(self) -> None:
        """Runs compressed input piece by piece, until it is used up or a request waits."""
        compressed, session = self._compressed, self.session
        assert compressed is not None
        try:
            while not session.waiting and not self.transport.is_closing():
                if (piece := compressed.next_piece()) is None:
                    return
                self._run(session.receive(piece))
        except CompressionError as error:
            log.error("[%s] - %s", self.client, error)
            self.close()

    def inflate_with(self, codec: Codec) -> None:
        """What is received is compressed from here on, and so is what the session held since the IDENTIFY."""
        self._compressed = CompressedInput(codec, self.session.take_held())

    def _run(self, requests: Iterator[Request]) -> None:
        """Acts on requests in order until one has to wait (the session then holds the rest back)."""
        client = self.client
        answers = self._answers
        try:
            for request in requests:
                if len(answers):  # publishes still to be answered: this one's answer goes after theirs
                    kind = request.__class__
                    if kind is CreateTopic:  # a publish whose body is refused: its error follows, in order
                        HANDLERS[kind](self, request)
                        continue
                    if kind is not Publish or len(answers) >= PUBLISHES_IN_FLIGHT:
                        self._postponed = request
                        self.wait_for(answers.all_answered())
                        return
                    # refused: the error is answered in order below, and nothing after it runs
                    answers.add(HANDLERS[kind](self, request))
                    continue
                try:
                    reply = HANDLERS[request.__class__](self, request)
                except ClientError as error:
                    self.answer_error(error)
                    continue
                if reply is None:
                    continue
                if reply.__class__ is not bytes:  # it waits for something (the mirrors, the auth server, ...)
                    if request.__class__ is Publish:  # the publishes after it go on meanwhile
                        answers.add(reply)
                        continue
                    self.wait_for(self._answer_when_done(cast(Awaitable[bytes | None], reply)))
                    return
                client.queue_response(reply)
        except ProtocolError as error:
            if answers:  # answered, and the connection closed, once the publishes before it are
                self.session.wait()
                self.transport.pause_reading()
                answers.add(error)
                return
            self.answer_error(error)
            self.close()
            return
        except Exception:
            # a bug of ours: the client still gets the replies to what came before, then the connection ends
            log.exception("[%s] - failed to process a command", client)
            self.close()
            return
        if self.window_changed:
            self.window_changed = False
            client.update_ready()
        client.flush()
        if client.write_paused:
            self._limit_unread_replies()

    def answer_error(self, error: ProtocolError) -> None:
        log.error("[%s] - %s", self.client, error)
        self.client.queue_error(error.frame_text)

    # -- waiting ---------------------------------------------------------------------------------------------

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
        requests = self.session.resume()
        if self._postponed is not None:
            requests, self._postponed = itertools.chain((self._postponed,), requests), None
        self._run(requests)
        if self._compressed is not None:
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
            self.answer_error(error)
            self.close()
            return
        if reply is not None:
            self.client.queue_response(reply)


# publishes of one connection waiting for their copies at once; the next request waits until all are answered
PUBLISHES_IN_FLIGHT = 256
# how much a consumer whose socket does not drain may have waiting to be written before nsqd stops reading it
_UNREAD_REPLIES_LIMIT = 4 * 1024 * 1024
