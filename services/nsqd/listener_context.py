"""What the connections of nsqd's TCP listener share and ask of nsqd: the ``ListenerContext`` (settings and the
services they use) and the ``Broker`` (topics, and being told of connections)."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING, Protocol

from shared.protocol.session_v2 import Limits

if TYPE_CHECKING:  # the auth client brings aiohttp, imported only once a configuration asks for it
    from shared.auth_client import AuthClient
    from .busy_poll import BusyPoll
    from .client import ClientDefaults, EndOfTurnFlush
    from .options import Options
    from .protocol_v2 import ConnectionV2
    from .topic import Topic


class Broker(Protocol):
    """What a connection asks of nsqd while it runs."""

    def get_topic(self, name: str) -> Topic: ...

    def connected(self, connection: ConnectionV2) -> int:
        """Takes the connection into account; returns its client's id."""
        ...

    def disconnected(self, connection: ConnectionV2) -> None: ...


class ListenerContext:
    """What every connection of the TCP listener shares. (A plain class: a compiled dataclass would need the types
    of its fields imported at run time.)"""

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
