"""The ``nsq`` data source's options, as Spark hands them over (strings, case-insensitive keys), checked once.

Options: ``topic``, ``channel``, ``lookupd_http_address`` and/or ``nsqd_tcp_address`` (comma-separated lists),
``max_in_flight`` (messages held un-FIN'd, 100,000), ``max_bytes_in_flight`` (of their bodies, 64 MiB),
``max_messages_per_batch``, ``idle_timeout`` (seconds, batch reads), ``max_messages`` (batch
reads), ``lookupd_poll_interval`` (seconds between lookupd queries while reading), ``tls`` (``true``) with
``tls_ca_file``, ``snappy``/``deflate`` (``true``), ``auth_secret``, and for writing ``mpub_chunk`` (messages per
MPUB), ``connect_timeout`` (seconds: the lookupd request, and connecting to and identifying with an nsqd) and
``publish_timeout`` (seconds waiting for nsqd's answer to one MPUB). ``since`` (``earliest``, an RFC 3339 time or a
duration before now) starts a channel the query creates from the topic's history (history.py), on the nsqd lookupd
lists and each ``nsqd_http_address``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from nsqclient.protocol.names import is_valid_channel_name, is_valid_topic_name


class OptionError(ValueError):
    """An option the data source cannot use; the message names it."""


@dataclass(frozen=True)
class NSQOptions:
    topic: str = ""
    channel: str = ""
    lookupd_http_addresses: tuple[str, ...] = ()
    nsqd_tcp_addresses: tuple[str, ...] = ()
    nsqd_http_addresses: tuple[str, ...] = ()
    since: str = ""
    max_in_flight: int = 100_000  # spread over connections of at most 2500 each (see window)
    max_bytes_in_flight: int = 64 * 1024 * 1024
    max_messages_per_batch: int = 100_000
    max_messages: int = 0  # batch reads: 0 = until idle
    idle_timeout: float = 2.0
    lookupd_poll_interval: float = 60.0
    connect_timeout: float = 5.0
    publish_timeout: float = 30.0
    mpub_chunk: int = 500
    tls: bool = False
    tls_ca_file: str = ""
    snappy: bool = False
    deflate: bool = False
    auth_secret: str = ""
    extra: dict[str, str] = field(default_factory=dict)

    def client_settings(self) -> dict[str, Any]:
        """Keyword arguments for the client library's Producer and Consumer (tls, compression, auth)."""
        settings: dict[str, Any] = {}
        if self.tls:
            settings["tls"] = ssl.create_default_context(cafile=self.tls_ca_file or None)
        if self.snappy:
            settings["snappy"] = True
        if self.deflate:
            settings["deflate"] = True
        if self.auth_secret:
            settings["auth_secret"] = self.auth_secret
        return settings


_INTS = ("max_in_flight", "max_bytes_in_flight", "max_messages_per_batch", "max_messages", "mpub_chunk")
_FLOATS = ("idle_timeout", "lookupd_poll_interval", "connect_timeout", "publish_timeout")
_BOOLS = ("tls", "snappy", "deflate")


def parse_options(raw: Mapping[str, str], *, need_topic: bool = True, need_channel: bool = False) -> NSQOptions:
    options = {key.lower(): str(value) for key, value in raw.items()}
    values: dict[str, Any] = {}
    for name in _INTS:
        if name in options:
            values[name] = _positive_int(name, options.pop(name))
    for name in _BOOLS:
        if name in options:
            values[name] = _bool(name, options.pop(name))
    for name in _FLOATS:
        if name in options:
            values[name] = _positive_float(name, options.pop(name))
    values["lookupd_http_addresses"] = _addresses(options.pop("lookupd_http_address", ""))
    values["nsqd_tcp_addresses"] = _addresses(options.pop("nsqd_tcp_address", ""))
    values["nsqd_http_addresses"] = _addresses(options.pop("nsqd_http_address", ""))
    for name in ("topic", "channel", "tls_ca_file", "auth_secret", "since"):
        if name in options:
            values[name] = options.pop(name)
    parsed = NSQOptions(**values, extra=options)
    _check(parsed, need_topic, need_channel)
    return parsed


def _check(options: NSQOptions, need_topic: bool, need_channel: bool) -> None:
    if not options.lookupd_http_addresses and not options.nsqd_tcp_addresses:
        raise OptionError("give lookupd_http_address or nsqd_tcp_address")
    if need_topic and not is_valid_topic_name(options.topic):
        raise OptionError(f"option topic: invalid topic name {options.topic!r}")
    if need_channel and not is_valid_channel_name(options.channel):
        raise OptionError(f"option channel: invalid channel name {options.channel!r}")
    if options.since and not (options.lookupd_http_addresses or options.nsqd_http_addresses):
        raise OptionError("option since: give lookupd_http_address or nsqd_http_address (where nsqd's HTTP API is)")
    if options.snappy and options.deflate:
        raise OptionError("options snappy and deflate cannot both be true")


def _addresses(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def _positive_int(name: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise OptionError(f"option {name}: not an integer: {text!r}") from None
    if value < 0 or (value == 0 and name != "max_messages"):
        raise OptionError(f"option {name}: must be > 0, got {value}")
    return value


def _positive_float(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise OptionError(f"option {name}: not a number: {text!r}") from None
    if value <= 0:
        raise OptionError(f"option {name}: must be > 0, got {value}")
    return value


def _bool(name: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise OptionError(f"option {name}: expected true or false, got {text!r}")
    return lowered == "true"
