"""``Config``: how a client connects to nsqd and what it tells nsqd about itself, shared by ``Producer`` and
``Consumer`` (go-nsq's ``Config`` holds the same for both).

Fields named after IDENTIFY's take its units (milliseconds); ``None`` leaves the value to nsqd, and IDENTIFY
then does not carry it. ``Producer`` and ``Consumer`` take a ``config`` and, as keyword arguments, any of its
fields, which override the config's: ``Producer(address, heartbeat_interval=5000)``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from .version import VERSION

LIBRARY = f"nsqclient/{VERSION}"


def user_agent(program: str | None = None) -> str:
    """What a client says it is: ``nsqclient/<version>``, after ``<program>/<version>`` for a tool."""
    return LIBRARY if program is None else f"{program}/{VERSION} {LIBRARY}"


def _short_hostname() -> str:
    return socket.gethostname().split(".")[0]


@dataclass(frozen=True)
class Config:
    """How a ``Producer`` or a ``Consumer`` connects; pass one as ``config=``, or its fields as keyword arguments.

    What IDENTIFY tells nsqd (``None``: nsqd's default): ``client_id`` (the short hostname), ``hostname``,
    ``user_agent`` (``nsqclient/<version>``), ``heartbeat_interval`` (ms; nsqd's default is 30 s, -1 turns
    heartbeats off), ``msg_timeout`` (ms, for the messages nsqd sends this client), ``sample_rate`` (percent of the
    channel's messages this client receives), ``output_buffer_size`` (bytes), ``output_buffer_timeout`` (ms), and
    ``topology_zone`` and ``topology_region`` (an nsqd with topology-aware delivery prefers consumers in its zone,
    then its region).

    The upgrades IDENTIFY negotiates: ``tls`` (an ``ssl.SSLContext``), then ``snappy`` (needs
    ``nsqclient[snappy]``) or ``deflate`` (with ``deflate_level``). ``tls_server_name`` is the name nsqd's
    certificate must carry, where it is not the address's host (``localhost`` for a unix socket, which has none).
    ``auth_secret`` answers an nsqd that requires AUTH.

    ``connect_timeout`` (1 s, go-nsq's): seconds to connect and identify, TLS and AUTH included; a consumer's SUB
    and CLS wait as long for nsqd. ``command_timeout`` (60 s, as go-nsq's read timeout): seconds a publish waits
    for its answer, then ``CommandTimeout`` and the connection is closed. That is how a connection that went silent
    (a pulled cable, a peer that stopped reading) is noticed, where TCP alone would wait for ever; a healthy nsqd
    answers sooner, and its heartbeats come more often.
    """

    client_id: str = field(default_factory=_short_hostname)
    hostname: str = field(default_factory=socket.gethostname)
    user_agent: str = LIBRARY
    heartbeat_interval: int | None = None
    msg_timeout: int | None = None
    sample_rate: int | None = None
    output_buffer_size: int | None = None
    output_buffer_timeout: int | None = None
    topology_zone: str | None = None
    topology_region: str | None = None
    tls: ssl.SSLContext | None = None
    tls_server_name: str | None = None
    snappy: bool = False
    deflate: bool = False
    deflate_level: int | None = None
    auth_secret: str | None = None
    connect_timeout: float = 1.0
    command_timeout: float = 60.0

    def __post_init__(self) -> None:
        if self.snappy and self.deflate:
            raise ValueError("snappy and deflate cannot both be on")
        if self.snappy and importlib.util.find_spec("snappy") is None:
            raise ValueError("snappy=True needs python-snappy: pip install 'nsqclient[snappy]'")
        if self.connect_timeout <= 0:
            raise ValueError("connect_timeout must be positive")
        if self.command_timeout <= 0:
            raise ValueError("command_timeout must be positive")

    def identify(self) -> dict[str, Any]:
        """The IDENTIFY body."""
        body: dict[str, Any] = {"feature_negotiation": True, "client_id": self.client_id, "hostname": self.hostname,
                                "user_agent": self.user_agent, "tls_v1": self.tls is not None}
        for name in ("heartbeat_interval", "msg_timeout", "sample_rate", "output_buffer_size",
                     "output_buffer_timeout", "deflate_level", "topology_zone", "topology_region"):
            if (value := getattr(self, name)) is not None:
                body[name] = value
        if self.snappy:
            body["snappy"] = True
        if self.deflate:
            body["deflate"] = True
        return body


def configure(config: Config | None, settings: dict[str, Any]) -> Config:
    """What a Producer or Consumer runs with: ``config`` (or the defaults) with the keyword ``settings`` over it;
    TypeError names a setting that is not a field."""
    config = config or Config()
    return dataclasses.replace(config, **settings) if settings else config
