"""One connected client as nsqd sees it: negotiated settings, counters, readiness and its output buffer (its
protocol state is its session's, ``shared.protocol.session_v2``).

Message frames are appended to the output buffer and written at the end of the event-loop turn in which they
were queued (or at once when the buffer reaches ``output_buffer_size``). Under load a turn carries many
deliveries, so writes coalesce; when idle a message leaves in the same turn. NSQ instead waits for a
``output_buffer_timeout`` ticker while a client with spare RDY might get more; that only adds latency here, so
the negotiated timeout is an upper bound this buffer always meets. Responses and errors are written at the end
of processing the bytes that caused them.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable

from nsqclient.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_RESPONSE, MESSAGE_FRAME_HEADER, OK, encode_frame

from .tls import connection_stats
from .topology import ELSEWHERE

if TYPE_CHECKING:
    import ssl

    from nsqclient.protocol.compression import Codec
    from shared.auth_reply import AuthState
    from shared.protocol.session_v2 import SessionV2

    from .channel import Channel
    from .identify import Identity
    from .message import InFlightMessage

_pack_message_header = MESSAGE_FRAME_HEADER.pack
_FRAME_TYPE_MESSAGE = 2
_MESSAGE_OVERHEAD = 4 + 26  # frame type + timestamp, attempts, ID
_OK_FRAME = encode_frame(FRAME_TYPE_RESPONSE, OK)  # the answer to every publish


class Client:
    """A connected client as nsqd sees it. Only its own methods change its settings, counters and readiness; the
    channel and the connection read them."""

    def __init__(self, client_id: int, transport: asyncio.Transport, remote_address: str,
                 request_flush: Callable[[Client], None], close: Callable[[], None],
                 defaults: ClientDefaults, session: SessionV2) -> None:
        self.id = client_id
        # the protocol's side of the client: its state and the rules its commands pass
        self.session = session
        self.transport = transport
        self.remote_address = remote_address
        host = remote_address.rsplit(":", 1)[0]
        self.client_id = host
        self.hostname = host
        self.user_agent = ""
        self.connect_ts = int(time.time())
        self.channel: Channel | None = None

        self.heartbeat_interval = defaults.heartbeat_interval
        self.msg_timeout = defaults.msg_timeout
        self.output_buffer_size = defaults.output_buffer_size
        self.output_buffer_timeout = defaults.output_buffer_timeout
        self.sample_rate = 0
        self.topology_zone = self.topology_region = ""
        self.locality = ELSEWHERE  # how near it is (topology.py)
        # set while the socket's send buffer is full: no deliveries until it drains (NSQ's pump blocks in write)
        self.write_paused = False
        # closes the connection (and takes the client out of its channel)
        self.close = close

        self.ready_count = 0
        self.in_flight_count = 0
        self.message_count = 0
        self.finish_count = 0
        self.requeue_count = 0
        self.pub_counts: dict[str, int] = {}

        # set by the upgrades IDENTIFY negotiates: the TLS session, and the compression every write goes through
        self.tls: ssl.SSLObject | None = None
        self.codec: Codec | None = None
        # what the auth server allowed, and the secret to ask again with once that expires
        self.auth: AuthState | None = None
        self.auth_secret = ""

        self._out = bytearray()
        self._flush_requested = False
        self._request_flush = request_flush

    def __repr__(self) -> str:
        return f"{self.remote_address}"

    # -- what the client asked for -----------------------------------------------------------------------------

    def identify(self, identity: Identity) -> None:
        self.client_id, self.hostname, self.user_agent = identity.client_id, identity.hostname, identity.user_agent
        self.heartbeat_interval = identity.heartbeat_interval
        self.output_buffer_size = identity.output_buffer_size
        self.output_buffer_timeout = identity.output_buffer_timeout
        self.sample_rate = identity.sample_rate
        self.msg_timeout = identity.msg_timeout
        self.topology_zone, self.topology_region = identity.topology_zone, identity.topology_region
        self.locality = identity.locality

    def authenticated(self, auth: AuthState, secret: str) -> None:
        self.auth, self.auth_secret = auth, secret

    def upgraded_to_tls(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self.tls = transport.get_extra_info("ssl_object")

    def compress_with(self, codec: Codec) -> None:
        self.codec = codec

    def subscribe(self, channel: Channel) -> None:
        """Joins ``channel``; ChannelError if it refuses."""
        channel.add_client(self)
        self.channel = channel

    def set_ready(self, count: int) -> None:
        self.ready_count = count
        self.update_ready()

    def start_close(self) -> None:
        """CLS: no more messages; the ones in flight may still be finished."""
        self.ready_count = 0
        self.update_ready()

    def leave_channel(self) -> None:
        """The connection is closing or lost: the client leaves its channel now, not once its socket drained."""
        if self.channel is not None:
            self.channel.remove_client(self)

    def disconnected(self) -> None:
        """The connection is lost: the client leaves its channel and lets go of the connection's ``close``, which
        refers back to it. Reference counting then frees both at once; as a cycle they would wait for a full
        garbage collection, which nsqd's thresholds make rare (memory grew with every connection closed)."""
        self.leave_channel()
        self.close = _closed

    def published(self, topic: str, count: int) -> None:
        self.pub_counts[topic] = self.pub_counts.get(topic, 0) + count

    def set_write_paused(self, paused: bool) -> None:
        """While the socket's send buffer is full no message is sent (NSQ's pump blocks in write). The channel
        finds out about a pause when it next comes to the client (a pause happens in the middle of a send); a
        resume it is told of."""
        self.write_paused = paused
        if not paused:
            self.update_ready()

    # -- what the channel did with its messages (the channel then refills the window it freed) ------------------

    def finished(self, count: int) -> None:
        self.in_flight_count -= count
        self.finish_count += count

    def requeued(self) -> None:
        self.in_flight_count -= 1
        self.requeue_count += 1

    def timed_out(self) -> None:
        self.in_flight_count -= 1

    def emptied(self) -> None:
        """The channel dropped every message, the ones in flight to this client included."""
        self.in_flight_count = 0

    @property
    def room(self) -> int:
        """How many more messages the client may receive now: RDY is a window, not a counter, and nothing is sent
        while the socket's send buffer is full."""
        if self.write_paused:
            return 0
        room = self.ready_count - self.in_flight_count
        return room if room > 0 else 0

    def update_ready(self) -> None:
        """Tells the channel whether the client has room now (after RDY, CLS, a run of FINs or REQs, a resume)."""
        if self.channel is not None:
            self.channel.update_ready(self)

    # -- bytes out ---------------------------------------------------------------------------------------------

    def send_message(self, msg: InFlightMessage) -> None:
        self.in_flight_count += 1
        self.message_count += 1
        out = self._out
        out += _pack_message_header(_MESSAGE_OVERHEAD + len(msg.body), _FRAME_TYPE_MESSAGE, msg.timestamp,
                                    msg.attempts)
        out += msg.id
        out += msg.body
        self._messages_queued()

    def send_messages(self, messages: list[InFlightMessage]) -> None:
        """``send_message`` for each of ``messages``, their frames joined into one write."""
        self.in_flight_count += len(messages)
        self.message_count += len(messages)
        pack = _pack_message_header
        self._out += b"".join([pack(_MESSAGE_OVERHEAD + len(msg.body), _FRAME_TYPE_MESSAGE, msg.timestamp,
                                    msg.attempts) + msg.id + msg.body for msg in messages])
        self._messages_queued()

    def _messages_queued(self) -> None:
        """Written now once the buffer holds ``output_buffer_size``, else at the end of this event-loop turn."""
        if len(self._out) >= self.output_buffer_size:
            self.flush()
        elif not self._flush_requested:
            self._flush_requested = True
            self._request_flush(self)

    def queue_response(self, data: bytes) -> None:
        """Buffered until ``flush``: the connection flushes after processing the bytes it received."""
        self._out += _OK_FRAME if data is OK else encode_frame(FRAME_TYPE_RESPONSE, data)

    def queue_error(self, text: bytes) -> None:
        self._out += encode_frame(FRAME_TYPE_ERROR, text)

    def flush(self) -> None:
        self._flush_requested = False
        if self._out:
            out, self._out = self._out, bytearray()
            if not self.transport.is_closing():
                self.transport.write(out if self.codec is None else self.codec.compress(out))

    def stats(self) -> dict[str, Any]:
        """The client's object in /stats, with NSQ's field names (optional fields only when set)."""
        stats: dict[str, Any] = {
            "client_id": self.client_id, "hostname": self.hostname, "version": "V2",
            "remote_address": self.remote_address, "state": int(self.session.state), "ready_count": self.ready_count,
            "in_flight_count": self.in_flight_count, "message_count": self.message_count,
            "finish_count": self.finish_count, "requeue_count": self.requeue_count,
            "connect_ts": self.connect_ts, "sample_rate": self.sample_rate,
            "deflate": self.codec is not None and self.codec.name == "deflate",
            "snappy": self.codec is not None and self.codec.name == "snappy",
            "user_agent": self.user_agent, "topology_zone": self.topology_zone,
            "topology_region": self.topology_region,
        }
        if self.pub_counts:
            stats["pub_counts"] = [{"topic": topic, "count": count} for topic, count in sorted(self.pub_counts.items())]
        if self.auth is not None:  # omitted when not authed, as in NSQ
            stats.update(authed=True, auth_identity=self.auth.identity, auth_identity_url=self.auth.identity_url)
        stats.update(connection_stats(self.tls))
        return stats


class EndOfTurnFlush:
    """Writes the buffered output of every client that asked, once each, at the end of the event-loop turn."""

    def __init__(self) -> None:
        self._waiting: list[Client] = []

    def request(self, client: Client) -> None:
        if not self._waiting:
            asyncio.get_running_loop().call_soon(self._flush)
        self._waiting.append(client)

    def _flush(self) -> None:
        clients, self._waiting = self._waiting, []
        for client in clients:
            client.flush()


class ClientDefaults:
    """Settings a client has until IDENTIFY changes them (seconds, bytes)."""

    def __init__(self, heartbeat_interval: float, msg_timeout: float, output_buffer_size: int,
                 output_buffer_timeout: float) -> None:
        self.heartbeat_interval = heartbeat_interval
        self.msg_timeout = msg_timeout
        self.output_buffer_size = output_buffer_size
        self.output_buffer_timeout = output_buffer_timeout


def _closed() -> None:
    """``Client.close`` once the connection is lost: nothing is left to close."""
