"""The admin's cluster view from canned answers: NSQ 1.3's nsqd and lookupd (with the nsqadmin answers captured
beside them) and our own nsqd's /stats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from services.admin import aggregation
from shared.cluster_info import http_address

REFERENCE = Path(__file__).resolve().parent.parent / "reference"
NODE_A, NODE_B = "127.0.0.1:14151", "127.0.0.1:14251"
# the nsqadmin samples were captured 20 s after the clients connected (connect_ts 1795316034)
CAPTURED_AT = 1795316054


def load(name: str) -> Any:
    return json.loads((REFERENCE / name).read_text())


def both_nodes(now: float = CAPTURED_AT, clients: bool = True) -> list[dict[str, Any]]:
    """Per-node rows of the two nsqd behind the nsqadmin samples."""
    answers = [(NODE_A, load("nsqd_stats_with_tcp_producer.json")), (NODE_B, load("nsqd2_stats.json"))]
    rows = []
    for node, stats in answers:
        if not clients:
            for topic in stats["topics"]:
                for channel in topic["channels"]:
                    channel["clients"] = None  # what include_clients=false answers
        rows += aggregation.node_topics(node, "vm", stats, now)
    return rows


def by_node(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # nsqadmin sorts by hostname only, so the order of two nodes on one host is arbitrary
    return sorted(rows, key=lambda row: row["node"])


def test_channel_matches_nsqadmin() -> None:
    rows = [channel for topic in both_nodes() for channel in topic["channels"]]
    ours = aggregation.aggregate_channel("sample_topic", "sample_channel", rows)
    theirs = load("nsqadmin_api_channel.json")
    del theirs["message"]
    ours["nodes"], theirs["nodes"] = by_node(ours["nodes"]), by_node(theirs["nodes"])
    assert ours == theirs


def test_topic_matches_nsqadmin() -> None:
    ours = aggregation.aggregate_topic("sample_topic", both_nodes(clients=False))
    theirs = load("nsqadmin_api_topic.json")
    top_level = {key for key in theirs if key not in ("nodes", "channels", "message")}
    assert {key: ours[key] for key in top_level} == {key: theirs[key] for key in top_level}
    assert (ours["message_count"], ours["depth"], ours["paused"]) == (14, 0, False)
    # nsqadmin's per-node rows, channels aside (it sums into the first node's channel object in place)
    strip = [{key: value for key, value in row.items() if key != "channels"} for row in by_node(theirs["nodes"])]
    assert [{key: value for key, value in row.items() if key != "channels"} for row in ours["nodes"]] == strip
    [channel] = ours["channels"]
    [their_channel] = theirs["channels"]
    for key in ("depth", "in_flight_count", "deferred_count", "requeue_count", "timeout_count", "message_count",
                "delivery_msg_count", "global_msg_count", "client_count", "paused", "clients"):
        assert channel[key] == their_channel[key], key
    assert by_node(channel["nodes"]) == by_node(their_channel["nodes"] + [ours["nodes"][0]["channels"][0]])


def test_node_matches_nsqadmin() -> None:
    stats = load("nsqd_stats.json")
    ours = aggregation.node_summary(NODE_A, aggregation.node_topics(NODE_A, "vm", stats, 1795316043))
    theirs = load("nsqadmin_api_node.json")
    del theirs["message"]
    assert ours == theirs


def test_nodes_match_nsqadmin() -> None:
    ours = aggregation.merge_nodes([("127.0.0.1:14161", load("lookupd_nodes.json")["producers"])])
    assert ours == load("nsqadmin_api_nodes.json")["nodes"]


def test_nodes_merged_across_lookupds_and_out_of_date() -> None:
    producers = load("lookupd_nodes.json")["producers"]
    older = json.loads(json.dumps(producers))
    older[1]["version"] = "1.2.1"
    rows = aggregation.merge_nodes([("lookupd-a:4161", producers), ("lookupd-b:4161", older)])
    assert len(rows) == 2
    assert [len(row["remote_addresses"]) for row in rows] == [2, 2]
    assert rows[0]["remote_addresses"][1] == "lookupd-b:4161/127.0.0.1:60076"
    # the first answer seen for a node wins (1.3.0 for both here), so nothing is out of date
    assert not any(row["out_of_date"] for row in rows)
    rows = aggregation.merge_nodes([("lookupd-b:4161", older)])
    assert [row["out_of_date"] for row in rows] == [False, True]


def test_our_nsqd_stats_read() -> None:
    """Our nsqd omits zero locality counts and lists no clients for an empty channel: both read."""
    stats = load("ours_nsqd_stats.json")
    rows = aggregation.node_topics("127.0.0.1:4151", "host", stats, stats["start_time"] + 5)
    topic = aggregation.aggregate_topic("orders", rows)
    assert topic["message_count"] == 6
    audit, billing = topic["channels"]
    assert (audit["channel_name"], audit["paused"], audit["client_count"]) == ("audit", True, 0)
    assert (billing["message_count"], billing["client_count"], billing["delivery_msg_count"]) == (6, 1, 6)
    channel = aggregation.aggregate_channel("orders", "billing", rows[0]["channels"][1:])
    [client] = channel["clients"]
    assert client["user_agent"] == "billing/1.0"
    assert client["node"] == "127.0.0.1:4151"
    assert client["connected"] == 5 * 1_000_000_000
    assert aggregation.counter_stats(rows) == {
        "orders:audit:127.0.0.1:4151": {"node": "127.0.0.1:4151", "topic_name": "orders", "channel_name": "audit",
                                        "message_count": 0},
        "orders:billing:127.0.0.1:4151": {"node": "127.0.0.1:4151", "topic_name": "orders",
                                          "channel_name": "billing", "message_count": 6}}


def test_e2e_merged_across_nodes() -> None:
    def node(count: int, p99: float, p50: float) -> dict[str, Any]:
        percentiles = [{"quantile": 0.99, "value": p99}, {"quantile": 0.5, "value": p50}]
        topic = {"topic_name": "t", "e2e_processing_latency": {"count": count, "percentiles": percentiles}}
        latency: dict[str, Any] = aggregation.node_topics("n", "h", {"topics": [topic]}, 0)[0]["e2e_processing_latency"]
        return latency

    merged = aggregation.aggregate_e2e([node(10, 100.0, 10.0), node(30, 200.0, 20.0)], "t", "")
    assert merged["count"] == 40
    p99, p50 = merged["percentiles"]
    assert (p99["quantile"], p99["min"], p99["max"], p99["average"], p99["count"]) == (0.99, 100.0, 200.0, 175.0, 40)
    assert (p50["min"], p50["max"], p50["average"]) == (10.0, 20.0, 17.5)
    empty = aggregation.aggregate_e2e([], "t", "c")
    assert empty == {"count": 0, "percentiles": None, "topic": "t", "channel": "c", "host": "*"}


def test_producers_deduplicated_by_http_address() -> None:
    producers = load("lookupd_lookup.json")["producers"]
    merged = aggregation.merge_producers([producers, producers, []])
    assert [http_address(producer) for producer in merged] == [NODE_A, NODE_B]


def test_node_row_from_nsqd_given_directly() -> None:
    row = aggregation.nsqd_node_row(load("nsqd_info.json"), load("nsqd_stats.json"))
    assert row["topics"] == [{"topic": "sample_topic", "tombstoned": False}]
    assert row["version"] == "1.3.0"
    assert isinstance(row["http_port"], int)


# --- beyond NSQ: the counters and settings our nsqd reports only while a feature is in use -----------------------

EXTRA_TOPIC_KEYS = {"ttl", "dropped_count"}
EXTRA_CHANNEL_KEYS = {"expired_count", "max_attempts", "dead_letter_count", "dead_letter_depth", "dropped_count"}


def two_of_ours(node_a: dict[str, Any] | None = None, node_b: dict[str, Any] | None = None,
                billing_a: dict[str, Any] | None = None, billing_b: dict[str, Any] | None = None) -> dict[str, Any]:
    """Our nsqd's sample /stats on two nodes, with fields added to each topic and to each billing channel."""
    rows = []
    for node, topic_fields, billing_fields in ((NODE_A, node_a, billing_a), (NODE_B, node_b, billing_b)):
        stats = load("ours_nsqd_stats.json")
        [topic] = stats["topics"]
        topic.update(topic_fields or {})
        topic["channels"][1].update(billing_fields or {})
        rows += aggregation.node_topics(node, "vm", stats, stats["start_time"] + 5)
    return aggregation.aggregate_topic("orders", rows)


def test_without_the_features_nothing_beyond_nsqadmin_is_added() -> None:
    topic = two_of_ours()
    theirs_topic, theirs_channel = load("nsqadmin_api_topic.json"), load("nsqadmin_api_channel.json")
    assert set(topic) == set(theirs_topic) - {"message"}
    assert {key for row in topic["nodes"] for key in row} == {key for row in theirs_topic["nodes"] for key in row}
    for channel in topic["channels"]:
        assert not EXTRA_CHANNEL_KEYS & set(channel)
        assert set(channel) <= set(theirs_channel) | {"zone_local_msg_count", "region_local_msg_count"}
        assert not any(EXTRA_CHANNEL_KEYS & set(row) for row in channel["nodes"])
    assert not any(EXTRA_TOPIC_KEYS & set(row) for row in topic["nodes"])


def test_counters_beyond_nsq_are_summed_over_the_nodes_that_have_them() -> None:
    dead = {"max_attempts": 3, "dead_letter_count": 5, "dead_letter_depth": 4}
    topic = two_of_ours(node_a={"ttl": "1h0m0s", "dropped_count": 4}, node_b={"ttl": "1h0m0s", "dropped_count": 6},
                        billing_a={"expired_count": 2, **dead, "dropped_count": 1},
                        billing_b={"max_attempts": 3, "dead_letter_count": 1, "dead_letter_depth": 1})
    assert (topic["ttl"], topic["dropped_count"], topic["message_count"]) == ("1h0m0s", 10, 12)
    assert [row["dropped_count"] for row in topic["nodes"]] == [4, 6]
    audit, billing = topic["channels"]
    assert not EXTRA_CHANNEL_KEYS & set(audit)  # no node reports them for it
    assert {key: billing[key] for key in EXTRA_CHANNEL_KEYS} == {
        "expired_count": 2, "max_attempts": 3, "dead_letter_count": 6, "dead_letter_depth": 5, "dropped_count": 1}
    node_a, node_b = billing["nodes"]
    assert {key: node_a[key] for key in EXTRA_CHANNEL_KEYS} == {"expired_count": 2, **dead, "dropped_count": 1}
    assert EXTRA_CHANNEL_KEYS & set(node_b) == {"max_attempts", "dead_letter_count", "dead_letter_depth"}


def test_a_setting_the_nodes_do_not_share_is_null_in_the_total() -> None:
    topic = two_of_ours(node_a={"ttl": "1h0m0s"}, billing_a={"max_attempts": 3}, billing_b={"max_attempts": 5})
    assert topic["ttl"] is None  # the second node keeps its messages for ever
    assert [row.get("ttl") for row in topic["nodes"]] == ["1h0m0s", None]
    assert topic["channels"][1]["max_attempts"] is None
    # a node that reports no limit has none: 0, as a node whose limit was turned off with dead letters still parked
    topic = two_of_ours(billing_a={"max_attempts": 0, "dead_letter_count": 1, "dead_letter_depth": 1})
    assert topic["channels"][1]["max_attempts"] == 0
