"""The nsq data source's options, as Spark passes them (strings, any case)."""

from __future__ import annotations

import ssl

import pytest

from nsqspark.options import OptionError, parse_options


def test_defaults_and_lists() -> None:
    options = parse_options({"topic": "events", "lookupd_http_address": "a:4161, b:4161"})
    assert options.lookupd_http_addresses == ("a:4161", "b:4161")
    assert (options.max_in_flight, options.max_messages_per_batch, options.mpub_chunk) == (100_000, 100_000, 500)
    assert options.client_settings() == {}


def test_keys_are_case_insensitive_and_values_converted() -> None:
    options = parse_options({"Topic": "t", "NSQD_TCP_ADDRESS": "127.0.0.1:4150", "maxMessages": "5",
                             "max_in_flight": "10", "snappy": "TRUE", "idle_timeout": "0.5",
                             "auth_secret": "s", "channel": "c"}, need_channel=True)
    assert (options.max_in_flight, options.idle_timeout, options.channel) == (10, 0.5, "c")
    assert options.client_settings() == {"snappy": True, "auth_secret": "s"}
    assert options.extra == {"maxmessages": "5"}  # unknown options are kept, not silently renamed


def test_tls_gives_a_context() -> None:
    settings = parse_options({"topic": "t", "nsqd_tcp_address": "h:1", "tls": "true"}).client_settings()
    assert isinstance(settings["tls"], ssl.SSLContext)


@pytest.mark.parametrize("raw, message", [
    ({"topic": "t"}, "give lookupd_http_address or nsqd_tcp_address"),
    ({"topic": "bad topic", "nsqd_tcp_address": "h:1"}, "option topic: invalid topic name"),
    ({"nsqd_tcp_address": "h:1"}, "option topic: invalid topic name ''"),
    ({"topic": "t", "nsqd_tcp_address": "h:1", "max_in_flight": "many"}, "option max_in_flight: not an integer"),
    ({"topic": "t", "nsqd_tcp_address": "h:1", "max_in_flight": "0"}, "option max_in_flight: must be > 0"),
    ({"topic": "t", "nsqd_tcp_address": "h:1", "idle_timeout": "-1"}, "option idle_timeout: must be > 0"),
    ({"topic": "t", "nsqd_tcp_address": "h:1", "tls": "yes"}, "option tls: expected true or false"),
    ({"topic": "t", "nsqd_tcp_address": "h:1", "snappy": "true", "deflate": "true"}, "cannot both be true"),
])
def test_bad_options_name_the_option(raw: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_options(raw)


def test_channel_checked_when_needed() -> None:
    with pytest.raises(OptionError, match="option channel"):
        parse_options({"topic": "t", "nsqd_tcp_address": "h:1"}, need_channel=True)
