"""/stats: the snapshot nsqd reports, as NSQ's JSON and text formats, computed only when asked: each topic's and
channel's figures read from them here (as NSQ's ``NewTopicStats`` and ``NewChannelStats``), not by them.

The ``memory`` block keeps NSQ's Go field names, filled from what CPython has: allocated blocks stand in for
heap objects, resident memory for heap in use, and GC pauses are timed through ``gc.callbacks``. Fields with
no CPython counterpart (idle, released, next GC) are 0.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from shared.flags import format_duration
from shared.http_auth import may_see
from shared.version import VERSION, version_line

from .latency_window import DISABLED, summarize

if TYPE_CHECKING:
    from shared.auth_reply import AuthState

    from .channel import Channel
    from .nsqd import NSQD
    from .options import Options
    from .topic import Topic


class GCPauses:
    """Times the last 256 garbage collections; registered while an nsqd runs."""

    def __init__(self) -> None:
        self.pauses_ns: deque[int] = deque(maxlen=256)
        self._started = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        elif self._started:
            self.pauses_ns.append(time.perf_counter_ns() - self._started)

    def percentile_usec(self, quantile: float) -> int:
        if not self.pauses_ns:
            return 0
        ordered = sorted(self.pauses_ns)
        return ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] // 1000


def memory_stats(pauses: GCPauses) -> dict[str, int]:
    return {
        "heap_objects": sys.getallocatedblocks(),
        "heap_idle_bytes": 0,
        "heap_in_use_bytes": _resident_bytes(),
        "heap_released_bytes": 0,
        "gc_pause_usec_100": pauses.percentile_usec(1.0),
        "gc_pause_usec_99": pauses.percentile_usec(0.99),
        "gc_pause_usec_95": pauses.percentile_usec(0.95),
        "next_gc_bytes": 0,
        "gc_total_runs": sum(generation["collections"] for generation in gc.get_stats()),
    }


def give_back_memory() -> None:
    """What ``POST /debug/freememory`` does (Go's ``debug.FreeOSMemory``): a full collection, then glibc's
    ``malloc_trim``, which returns the free pages of every arena to the OS (skipped where there is no glibc)."""
    import ctypes  # only when asked: half a megabyte of an idle nsqd's memory otherwise

    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)  # the process's own symbols: glibc's, where it is linked
    except (OSError, AttributeError):
        pass


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def collect(nsqd: NSQD, topic: str | None, channel: str | None, include_clients: bool,
            include_mem: bool) -> dict[str, Any]:
    """The JSON document of ``/stats?format=json``, with NSQ's ``null`` lists: ``topics`` and ``producers`` when
    the topic filter matches nothing, ``clients`` and ``producers`` without clients or producers to list."""
    document: dict[str, Any] = {"version": VERSION, "health": nsqd.health, "start_time": nsqd.start_time,
                                "topics": None}
    if include_mem:
        document["memory"] = memory_stats(nsqd.gc_pauses)
    document["producers"] = None
    if nsqd.replication is not None:  # beyond NSQ's fields, and only with replication
        document["replication"] = nsqd.replication.stats()
    if topic is None or topic in nsqd.topics:  # NSQ lists nothing at all for an unknown topic
        document["topics"] = _topics(nsqd, topic, channel, include_clients)
        if include_clients:
            # every producer is listed, as in NSQ; a topic filter only narrows its pub_counts
            document["producers"] = [_narrow_pub_counts(client.stats(), topic)
                                     for client in nsqd.producers(None)] or None
    return document


def narrow_to(document: dict[str, Any], identity: AuthState) -> None:
    """Under ``--http-auth-required``: only the topics ``identity``'s authorizations name, of their channels those
    it may subscribe to or administer, and of the producers' counts those of the topics shown."""
    if document["topics"] is not None:
        document["topics"] = [topic for topic in document["topics"] if may_see(identity, topic["topic_name"])]
        for topic in document["topics"]:
            topic["channels"] = [channel for channel in topic["channels"]
                                 if may_see(identity, topic["topic_name"], channel["channel_name"])]
    producers = []
    for producer in document["producers"] or []:
        counts = [count for count in producer.get("pub_counts") or [] if may_see(identity, count["topic"])]
        if counts:
            producers.append({**producer, "pub_counts": counts})
    document["producers"] = producers or None


def _topics(nsqd: NSQD, topic: str | None, channel: str | None, include_clients: bool) -> list[dict[str, Any]]:
    """A channel filter skips the topics without that channel, which can leave [] (never null, as in NSQ)."""
    now = time.monotonic()
    topics = []
    for name in sorted(nsqd.topics) if topic is None else [topic]:
        if channel is None or channel in nsqd.topics[name].channels:
            entry = topic_stats(nsqd.topics[name], nsqd.opts, channel, include_clients, now)
            entry.update(nsqd.retention.stats(name))  # beyond NSQ: only for a topic that retains
            for channel_entry in entry["channels"]:
                for client_stats in channel_entry["clients"] or []:
                    _narrow_pub_counts(client_stats, topic)
            topics.append(entry)
    return topics


def topic_stats(topic: Topic, opts: Options, channel_name: str | None, include_clients: bool,
                now: float) -> dict[str, Any]:
    """A topic's entry, with its channels' (or only ``channel_name``'s)."""
    names = sorted(topic.channels) if channel_name is None else [channel_name]
    channels = [channel_stats(topic.channels[name], opts, include_clients, now) for name in names]
    stats = {
        "topic_name": topic.name, "channels": channels, "depth": topic.depth, "backend_depth": topic.backend_depth,
        "message_count": topic.message_count, "message_bytes": topic.message_bytes, "paused": topic.paused,
        "e2e_processing_latency": _topic_e2e(topic, opts, now),
    }
    if opts.max_bytes_per_queue:  # beyond NSQ: only with the cap
        stats["dropped_count"] = topic.dropped_count
    if topic.ttl_ns:  # beyond NSQ: only with a TTL
        stats["ttl"] = format_duration(topic.ttl_ns / 1e9)
    return stats


def _topic_e2e(topic: Topic, opts: Options, now: float) -> dict[str, Any]:
    windows = [channel.e2e for channel in topic.channels.values() if channel.e2e is not None]
    if not windows:
        return DISABLED  # NSQ merges its channels' streams: with none there is nothing to report
    return summarize(opts.e2e_processing_latency_percentiles,
                     [part for window in windows for part in window.parts(now)])


def channel_stats(channel: Channel, opts: Options, include_clients: bool, now: float) -> dict[str, Any]:
    clients = [client.stats() for client in channel.clients.values()] if include_clients else None
    stats: dict[str, Any] = {
        "channel_name": channel.name, "depth": channel.depth, "backend_depth": channel.backend_depth,
        "in_flight_count": len(channel.in_flight), "deferred_count": len(channel.deferred),
        "message_count": channel.message_count,
    }
    # omitted when 0, as NSQ does
    deliveries = channel.ready
    if deliveries.zone_local_count:
        stats["zone_local_msg_count"] = deliveries.zone_local_count
    if deliveries.region_local_count:
        stats["region_local_msg_count"] = deliveries.region_local_count
    if deliveries.delivered_count:
        stats["global_msg_count"] = deliveries.delivered_count
    stats.update({
        "requeue_count": channel.requeue_count, "timeout_count": channel.timeout_count,
        "client_count": len(channel.clients), "clients": clients, "paused": channel.paused,
        "e2e_processing_latency": channel.e2e.result(now) if channel.e2e is not None else DISABLED,
    })
    if opts.max_bytes_per_queue:  # beyond NSQ: only with the cap
        stats["dropped_count"] = channel.dropped_count
    if channel.ttl_ns or channel.expired_count:  # beyond NSQ: only with a TTL
        stats["expired_count"] = channel.expired_count
    if channel.max_attempts or channel.dead_letter_count or channel.dead_letters:  # beyond NSQ: dead letters
        stats["max_attempts"] = channel.max_attempts
        stats["dead_letter_count"] = channel.dead_letter_count
        stats["dead_letter_depth"] = len(channel.dead_letters)
    return stats


def _narrow_pub_counts(client_stats: dict[str, Any], topic: str | None) -> dict[str, Any]:
    """NSQ's ``ClientStats(topic)``: with a topic filter, ``pub_counts`` only for that topic (omitted if none).

    NSQ 1.3 also stops after the first topic even without a filter (nsqio/nsq#1497); every topic is listed here.
    """
    counts = client_stats.get("pub_counts")
    if topic is not None and counts:
        counts = [count for count in counts if count["topic"] == topic]
        if counts:
            client_stats["pub_counts"] = counts
        else:
            del client_stats["pub_counts"]
    return client_stats


def render_text(nsqd: NSQD, document: dict[str, Any]) -> str:
    """NSQ's plain-text /stats."""
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(nsqd.start_time))
    lines = [version_line("nsqd"), f"start_time {started}",
             f"uptime {format_duration(time.time() - nsqd.start_time)}", "", f"Health: {document['health']}"]
    if "memory" in document:
        lines += ["", "Memory:"] + [f"   {key:<25}\t{value}" for key, value in document["memory"].items()]
    topics = document["topics"] or []
    lines.append("")
    lines.append("Topics:" if topics else "Topics: None")
    for index, topic in enumerate(topics):
        if index:
            lines.append("")  # NSQ starts every topic after the first with a blank line
        lines.append(_topic_line(topic))
        for channel in topic["channels"]:
            lines.append(_channel_line(channel))
            lines += [f"        {_client_line(client)}" for client in channel["clients"] or []]
    producers = document["producers"] or []
    lines += ["", "Producers:" if producers else "Producers: None"]
    lines += [f"   {_client_line(client)}" for client in producers]
    return "\n".join(lines) + "\n"


def _e2e_text(e2e: dict[str, Any]) -> str:
    return ", ".join(_nanoseconds_text(p["value"]) for p in e2e["percentiles"] or [])


def _nanoseconds_text(value: float) -> str:
    """NSQ's NanoSecondToHuman: ``1.5ms``, ``800.0us``."""
    for scale, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if value > scale:
            return f"{value / scale:.1f}{suffix}"
    return f"{value:.1f}ns"


def _topic_line(t: dict[str, Any]) -> str:
    prefix = "*P " if t["paused"] else "   "
    return (f"{prefix}[{t['topic_name']:<15}] depth: {t['depth']:<5} be-depth: {t['backend_depth']:<5} "
            f"msgs: {t['message_count']:<8} e2e%: {_e2e_text(t['e2e_processing_latency'])}")


def _channel_line(c: dict[str, Any]) -> str:
    prefix = "   *P " if c["paused"] else "      "
    return (f"{prefix}[{c['channel_name']:<25}] depth: {c['depth']:<5} be-depth: {c['backend_depth']:<5} "
            f"inflt: {c['in_flight_count']:<4} def: {c['deferred_count']:<4} re-q: {c['requeue_count']:<5} "
            f"timeout: {c['timeout_count']:<5} msgs: {c['message_count']:<8} "
            f"e2e%: {_e2e_text(c['e2e_processing_latency'])}")


def _client_line(s: dict[str, Any]) -> str:
    port = s["remote_address"].rsplit(":", 1)[-1]
    identity = f"{s['hostname']}:{port} {s['user_agent']}"
    connected = format_duration(max(0, int(time.time()) - s["connect_ts"]))
    if s.get("pub_counts"):
        total = sum(p["count"] for p in s["pub_counts"])
        topics = ",".join(f"{p['topic']}={p['count']}" for p in s["pub_counts"])
        return f"[{s['version']} {identity:<21}] msgs: {total:<8} topics: {topics} connected: {connected}"
    return (f"[{s['version']} {identity:<21}] state: {s['state']} inflt: {s['in_flight_count']:<4} "
            f"rdy: {s['ready_count']:<4} fin: {s['finish_count']:<8} re-q: {s['requeue_count']:<8} "
            f"msgs: {s['message_count']:<8} connected: {connected}")
