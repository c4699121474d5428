"""The tools' client side: where a consumer reads from (``--nsqd-tcp-address`` or ``--lookupd-http-address``);
``--producer-opt`` and ``--consumer-opt``, go-nsq Config options given as ``key,value`` as NSQ's tools take them,
turned into keyword arguments of ``Producer`` and ``Consumer`` (fields of the client library's ``Config``, and the
consumer's own settings; options this client cannot honour are refused with the list of those it can, rather than
ignored); and running a tool's consumers until it is told to stop."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from nsqclient import Consumer
from nsqclient.addresses import split_host_port
from nsqclient.protocol.names import go_quote
from shared.flags import FlagError, parse_duration


def _milliseconds(value: str) -> int:
    return round(parse_duration(value) * 1000)


# go-nsq name -> (field of nsqclient.Config, conversion)
_CONFIG: dict[str, tuple[str, Callable[[str], Any]]] = {
    "client_id": ("client_id", str),
    "hostname": ("hostname", str),
    "user_agent": ("user_agent", str),
    "heartbeat_interval": ("heartbeat_interval", _milliseconds),  # IDENTIFY takes ms
    "msg_timeout": ("msg_timeout", _milliseconds),
    "dial_timeout": ("connect_timeout", parse_duration),
}
_CONSUMER: dict[str, tuple[str, Callable[[str], Any]]] = {
    **_CONFIG,
    "sample_rate": ("sample_rate", int),
    "max_in_flight": ("max_in_flight", int),
    "max_attempts": ("max_attempts", int),
    "lookupd_poll_interval": ("lookupd_poll_interval", parse_duration),
    "lookupd_poll_jitter": ("lookupd_poll_jitter", float),
    "default_requeue_delay": ("requeue_delay", parse_duration),
    "max_requeue_delay": ("max_requeue_delay", parse_duration),
    "backoff_multiplier": ("backoff_multiplier", parse_duration),
    "max_backoff_duration": ("max_backoff_duration", parse_duration),
    "rdy_redistribute_interval": ("rdy_redistribute_interval", parse_duration),
}


def check_sources(nsqd_tcp_addresses: list[str], lookupd_http_addresses: list[str]) -> None:
    """NSQ's rule for a consumer's flags: nsqd or lookupd addresses, not both; and each one well formed."""
    if not nsqd_tcp_addresses and not lookupd_http_addresses:
        raise FlagError("--nsqd-tcp-address or --lookupd-http-address required")
    if nsqd_tcp_addresses and lookupd_http_addresses:
        raise FlagError("use --nsqd-tcp-address or --lookupd-http-address not both")
    check_tcp_addresses("nsqd-tcp-address", nsqd_tcp_addresses)
    # a lookupd may also be given as a URL, which the client accepts
    check_tcp_addresses("lookupd-http-address",
                        [address for address in lookupd_http_addresses
                         if not address.startswith(("http://", "https://"))])


def check_tcp_addresses(flag: str, addresses: list[str]) -> None:
    """Each address is ``host:port``, or a unix socket's path (one with a ``/``: ``/run/nsqd.sock``,
    ``./nsqd.sock``); FlagError names ``--flag`` and the fault."""
    for address in addresses:
        if "/" in address:
            continue
        try:
            split_host_port(address)
        except ValueError as error:
            raise FlagError(f"--{flag}: {error}") from None


def producer_settings(items: list[str]) -> dict[str, Any]:
    """``Producer`` keyword arguments from ``--producer-opt`` items; FlagError names the flag as Go's would."""
    return _settings(items, _CONFIG, "producer-opt")


def consumer_settings(items: list[str]) -> dict[str, Any]:
    """``Consumer`` keyword arguments from ``--consumer-opt`` items."""
    return _settings(items, _CONSUMER, "consumer-opt")


def _settings(items: list[str], known: dict[str, tuple[str, Callable[[str], Any]]], flag: str) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for item in items:
        key, _, value = item.partition(",")
        if key not in known:
            raise FlagError(f"invalid value {go_quote(item)} for flag -{flag}: invalid option {key} "
                            f"(supported: {', '.join(known)})")
        name, convert = known[key]
        try:
            settings[name] = convert(value)
        except ValueError as error:
            raise FlagError(f"invalid value {go_quote(item)} for flag -{flag}: failed to coerce option {key} "
                            f"({value}) - {error}") from None
    return settings


async def run_consumers(consumers: list[Consumer], stopping: asyncio.Event) -> None:
    """Starts the consumers, waits for ``stopping`` (SIGINT, SIGTERM, or the tool's own end), then stops them
    once what they hold was answered."""
    try:
        for consumer in consumers:
            await consumer.start()
        await stopping.wait()
    finally:
        await asyncio.gather(*(consumer.stop() for consumer in consumers))
