"""The asyncio side of protocol V2: one ``ConnectionV2`` per TCP client, the loop that moves its bytes.

The connection feeds the bytes it receives to the client's ``SessionV2`` (``shared.protocol.session_v2``), which
parses them and checks every command against NSQ's rules, hands each request that comes out to its handler
(``commands_v2.HANDLERS``) and writes the replies once the received bytes are processed. What it needs of nsqd is a
``Broker`` (topics, and being told of connections) and the ``ListenerContext`` every connection of the TCP listener
shares. Besides that loop it owns:

- waiting: a request that cannot be answered at once (AUTH, a command on a topic not started yet, the TLS handshake
  of an ``upgrade``) makes the session wait (``SessionV2.wait``): reading pauses, nothing after it is checked or
  run, and what was already read stays in the session (or, compressed, in the codec's iterator) until the wait ends
  and it runs in order;
- publishes answered in order (``_answers``): a publish that waits for its copies on the mirrors (or for its topic to
  start) does not hold up the publishes after it, which go into their topics and to the mirrors meanwhile, so a
  producer that sends several before reading the answers gets one round trip to the mirrors for all of them; any
  other request waits until the publishes before it are answered;
- compressed input, once ``upgrade`` switched to snappy or deflate: inflated piece by piece, each piece run before
  the next is inflated, so a small input that inflates enormously stops at a wait or when the connection closes;
- backpressure: while the socket's send buffer is full, what is read from the client is limited.

Its ``Heartbeats`` (``heartbeat.py``) send heartbeats and close a client that went silent.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections import deque
from typing import TYPE_CHECKING, Awaitable, Iterator, Protocol, cast

from nsqclient.addresses import join_host_port
from nsqclient.protocol.compression import Codec, CompressionError
from shared.protocol.errors import ClientError, ProtocolError
from shared.protocol.session_v2 import CreateTopic, Limits, Publish, Request, SessionV2

from .client import Client, ClientDefaults, EndOfTurnFlush
from .commands_v2 import HANDLERS
from .heartbeat import Heartbeats
from .topic import Topic

if TYPE_CHECKING:  # the auth client brings aiohttp, imported only once a configuration asks for it
    from .auth_client import AuthClient
    from .busy_poll import BusyPoll
    from .options import Options

log = logging.getLogger("nsqd")


class Broker(Protocol):
    """What a connection asks of nsqd while it runs."""

    def get_topic(self, name: str) -> Topic: ...

    def connected(self, connection: ConnectionV2) -> int:
        """Takes the connection into account; returns its client's id."""
        ...

    def disconnected(self, connection: ConnectionV2) -> None: ...


class ListenerContext:
    """What every connection of the TCP listener shares: settings and the services they use. (A plain class: a
    compiled dataclass would need the types of its fields imported at run time.)"""

    def __init__(self, opts: Options, client_defaults: ClientDefaults, tls_context: ssl.SSLContext | None,
                 auth_client: AuthClient | None, flush: EndOfTurnFlush, busy_poll: BusyPoll) -> None:
        self.opts = opts
        self.client_defaults = client_defaults
        self.tls_context = tls_context
        self.auth_client = auth_client
        self.flush = flush
        self.busy_poll = busy_poll
        # the flags each connection's session checks commands against
        self.limits = Limits(opts.max_msg_size, opts.max_body_size, opts.max_rdy_count,
                             int(opts.max_req_timeout * 1000), opts.tls_required != "false", auth_client is not None)


class ConnectionV2(asyncio.Protocol):
    """One client's TCP connection. Besides the ``asyncio.Protocol`` callbacks, it offers the handlers of
    ``commands_v2`` and ``upgrade`` ``answer_error``, ``window_changed``, ``wait_for``, ``heartbeats``,
    ``inflate_with`` and the ``transport`` a TLS upgrade replaces."""

    def __init__(self, broker: Broker, context: ListenerContext) -> None:
        self.broker = broker
        self.context = context
        self.session = SessionV2(context.limits)
        self.client: Client
        self.transport: asyncio.Transport
        self.heartbeats: Heartbeats
        self._loop = asyncio.get_running_loop()
        # set by FIN and REQ; the channel refills the client's window once per batch of received bytes
        self.window_changed = False
        self._inflate: Codec | None = None
        # compressed input read and not yet inflated: a request waits, and a small input may inflate enormously
        self._inflating: Iterator[bytes] | None = None
        # what the waiting request waits for (the auth server, a topic's start, the TLS handshake)
        self._wait: asyncio.Task[None] | None = None
        # publishes not answered yet, oldest first; a request that is not a publish waits for them (``_postponed``)
        self._answers: deque[asyncio.Future[bytes | None]] = deque()
        self._all_answered: asyncio.Future[None] | None = None
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

    def connection_lost(self, exc: Exception | None) -> None:
        log.info("PROTOCOL(V2): [%s] exiting ioloop", self.client)
        self.session.disconnected()
        self.heartbeats.stop()
        if self._wait is not None:
            self._wait.cancel()
        for answer in self._answers:
            answer.cancel()
        self._answers.clear()
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
        answers = self._answers
        try:
            for request in requests:
                if answers:  # publishes still to be answered: this one's answer goes after theirs
                    kind = request.__class__
                    if kind is CreateTopic:  # a publish whose body is refused: its error follows, in order
                        HANDLERS[kind](self, request)
                        continue
                    if kind is not Publish or len(answers) >= PUBLISHES_IN_FLIGHT:
                        self._postponed = request
                        self.wait_for(self._until_answered())
                        return
                    # refused: the error is answered in order below, and nothing after it runs
                    self._answer_in_order(HANDLERS[kind](self, request))
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
                        self._answer_in_order(reply)
                        continue
                    self.wait_for(self._answer_when_done(cast(Awaitable[bytes | None], reply)))
                    return
                client.queue_response(reply)
        except ProtocolError as error:
            if answers:  # answered, and the connection closed, once the publishes before it are
                self.session.wait()
                self.transport.pause_reading()
                self._answer_in_order(error)
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

    def _answer_in_order(self, reply: object) -> None:
        """``reply`` (bytes, an awaitable or an error) is written once every earlier publish is answered."""
        if isinstance(reply, (bytes, ProtocolError)) or reply is None:
            answer: asyncio.Future[bytes | None] = self._loop.create_future()
            if isinstance(reply, ProtocolError):
                answer.set_exception(reply)
            else:
                answer.set_result(reply)
        else:
            answer = asyncio.ensure_future(cast(Awaitable[bytes | None], reply))
        self._answers.append(answer)
        answer.add_done_callback(self._answered)

    def _answered(self, _: asyncio.Future[bytes | None]) -> None:
        """Writes the answers that are ready, oldest first; a refusal closes the connection."""
        answers, client = self._answers, self.client
        if self.transport.is_closing():
            return
        while answers and answers[0].done():
            answer = answers.popleft()
            # only this connection cancels its answers, once they are out of the queue: anything else is a bug
            error = answer.exception() if not answer.cancelled() else asyncio.CancelledError("answer cancelled")
            if error is None:
                if (reply := answer.result()) is not None:
                    client.queue_response(reply)
            elif isinstance(error, ClientError):
                self.answer_error(error)
            else:
                if isinstance(error, ProtocolError):
                    self.answer_error(error)
                else:
                    log.error("[%s] - failed to process a command", client, exc_info=error)
                # the publishes after it were taken: unanswered, a retry makes duplicates, never a loss
                for later in answers:
                    later.cancel()
                answers.clear()
                self.close()
                break
        client.flush()
        if not answers and self._all_answered is not None and not self._all_answered.done():
            self._all_answered.set_result(None)

    async def _until_answered(self) -> None:
        if self._answers:
            self._all_answered = self._loop.create_future()
            await self._all_answered

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
