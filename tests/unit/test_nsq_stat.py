"""nsq_stat's pure parts: flags, aggregation of real nsqd/lookupd JSON, the table and its header cadence."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from apps.nsq_stat import (
    HEADER,
    ChannelStats,
    Options,
    Report,
    Sample,
    aggregate,
    channel_stats,
    format_row,
    producer_addresses,
)
from shared.flags import FlagError, parse_command_line

REFERENCE = Path(__file__).resolve().parent.parent / "reference"


def reference(name: str) -> Any:
    return json.loads((REFERENCE / name).read_text())


def options(*argv: str) -> Options:
    opts, _ = parse_command_line(Options, list(argv))
    opts.validate()
    return opts


# --- flags -----------------------------------------------------------------------------------------------------

def test_defaults_are_nsqs() -> None:
    opts = options("--topic=t", "--channel=c", "--nsqd-http-address=127.0.0.1:4151")
    assert (opts.interval, opts.count) == (2.0, 0)
    assert (opts.http_client_connect_timeout, opts.http_client_request_timeout) == (2.0, 5.0)


def test_repeatable_addresses_and_durations() -> None:
    opts = options("-topic", "t", "-channel", "c", "--lookupd-http-address=a:4161", "--lookupd-http-address=b:4161",
                   "--interval=250ms", "--count=3")
    assert opts.lookupd_http_address == ["a:4161", "b:4161"]
    assert (opts.interval, opts.count) == (0.25, 3)


@pytest.mark.parametrize(("argv", "message"), [
    ((), "--topic and --channel are required"),
    (("--topic=t",), "--topic and --channel are required"),
    (("--topic=t", "--channel=c"), "--nsqd-http-address or --lookupd-http-address required"),
    (("--topic=t", "--channel=c", "--nsqd-http-address=a:1", "--lookupd-http-address=b:2"),
     "use --nsqd-http-address or --lookupd-http-address not both"),
    (("--topic=t", "--channel=c", "--nsqd-http-address=http://a:1"),
     "--nsqd-http-address error - address should not contain scheme"),
    (("--topic=t", "--channel=c", "--lookupd-http-address=https://a:1"),
     "--lookupd-http-address error - address should not contain scheme"),
    (("--topic=t", "--channel=c", "--nsqd-http-address=a:1", "--interval=0"), "--interval should be positive"),
    (("--topic=t", "--channel=c", "--nsqd-http-address=a:1", "--http-client-connect-timeout=-1s"),
     "--http-client-connect-timeout should be positive"),
    (("--topic=t", "--channel=c", "--nsqd-http-address=a:1", "--http-client-request-timeout=0s"),
     "--http-client-request-timeout should be positive"),
    (("--topic=t", "--channel=c", "--nsqd-http-address=a:1", "--count=-1"), "--count should be positive"),
])
def test_bad_flags_are_named(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(FlagError, match=f"^{message}$"):
        options(*argv)


# --- aggregation -----------------------------------------------------------------------------------------------

def test_channel_of_a_real_nsqd_stats_document() -> None:
    stats = channel_stats(reference("nsqd_stats_topic_channel.json"), "sample_topic", "sample_channel")
    assert stats == ChannelStats(deferred_count=1, message_count=7, client_count=1)


def test_client_count_without_client_list() -> None:
    stats = channel_stats(reference("nsqd_stats_no_clients.json"), "sample_topic", "sample_channel")
    assert stats is not None and stats.client_count == 1


def test_memory_depth_is_depth_less_backend_depth() -> None:
    document = {"topics": [{"topic_name": "t", "channels": [
        {"channel_name": "c", "depth": 12, "backend_depth": 5, "in_flight_count": 2, "deferred_count": 3,
         "requeue_count": 4, "timeout_count": 6, "message_count": 40, "clients": [{}, {}]}]}]}
    assert channel_stats(document, "t", "c") == ChannelStats(12, 7, 5, 2, 3, 4, 6, 40, 2)


def test_nodes_are_summed() -> None:
    documents = [reference("nsqd_stats.json"), reference("nsqd_stats_no_clients.json")]
    assert aggregate(documents, "sample_topic", "sample_channel") == \
        ChannelStats(deferred_count=2, message_count=14, client_count=2)


@pytest.mark.parametrize(("topic", "channel"), [("sample_topic", "other"), ("other", "sample_channel")])
def test_another_topic_or_channel_is_not_found(topic: str, channel: str) -> None:
    assert aggregate([reference("nsqd_stats.json")], topic, channel) is None


def test_no_topics_is_not_found() -> None:
    assert aggregate([{"topics": None}, {"topics": []}, {}], "t", "c") is None
    assert aggregate([], "t", "c") is None


def test_a_node_without_the_channel_adds_nothing() -> None:
    documents = [reference("nsqd_stats.json"), {"topics": []}]
    assert aggregate(documents, "sample_topic", "sample_channel") == \
        channel_stats(reference("nsqd_stats.json"), "sample_topic", "sample_channel")


def test_producer_addresses_of_a_real_lookup() -> None:
    assert producer_addresses([reference("lookupd_lookup.json")["producers"]]) == \
        ["127.0.0.1:14151", "127.0.0.1:14251"]


def test_producers_known_to_several_lookupds_are_polled_once() -> None:
    lookup = reference("lookupd_lookup.json")
    other = [{"broadcast_address": "::1", "tcp_port": 4150, "http_port": 4151}, lookup["producers"][1]]
    assert producer_addresses([lookup["producers"], other, []]) == \
        ["127.0.0.1:14151", "127.0.0.1:14251", "[::1]:4151"]


# --- the table -------------------------------------------------------------------------------------------------

def test_header_is_nsqs() -> None:
    assert HEADER == (
        "------rate------+----------------depth----------------+--------------metadata---------------",
        "ingress  egress |   total     mem    disk inflt   def |     req     t-o         msgs clients",
    )


def test_row_layout() -> None:
    previous = ChannelStats(depth=10, message_count=100)
    current = ChannelStats(1234, 1000, 234, 12, 3, 45, 6, 123456, 7)
    row = format_row(current, previous, 2.0)
    # ingress (123456 - 100) / 2; egress removes the depth growth (1234 - 10)
    assert row == "  61678   61066 |    1234    1000     234    12     3 |      45       6       123456       7"


def test_rates_truncate_toward_zero() -> None:
    assert format_row(ChannelStats(message_count=7), ChannelStats(), 2.0).split()[:2] == ["3", "3"]
    assert format_row(ChannelStats(depth=0, message_count=5), ChannelStats(depth=7, message_count=0),
                      0.5).split()[:2] == ["10", "24"]
    assert format_row(ChannelStats(message_count=0), ChannelStats(message_count=3), 2.0).split()[:2] == ["-1", "-1"]


def sample(messages: int, nodes: tuple[str, ...] = ("a:1",)) -> Sample:
    return Sample(ChannelStats(message_count=messages), frozenset(nodes))


def test_first_sample_is_the_baseline() -> None:
    report = Report(1.0)
    assert report.add(sample(5)) == list(HEADER)
    lines = report.add(sample(8))
    assert len(lines) == 1 and lines[0].split()[:2] == ["3", "3"]
    assert report.rows == 1


def test_header_before_every_25th_sample() -> None:
    report = Report(1.0)
    printed = [line for n in range(60) for line in report.add(sample(n))]
    headers = [index for index, line in enumerate(printed) if line == HEADER[0]]
    # NSQ counts the baseline: 24 rows under the first header, 25 under the next ones
    assert headers == [0, 2 + 24, 2 + 24 + 2 + 25]
    assert report.rows == 59


def test_a_missed_poll_starts_a_new_baseline() -> None:
    report = Report(1.0)
    report.add(sample(1))
    report.missed()
    assert report.add(sample(100)) == []  # no rate over two intervals
    assert report.add(sample(103))[0].split()[:2] == ["3", "3"]


def test_other_nodes_start_a_new_baseline() -> None:
    report = Report(1.0)
    report.add(sample(10, ("a:1", "b:1")))
    assert report.add(sample(4, ("a:1",))) == []  # a node lost: no negative rate
    assert report.add(sample(6, ("a:1",)))[0].split()[:2] == ["2", "2"]
