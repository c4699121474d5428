"""The cluster view, built from what lookupd and nsqd answer: pure functions from their JSON to nsqadmin's JSON.

Input is nsqd's ``/stats?format=json`` and the producers of lookupd's ``/nodes`` and ``/lookup`` answers, NSQ's or
ours (the same shapes), as ``shared.cluster_info`` reads them. Output is the shape of nsqadmin's ``/api/...``
answers: per-node rows carry ``node`` (the nsqd's ``broadcast_address:http_port``) and ``hostname``; aggregates
carry ``"node": "*"`` and the per-node rows they sum under ``nodes``. Beyond nsqadmin, what our nsqd reports only
while a feature is in use (a topic's ``ttl``, ``dropped_count`` and retention; a channel's ``expired_count``, ``max_attempts``,
``dead_letter_count``, ``dead_letter_depth`` and ``dropped_count``) is carried when some node has it, so that without
those features every answer is nsqadmin's. Nothing here does I/O, so every rule is tested from canned answers.
"""

from __future__ import annotations

import re
from typing import Any, Iterable

from shared.cluster_info import http_address, tcp_address

Json = dict[str, Any]

_TOPIC_SUMS = ("depth", "memory_depth", "backend_depth", "message_count", "delivery_msg_count")
_CHANNEL_SUMS = ("depth", "memory_depth", "backend_depth", "in_flight_count", "deferred_count", "requeue_count",
                 "timeout_count", "message_count", "delivery_msg_count", "zone_local_msg_count",
                 "region_local_msg_count", "global_msg_count", "client_count")
_LOCALITY_COUNTS = ("zone_local_msg_count", "region_local_msg_count", "global_msg_count")
# beyond NSQ: nsqd reports these only while the feature behind them is in use (a TTL, an attempts limit or dead
# letters, --max-bytes-per-queue), so they are carried only when a node has them: counts summed, settings as
# (key, what a node without it has)
_TOPIC_EXTRA_SUMS = ("dropped_count", "retained_count", "retained_bytes", "retention_refused_count")
_TOPIC_SETTINGS = (("ttl", "0s"), ("retention_time", "0s"), ("retention_bytes", 0))
# the oldest message a topic retains, over its nodes: the earliest a rewind can go back to (0: none)
_OLDEST_RETAINED = "retained_oldest_timestamp"
_CHANNEL_EXTRA_SUMS = ("expired_count", "dead_letter_count", "dead_letter_depth", "dropped_count")
_CHANNEL_SETTINGS = (("max_attempts", 0),)
_CLIENT_FIELDS = ("remote_address", "version", "client_id", "hostname", "user_agent", "connect_ts")
_CLIENT_COUNTS = ("in_flight_count", "ready_count", "finish_count", "requeue_count", "message_count", "sample_rate")
_CLIENT_FLAGS = ("deflate", "snappy", "authed")
_CLIENT_TEXTS = ("auth_identity", "auth_identity_url")
_CLIENT_TLS = (("tls", False), ("tls_cipher_suite", ""), ("tls_version", ""), ("tls_negotiated_protocol", ""),
               ("tls_negotiated_protocol_is_mutual", False))
_TOPOLOGY = ("topology_zone", "topology_region")
_NANOS = 1_000_000_000


# --- one nsqd's /stats, as nsqadmin's per-node rows ---------------------------------------------------------------

def node_topics(node: str, hostname: str, stats: Json, now: float) -> list[Json]:
    """Every topic of one nsqd's ``/stats`` as nsqadmin's per-node topic rows (channels and clients inside)."""
    return [_node_topic(node, hostname, topic, now) for topic in stats.get("topics") or []]


def _node_topic(node: str, hostname: str, topic: Json, now: float) -> Json:
    name = topic["topic_name"]
    channels = [_node_channel(node, hostname, name, channel, now) for channel in topic.get("channels") or []]
    return {"node": node, "hostname": hostname, "topic_name": name, **_depths(topic),
            "message_count": topic.get("message_count", 0), "delivery_msg_count": 0, "nodes": None,
            "channels": channels, "paused": bool(topic.get("paused")),
            "e2e_processing_latency": _node_e2e(topic.get("e2e_processing_latency")),
            **_carried(topic, (*_TOPIC_EXTRA_SUMS, _OLDEST_RETAINED), _TOPIC_SETTINGS)}


def _node_channel(node: str, hostname: str, topic_name: str, channel: Json, now: float) -> Json:
    clients = channel.get("clients")
    row = {"node": node, "hostname": hostname, "topic_name": topic_name, "channel_name": channel["channel_name"],
           **_depths(channel)}
    for key in ("in_flight_count", "deferred_count", "requeue_count", "timeout_count", "message_count"):
        row[key] = channel.get(key, 0)
    locality = {key: channel[key] for key in _LOCALITY_COUNTS if channel.get(key)}
    row["delivery_msg_count"] = sum(locality.values())
    row.update({key: value for key, value in locality.items() if key != "global_msg_count"})
    row["global_msg_count"] = channel.get("global_msg_count", 0)
    row["client_count"] = channel.get("client_count", len(clients or []))
    row.update({"nodes": None, "paused": bool(channel.get("paused")),
                "clients": None if clients is None else [_client(node, client, now) for client in clients],
                "e2e_processing_latency": _node_e2e(channel.get("e2e_processing_latency"))})
    row.update(_carried(channel, _CHANNEL_EXTRA_SUMS, _CHANNEL_SETTINGS))
    return row


def _carried(stats: Json, sums: tuple[str, ...], settings: tuple[tuple[str, Any], ...]) -> Json:
    return {key: stats[key] for key in (*sums, *(key for key, _ in settings)) if key in stats}


def _depths(stats: Json) -> Json:
    depth, backend_depth = stats.get("depth", 0), stats.get("backend_depth", 0)
    return {"depth": depth, "memory_depth": depth - backend_depth, "backend_depth": backend_depth}


def _client(node: str, client: Json, now: float) -> Json:
    row: Json = {"node": node}
    row.update({key: client.get(key, "") for key in _CLIENT_FIELDS})
    # nsqadmin measures from the whole second, in nanoseconds (Go's time.Duration)
    row["connected"] = max(0, int(now) - int(client.get("connect_ts") or 0)) * _NANOS
    row.update({key: client.get(key, 0) for key in _CLIENT_COUNTS})
    row.update({key: bool(client.get(key)) for key in _CLIENT_FLAGS})
    row.update({key: client.get(key, "") for key in _CLIENT_TEXTS})
    row.update({key: client.get(key, default) for key, default in _CLIENT_TLS})
    row.update({key: client[key] for key in _TOPOLOGY if client.get(key)})
    return row


def _node_e2e(e2e: Json | None) -> Json:
    """nsqd's ``{"count", "percentiles": [{"quantile", "value"}]}`` as an aggregate of one."""
    e2e = e2e or {}
    count = e2e.get("count", 0)
    percentiles = [{"min": p["value"], "max": p["value"], "average": p["value"], "quantile": p["quantile"],
                    "count": count} for p in e2e.get("percentiles") or []]
    return {"count": count, "percentiles": percentiles or None, "topic": "", "channel": "", "host": ""}


# --- sums across nodes -------------------------------------------------------------------------------------------

def aggregate_topic(topic_name: str, node_rows: Iterable[Json]) -> Json:
    """One topic summed over its nodes (``nodes`` holds the per-node rows, ``channels`` the channels summed)."""
    rows = sorted(node_rows, key=_by_host)
    total: Json = {"node": "*", "hostname": "", "topic_name": topic_name}
    total.update({key: sum(row.get(key, 0) for row in rows) for key in _TOPIC_SUMS})
    by_channel: dict[str, list[Json]] = {}
    for row in rows:
        for channel in row["channels"]:
            by_channel.setdefault(channel["channel_name"], []).append(channel)
    total.update({"nodes": rows,
                  "channels": [aggregate_channel(topic_name, name, by_channel[name]) for name in sorted(by_channel)],
                  "paused": any(row["paused"] for row in rows),
                  "e2e_processing_latency": aggregate_e2e(
                      [row["e2e_processing_latency"] for row in rows], topic_name, ""),
                  **_extras(rows, _TOPIC_EXTRA_SUMS, _TOPIC_SETTINGS)})
    oldest = [row[_OLDEST_RETAINED] for row in rows if row.get(_OLDEST_RETAINED)]
    if any(_OLDEST_RETAINED in row for row in rows):
        total[_OLDEST_RETAINED] = min(oldest, default=0)
    return total


def aggregate_channel(topic_name: str, channel_name: str, node_rows: Iterable[Json]) -> Json:
    """One channel summed over its nodes; ``clients`` lists every node's clients (``None`` if none were asked)."""
    rows = sorted(node_rows, key=_by_host)
    total: Json = {"node": "*", "hostname": "", "topic_name": topic_name, "channel_name": channel_name}
    for key in _CHANNEL_SUMS:
        if key in ("zone_local_msg_count", "region_local_msg_count") and not any(key in row for row in rows):
            continue  # omitted when empty, as nsqadmin does
        total[key] = sum(row.get(key, 0) for row in rows)
    clients = [client for row in rows for client in row["clients"] or []]
    has_clients = any(row["clients"] is not None for row in rows)
    total.update({"nodes": rows,
                  "clients": sorted(clients, key=lambda c: (c["node"], c["remote_address"])) if has_clients
                  else None,
                  "paused": any(row["paused"] for row in rows),
                  "e2e_processing_latency": aggregate_e2e(
                      [row["e2e_processing_latency"] for row in rows], topic_name, channel_name),
                  **_extras(rows, _CHANNEL_EXTRA_SUMS, _CHANNEL_SETTINGS)})
    return total


def _extras(rows: list[Json], sums: tuple[str, ...], settings: tuple[tuple[str, Any], ...]) -> Json:
    """The fields beyond NSQ that some node has: counts summed; a setting the value every node shares (a node
    without it has none), or None where they differ (each node's is in its row)."""
    total: Json = {key: sum(row.get(key, 0) for row in rows) for key in sums if any(key in row for row in rows)}
    for key, unset in settings:
        if any(key in row for row in rows):
            values = {row.get(key, unset) for row in rows}
            total[key] = values.pop() if len(values) == 1 else None
    return total


def _by_host(row: Json) -> tuple[str, str]:
    return row["hostname"], row["node"]


def aggregate_e2e(parts: Iterable[Json], topic: str, channel: str) -> Json:
    """Latency quantiles merged across nodes: min of mins, max of maxes, the count-weighted average."""
    count = 0
    merged: dict[float, Json] = {}  # by quantile
    for part in parts:
        count += part["count"]
        for p in part["percentiles"] or []:
            row = merged.setdefault(p["quantile"], {"min": p["min"], "max": p["max"], "average": 0.0,
                                                    "quantile": p["quantile"], "count": 0})
            row["min"], row["max"] = min(row["min"], p["min"]), max(row["max"], p["max"])
            row["count"] += p["count"]
            if row["count"]:
                row["average"] += (p["average"] - row["average"]) * p["count"] / row["count"]
    percentiles = [merged[q] for q in sorted(merged, reverse=True)]
    return {"count": count, "percentiles": percentiles or None, "topic": topic, "channel": channel, "host": "*"}


def node_summary(node: str, topic_rows: list[Json]) -> Json:
    """nsqadmin's ``/api/nodes/:node``: the node's topics with their totals."""
    rows = sorted(topic_rows, key=lambda row: row["topic_name"])
    return {"node": node, "topics": rows, "total_messages": sum(row["message_count"] for row in rows),
            "total_clients": sum(channel["client_count"] for row in rows for channel in row["channels"])}


def counter_stats(topic_rows: Iterable[Json]) -> Json:
    """nsqadmin's ``/api/counter`` ``stats``: every channel's message count on every node."""
    stats = {}
    for topic in topic_rows:
        for channel in topic["channels"]:
            key = f"{topic['topic_name']}:{channel['channel_name']}:{channel['node']}"
            stats[key] = {"node": channel["node"], "topic_name": topic["topic_name"],
                          "channel_name": channel["channel_name"], "message_count": channel["message_count"]}
    return stats


# --- lookupd answers ---------------------------------------------------------------------------------------------

def merge_nodes(answers: Iterable[tuple[str, list[Json]]]) -> list[Json]:
    """nsqadmin's ``/api/nodes`` from ``(lookupd address, its /nodes producers)`` pairs: one row per nsqd (by TCP
    address) with every lookupd that knows it in ``remote_addresses``; ``out_of_date`` when older than the newest."""
    by_tcp: dict[str, Json] = {}
    for lookupd, producers in answers:
        for producer in producers:
            key = tcp_address(producer)
            row = by_tcp.get(key)
            if row is None:
                row = by_tcp[key] = _node_row(producer)
            row["remote_addresses"].append(f"{lookupd}/{producer.get('remote_address') or 'N/A'}")
    newest = max((_version_key(row["version"]) for row in by_tcp.values()), default=(0, 0, 0, 0))
    for row in by_tcp.values():
        row["out_of_date"] = _version_key(row["version"]) < newest
    return sorted(by_tcp.values(), key=lambda row: (row["hostname"], row["broadcast_address"], row["http_port"]))


def _node_row(producer: Json) -> Json:
    names = producer.get("topics") or []
    tombstones = producer.get("tombstones") or [False] * len(names)
    row: Json = {"remote_addresses": [], "remote_address": producer.get("remote_address", ""),
                 "hostname": producer.get("hostname", ""), "broadcast_address": producer["broadcast_address"],
                 "tcp_port": int(producer["tcp_port"]), "http_port": int(producer["http_port"]),
                 "version": producer.get("version", "")}
    row.update({key: producer[key] for key in _TOPOLOGY if producer.get(key)})
    row["topics"] = sorted(({"topic": name, "tombstoned": bool(tombstoned)}
                            for name, tombstoned in zip(names, tombstones)), key=lambda t: t["topic"])
    row["out_of_date"] = False
    return row


def nsqd_node_row(info: Json, stats: Json) -> Json:
    """A ``/api/nodes`` row for an nsqd given directly (``--nsqd-http-address``), from its /info and /stats."""
    return {"remote_addresses": None, "remote_address": "", "hostname": info.get("hostname", ""),
            "broadcast_address": info.get("broadcast_address", ""), "tcp_port": info.get("tcp_port", 0),
            "http_port": info.get("http_port", 0), "version": info.get("version", ""),
            "topics": sorted(({"topic": topic["topic_name"], "tombstoned": False}
                              for topic in stats.get("topics") or []), key=lambda t: t["topic"]),
            "out_of_date": False}


def merge_producers(answers: Iterable[list[Json]]) -> list[Json]:
    """The producers of ``/lookup`` answers from several lookupds, each nsqd once (by HTTP address)."""
    seen: dict[str, Json] = {}
    for producers in answers:
        for producer in producers:
            seen.setdefault(http_address(producer), producer)
    return list(seen.values())


def _version_key(version: str) -> tuple[int, int, int, int]:
    """Semver order, enough for ``out_of_date``: a pre-release sorts before its release; unparsable is 0.0.0."""
    match = re.match(r"v?(\d+)\.(\d+)\.(\d+)(-)?", version or "")
    if match is None:
        return 0, 0, 0, 0
    return int(match.group(1)), int(match.group(2)), int(match.group(3)), 0 if match.group(4) else 1


def replication_view(nodes: list[Json]) -> Json:
    """Beyond NSQ (``/api/replication``): the replicated nsqd, each its ``/stats`` replication section under its
    admin ``address``, and per topic which node holds a copy of which nsqd's messages, and how many."""
    copies: dict[str, list[Json]] = {}
    for node in nodes:
        for store in node.get("mirroring") or []:
            for topic, depth in (store.get("topics") or {}).items():
                copies.setdefault(topic, []).append({"origin": store["origin"], "holder": node.get("node"),
                                                     "depth": depth, "origin_gone": store.get("origin_gone", False)})
    return {"nodes": sorted(nodes, key=lambda node: str(node.get("node"))),
            "topics": [{"topic": topic, "copies": sorted(held, key=lambda copy: (copy["origin"], str(copy["holder"])))}
                       for topic, held in sorted(copies.items())]}
