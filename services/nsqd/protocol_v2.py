"""The asyncio side of protocol V2: one ``ConnectionV2`` per TCP client.

The connection checks the magic, feeds bytes to the sans-I/O ``CommandParser``, runs each command's handler on
the parsed values and writes the replies once the received bytes are processed. Handlers check in NSQ's
order and raise ``ProtocolError``s with NSQ's codes and texts; a fatal one closes the connection.

After an IDENTIFY that negotiated them, the connection upgrades in NSQ's order, each step confirmed by an ``OK``:
TLS (``loop.start_tls`` on the same transport), then snappy or deflate (a codec that ``data_received`` inflates
through and ``Client.flush`` compresses through).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import TYPE_CHECKING, Awaitable, Callable, Iterator, cast

from shared.addresses import join_host_port
from shared.names import go_quote, is_valid_channel_name, is_valid_topic_name
from shared.protocol.commands import FIN_RUN, Command, CommandParser
from shared.protocol.compression import Codec, CompressionError, DeflateCodec, SnappyCodec
from shared.protocol.errors import ClientError, FatalClientError, ProtocolError
from shared.protocol.frames import CLOSE_WAIT, FRAME_TYPE_ERROR, HEARTBEAT, MAGIC_V2, OK, encode_frame

from . import identify
from .channel import Channel, ChannelError
from .client import STATE_CLOSING, STATE_DISCONNECTED, STATE_INIT, STATE_SUBSCRIBED, Client
from .topic import TopicError

# a command's answer: now, none, or once what it waits for is done (the connection reads on after it)
Reply = bytes | None | Awaitable[bytes | None]

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("nsqd")


def _decimal(text: bytes) -> int | None:
    """NSQ's ByteToBase10: ASCII digits only (empty is 0); None if anything else, or more digits than a uint64
    holds."""
    if not text:
        return 0
    return int(text) if text.isdigit() and len(text) <= 20 else None


def _name(raw: bytes) -> str:
    return raw.decode("utf-8", "surrogateescape")  # go_quote prints undecodable bytes as \xNN, as Go does


class ConnectionV2(asyncio.Protocol):
    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self.opts = nsqd.opts
        self.client: Client
        self.transport: asyncio.Transport
        self._magic = b""
        self._parser: CommandParser | None = None
        self._loop = asyncio.get_running_loop()
        self._last_read = self._loop.time()
        self._heartbeat_timer: asyncio.TimerHandle | None = None
        self._deadline_timer: asyncio.TimerHandle | None = None
        # set by FIN and REQ; the channel refills the client's window once per batch of received bytes
        self._window_changed = False
        # commands other than IDENTIFY wait for TLS (--tls-required); cleared once the connection upgraded
        self._tls_pending = self.opts.tls_required != "false"
        self._inflate: Codec | None = None
        self._upgrade: asyncio.Task[None] | None = None
        # a command waiting for the auth server; the commands after it wait with reading paused
        self._deferred: asyncio.Task[None] | None = None

    # -- connection lifecycle --------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport but have its interface
        self.transport = cast(asyncio.Transport, transport)
        peer = self.transport.get_extra_info("peername")
        remote = join_host_port(peer[0], peer[1]) if isinstance(peer, tuple) else str(peer)
        self.client = Client(self.nsqd.next_client_id(), self.transport, remote, self.nsqd.request_flush, self.close,
                             self.nsqd.client_defaults)
        self.nsqd.connections.add(self)
        log.info("TCP: new client(%s)", remote)
        self._start_timers()

    def connection_lost(self, exc: Exception | None) -> None:
        client = self.client
        log.info("PROTOCOL(V2): [%s] exiting ioloop", client)
        client.state = STATE_DISCONNECTED
        self._stop_timers()
        for task in (self._upgrade, self._deferred):
            if task is not None:
                task.cancel()
        if client.channel is not None:
            client.channel.remove_client(client)
        self.nsqd.connections.discard(self)

    def close(self) -> None:
        """Flush and close; the client leaves its channel now, not when a peer that stopped reading lets the
        socket drain, and a socket that has not drained within a heartbeat interval is aborted."""
        client = self.client
        client.flush()
        if client.state != STATE_DISCONNECTED:
            client.state = STATE_CLOSING
        if client.channel is not None:
            client.channel.remove_client(client)
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
        client.write_paused = paused
        if client.channel is not None:
            client.channel.update_ready(client)
        if paused and client.channel is None:
            self.transport.pause_reading()
        elif not paused and self._upgrade is None and self._deferred is None:
            self.transport.resume_reading()

    def _limit_unread_replies(self) -> None:
        """A consumer that keeps sending but never reads would grow its replies (E_FIN_FAILED, OK) forever."""
        if self.client.write_paused and self.transport.get_write_buffer_size() > _UNREAD_REPLIES_LIMIT:
            self.transport.pause_reading()

    # -- bytes in --------------------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._last_read = self._loop.time()
        self.nsqd.busy_poll.activity()
        if self._inflate is None:
            self._process(data)
            return
        try:
            for chunk in self._inflate.decompress(data):
                if self.transport.is_closing():
                    return
                self._process(chunk)
        except CompressionError as error:
            log.error("[%s] - %s", self.client, error)
            self.close()

    def _process(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:
            parser, data = self._read_magic(data)
            if parser is None:
                return
        self._run(iter(parser.feed(data)))

    def _run(self, commands: Iterator[Command]) -> None:
        """Runs commands in order until one has to wait for the auth server (the rest then wait for it)."""
        client, codec = self.client, self._inflate
        for command in commands:
            if self._upgrade is not None or self._inflate is not codec:
                break  # nothing may come between IDENTIFY and the upgrade it asked for
            try:
                if self._tls_pending and command.name != b"IDENTIFY":
                    name = b"FIN" if command.name == FIN_RUN else command.name
                    raise FatalClientError("E_INVALID", f"cannot {_name(name)} in current state (TLS required)")
                if client.auth is not None and command.name in _AUTHORIZED and client.auth.is_expired(time.time()):
                    self._defer(self._reauthorize(command), commands)
                    return
                response = _HANDLERS.get(command.name, ConnectionV2._unknown)(self, command)
            except ProtocolError as error:
                log.error("[%s] - %s", client, error)
                client.queue_error(error.frame_text)
                if error.fatal:
                    self.close()
                    return
                continue
            except Exception:
                # a bug of ours: the client still gets the replies to what came before, then the connection ends
                log.exception("[%s] - failed to process %s", client, _name(command.name))
                self.close()
                return
            if response is None:
                continue
            if not isinstance(response, bytes):  # it waits for something (the auth server, a topic's start)
                self._defer(response, commands)
                return
            client.queue_response(response)
        if self._window_changed:
            self._window_changed = False
            if client.channel is not None:
                client.channel.update_ready(client)
        client.flush()
        if client.write_paused:
            self._limit_unread_replies()

    def _defer(self, work: Awaitable[bytes | None], rest: Iterator[Command]) -> None:
        self.client.flush()
        self.transport.pause_reading()
        self._deferred = asyncio.create_task(self._finish_deferred(work, rest))

    async def _finish_deferred(self, work: Awaitable[bytes | None], rest: Iterator[Command]) -> None:
        client = self.client
        try:
            response = await work
        except ProtocolError as error:
            log.error("[%s] - %s", client, error)
            client.queue_error(error.frame_text)
            self.close()
            return
        finally:
            self._deferred = None
        if response is not None:
            client.queue_response(response)
        self.transport.resume_reading()
        self._run(rest)

    # -- AUTH ------------------------------------------------------------------------------------------------

    async def _authenticate(self, secret: bytes) -> bytes:
        client = self.client
        await self._query_auth(secret.decode("utf-8", "surrogateescape"))
        assert client.auth is not None
        if not client.auth.authorizations:
            raise FatalClientError("E_UNAUTHORIZED", "AUTH no authorizations found")
        from .auth import auth_response  # only nsqd with auth servers get here

        return auth_response(client.auth)

    async def _reauthorize(self, command: Command) -> bytes | None:
        """Authorizations past their TTL are asked for again with the same secret, then the command runs."""
        await self._query_auth(self.client.auth_secret)
        reply = _HANDLERS[command.name](self, command)
        return reply if reply is None or isinstance(reply, bytes) else await reply

    async def _query_auth(self, secret: str) -> None:
        from .auth import AuthError

        client, auth = self.client, self.nsqd.auth_client
        assert auth is not None
        tls = client.tls is not None
        try:
            client.auth = await auth.query(client.remote_address.rsplit(":", 1)[0].strip("[]"), tls, secret,
                                           _common_name(client.tls))
        except AuthError as error:
            # the reason may hold what the auth server said: logged, never sent to the client
            log.warning("PROTOCOL(V2): [%s] AUTH failed %s", client, error)
            raise FatalClientError("E_AUTH_FAILED", "AUTH failed") from None
        client.auth_secret = secret

    def _check_auth(self, command: str, topic: str, channel: str) -> None:
        if self.nsqd.auth_client is None:
            return
        auth = self.client.auth
        if auth is None:
            raise FatalClientError("E_AUTH_FIRST", f"AUTH required before {command}")
        if not auth.allows(topic, channel, "subscribe" if command == "SUB" else "publish"):
            raise FatalClientError("E_UNAUTHORIZED",
                                   f"AUTH failed for {command} on {go_quote(topic)} {go_quote(channel)}")

    def _read_magic(self, data: bytes) -> tuple[CommandParser | None, bytes]:
        """The parser once the 4-byte magic is complete, and the bytes after the magic."""
        needed = len(MAGIC_V2) - len(self._magic)
        self._magic += data[:needed]
        if len(self._magic) < len(MAGIC_V2):
            return None, b""
        if self._magic != MAGIC_V2:
            log.error("client(%s) bad protocol magic %r", self.client, self._magic.decode("latin-1"))
            self.transport.write(encode_frame(FRAME_TYPE_ERROR, b"E_BAD_PROTOCOL"))
            self.transport.close()
            return None, b""
        self._parser = CommandParser(self.opts.max_msg_size, self.opts.max_body_size)
        return self._parser, data[needed:]

    # -- heartbeats and the read deadline --------------------------------------------------------------------

    def _start_timers(self) -> None:
        interval = self.client.heartbeat_interval
        if interval > 0:
            self._heartbeat_timer = self._loop.call_later(interval, self._heartbeat)
            self._deadline_timer = self._loop.call_at(self._last_read + 2 * interval, self._check_deadline)

    def _stop_timers(self) -> None:
        for timer in (self._heartbeat_timer, self._deadline_timer):
            if timer is not None:
                timer.cancel()
        self._heartbeat_timer = self._deadline_timer = None

    def _heartbeat(self) -> None:
        self.client.queue_response(HEARTBEAT)
        self.client.flush()
        self._heartbeat_timer = self._loop.call_later(self.client.heartbeat_interval, self._heartbeat)

    def _check_deadline(self) -> None:
        """A client silent for two heartbeat intervals is gone (NSQ's read deadline)."""
        deadline = self._last_read + 2 * self.client.heartbeat_interval
        if self._loop.time() >= deadline:
            log.error("[%s] - read timeout after %.1fs without a command", self.client,
                      2 * self.client.heartbeat_interval)
            self._stop_timers()
            self.close()
        else:
            self._deadline_timer = self._loop.call_at(deadline, self._check_deadline)

    # -- commands --------------------------------------------------------------------------------------------

    def _unknown(self, command: Command) -> bytes | None:
        if command.error is not None:
            raise command.error  # a line the parser could not take (too long)
        raise FatalClientError("E_INVALID", f"invalid command {_name(command.name)}")

    def _identify(self, command: Command) -> bytes | None:
        client = self.client
        if client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot IDENTIFY in current state")
        if command.error is not None:
            raise command.error
        identity = identify.negotiate(command.body, self.opts, client, self.nsqd.tls_context is not None)
        client.client_id, client.hostname = identity.client_id, identity.hostname
        client.user_agent = identity.user_agent
        client.heartbeat_interval = identity.heartbeat_interval
        client.output_buffer_size = identity.output_buffer_size
        client.output_buffer_timeout = identity.output_buffer_timeout
        client.sample_rate = identity.sample_rate
        client.msg_timeout = identity.msg_timeout
        self._stop_timers()
        self._start_timers()
        if not identity.feature_negotiation:
            return OK
        reply = identify.response(identity, self.opts, auth_required=self.nsqd.auth_client is not None)
        if identity.tls_v1:
            client.queue_response(reply)
            client.flush()
            # the client's handshake must reach the TLS layer, not the command parser
            self.transport.pause_reading()
            self._upgrade = asyncio.create_task(self._start_tls(identity))
            return None
        if identity.snappy or identity.deflate:
            client.queue_response(reply)
            client.flush()
            self._start_compression(identity)
            return None
        return reply

    async def _start_tls(self, identity: identify.Identity) -> None:
        """The TLS handshake, OK over TLS, then compression on top if it was negotiated too."""
        client, context = self.client, self.nsqd.tls_context
        assert context is not None
        try:
            transport = await self._loop.start_tls(self.transport, self, context, server_side=True,
                                                   ssl_handshake_timeout=5.0)
        except (OSError, ssl.SSLError, TimeoutError) as error:
            log.error("[%s] - E_IDENTIFY_FAILED IDENTIFY failed TLS handshake - %s", client, error)
            self.transport.abort()
            return
        if transport is None:
            return
        self.transport = client.transport = transport
        client.tls = transport.get_extra_info("ssl_object")
        self._tls_pending = False
        self._upgrade = None
        client.queue_response(OK)
        client.flush()
        self._start_compression(identity)

    def _start_compression(self, identity: identify.Identity) -> None:
        if identity.snappy or identity.deflate:
            codec: Codec = SnappyCodec() if identity.snappy else DeflateCodec(identity.deflate_level)
            self.client.codec = self._inflate = codec
            self.client.queue_response(OK)
            self.client.flush()

    def _auth(self, command: Command) -> Reply:
        if self.client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot AUTH in current state")
        if command.args:
            raise FatalClientError("E_INVALID", "AUTH invalid number of parameters")
        if command.error is not None:
            raise command.error
        if self.client.auth is not None:
            raise FatalClientError("E_INVALID", "AUTH already set")
        if self.nsqd.auth_client is None:
            raise FatalClientError("E_AUTH_DISABLED", "AUTH disabled")
        return self._authenticate(command.body)

    def _sub(self, command: Command) -> Reply:
        client = self.client
        if client.state != STATE_INIT:
            raise FatalClientError("E_INVALID", "cannot SUB in current state")
        if client.heartbeat_interval <= 0:
            raise FatalClientError("E_INVALID", "cannot SUB with heartbeats disabled")
        if len(command.args) < 2:
            raise FatalClientError("E_INVALID", "SUB insufficient number of parameters")
        topic_name, channel_name = _name(command.args[0]), _name(command.args[1])
        if not is_valid_topic_name(topic_name):
            raise FatalClientError("E_BAD_TOPIC", f"SUB topic name {go_quote(topic_name)} is not valid")
        if not is_valid_channel_name(channel_name):
            raise FatalClientError("E_BAD_CHANNEL", f"SUB channel name {go_quote(channel_name)} is not valid")
        self._check_auth("SUB", topic_name, channel_name)
        topic = self.nsqd.get_topic(topic_name)
        channel = topic.get_channel(channel_name)
        try:
            channel.add_client(client)
        except ChannelError as error:
            raise FatalClientError("E_SUB_FAILED", f"SUB failed {error}") from None
        client.state = STATE_SUBSCRIBED
        client.channel = channel
        return topic.when_started(OK)

    def _rdy(self, command: Command) -> bytes | None:
        client = self.client
        if client.state == STATE_CLOSING:
            log.info("PROTOCOL(V2): [%s] ignoring RDY after CLS in state ClientStateV2Closing", client)
            return None
        if client.state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot RDY in current state")
        count = 1
        if command.args:
            parsed = _decimal(command.args[0])
            if parsed is None:
                raise FatalClientError("E_INVALID", f"RDY could not parse count {_name(command.args[0])}")
            count = parsed
        if count > self.opts.max_rdy_count:
            raise FatalClientError("E_INVALID", f"RDY count {count} out of range 0-{self.opts.max_rdy_count}")
        client.ready_count = count
        self._subscribed_channel().update_ready(client)
        return None

    def _message_command(self, command: Command, name: str, min_args: int) -> tuple[Channel, bytes]:
        """The checks FIN, REQ and TOUCH share; returns the channel and the message ID."""
        if self.client.state not in (STATE_SUBSCRIBED, STATE_CLOSING):
            raise FatalClientError("E_INVALID", f"cannot {name} in current state")
        if len(command.args) < min_args:
            raise FatalClientError("E_INVALID", f"{name} insufficient number of params")
        msg_id = command.args[0]
        if len(msg_id) != 16:
            raise FatalClientError("E_INVALID", "invalid message ID")
        return self._subscribed_channel(), msg_id

    def _fin(self, command: Command) -> bytes | None:
        """A FIN the parser did not take into a run (odd spacing, extra params): checked in full."""
        channel, msg_id = self._message_command(command, "FIN", 1)
        client = self.client
        try:
            channel.finish(client, msg_id)
        except ChannelError as error:
            raise ClientError("E_FIN_FAILED", f"FIN {_name(msg_id)} failed {error}") from None
        self._window_changed = True
        return None

    def _fin_run(self, command: Command) -> bytes | None:
        """Consecutive FINs (the parser's FIN_RUN): each acknowledged as FIN does, in order."""
        client = self.client
        if client.state != STATE_SUBSCRIBED and client.state != STATE_CLOSING:
            raise FatalClientError("E_INVALID", "cannot FIN in current state")
        channel = client.channel
        assert channel is not None
        finish = channel.finish
        self._window_changed = True
        for msg_id in command.args:
            try:
                finish(client, msg_id)
            except ChannelError as error:
                failure = ClientError("E_FIN_FAILED", f"FIN {_name(msg_id)} failed {error}")
                log.error("[%s] - %s", client, failure)
                client.queue_error(failure.frame_text)
        return None

    def _req(self, command: Command) -> bytes | None:
        channel, msg_id = self._message_command(command, "REQ", 2)
        timeout_ms = _decimal(command.args[1])
        if timeout_ms is None:
            raise FatalClientError("E_INVALID", f"REQ could not parse timeout {_name(command.args[1])}")
        max_ms = int(self.opts.max_req_timeout * 1000)
        if timeout_ms > max_ms:
            log.info("PROTOCOL(V2): [%s] REQ timeout %d out of range 0-%d. Setting to %d",
                     self.client, timeout_ms, max_ms, max_ms)
            timeout_ms = max_ms
        try:
            channel.requeue(self.client, msg_id, timeout_ms / 1000)
        except ChannelError as error:
            raise ClientError("E_REQ_FAILED", f"REQ {_name(msg_id)} failed {error}") from None
        self._window_changed = True
        return None

    def _touch(self, command: Command) -> bytes | None:
        channel, msg_id = self._message_command(command, "TOUCH", 1)
        try:
            channel.touch(self.client, msg_id)
        except ChannelError as error:
            raise ClientError("E_TOUCH_FAILED", f"TOUCH {_name(msg_id)} failed {error}") from None
        return None

    def _cls(self, command: Command) -> bytes | None:
        client = self.client
        if client.state != STATE_SUBSCRIBED:
            raise FatalClientError("E_INVALID", "cannot CLS in current state")
        client.ready_count = 0
        client.state = STATE_CLOSING
        self._subscribed_channel().update_ready(client)
        return CLOSE_WAIT

    def _nop(self, command: Command) -> bytes | None:
        return None

    def _topic_for_publish(self, command: Command, name: str, min_args: int, quote_prefix: str = "") -> str:
        if len(command.args) < min_args:
            raise FatalClientError("E_INVALID", f"{name} insufficient number of parameters")
        topic_name = _name(command.args[0])
        if topic_name not in self.nsqd.topics and not is_valid_topic_name(topic_name):  # existing names are valid
            raise FatalClientError("E_BAD_TOPIC", f"{quote_prefix}{name} topic name {go_quote(topic_name)} is not valid")
        return topic_name

    def _publish(self, topic_name: str, bodies: list[bytes], code: str, name: str, defer_ms: int = 0) -> Reply:
        topic = self.nsqd.get_topic(topic_name)
        try:
            topic.publish(bodies, defer_ms)
        except TopicError as error:
            raise FatalClientError(code, f"{name} failed {error}") from None
        self.client.published(topic_name, len(bodies))
        return topic.when_started(OK)

    def _pub(self, command: Command) -> Reply:
        topic_name = self._topic_for_publish(command, "PUB", 1)
        if command.error is not None:
            raise command.error
        self._check_auth("PUB", topic_name, "")
        return self._publish(topic_name, [command.body], "E_PUB_FAILED", "PUB")

    def _mpub(self, command: Command) -> Reply:
        # NSQ's text repeats the code here
        topic_name = self._topic_for_publish(command, "MPUB", 1, quote_prefix="E_BAD_TOPIC ")
        self._check_auth("MPUB", topic_name, "")
        self.nsqd.get_topic(topic_name)  # NSQ creates the topic before reading the body
        if command.error is not None:
            raise command.error
        assert command.messages is not None
        return self._publish(topic_name, command.messages, "E_MPUB_FAILED", "MPUB")

    def _dpub(self, command: Command) -> Reply:
        topic_name = self._topic_for_publish(command, "DPUB", 2)
        defer_ms = _decimal(command.args[1])
        if defer_ms is None:
            raise FatalClientError("E_INVALID", f"DPUB could not parse timeout {_name(command.args[1])}")
        max_ms = int(self.opts.max_req_timeout * 1000)
        if defer_ms > max_ms:
            raise FatalClientError("E_INVALID", f"DPUB timeout {defer_ms} out of range 0-{max_ms}")
        if command.error is not None:
            raise command.error
        self._check_auth("DPUB", topic_name, "")
        return self._publish(topic_name, [command.body], "E_DPUB_FAILED", "DPUB", defer_ms)

    def _subscribed_channel(self) -> Channel:
        assert self.client.channel is not None
        return self.client.channel


# how much a consumer whose socket does not drain may have waiting to be written before nsqd stops reading it
_UNREAD_REPLIES_LIMIT = 4 * 1024 * 1024
# commands checked against the client's authorizations (asked again once their TTL is over)
_AUTHORIZED = frozenset({b"SUB", b"PUB", b"MPUB", b"DPUB"})


def _common_name(tls: ssl.SSLObject | None) -> str:
    """The CN of a verified client certificate, which nsqd passes to the auth server."""
    certificate = tls.getpeercert() if tls is not None else None
    subject: tuple[tuple[tuple[str, str], ...], ...] = (certificate or {}).get("subject", ())  # type: ignore[assignment]
    return next((value for entry in subject for key, value in entry if key == "commonName"), "")


_HANDLERS: dict[bytes, Callable[[ConnectionV2, Command], Reply]] = {
    b"IDENTIFY": ConnectionV2._identify,
    b"AUTH": ConnectionV2._auth,
    b"SUB": ConnectionV2._sub,
    b"RDY": ConnectionV2._rdy,
    b"FIN": ConnectionV2._fin,
    FIN_RUN: ConnectionV2._fin_run,
    b"REQ": ConnectionV2._req,
    b"TOUCH": ConnectionV2._touch,
    b"CLS": ConnectionV2._cls,
    b"NOP": ConnectionV2._nop,
    b"PUB": ConnectionV2._pub,
    b"MPUB": ConnectionV2._mpub,
    b"DPUB": ConnectionV2._dpub,
}
