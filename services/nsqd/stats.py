"""/stats: the snapshot nsqd reports, as NSQ's JSON and text formats, computed only when asked.

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
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from shared.flags import format_duration

from .version import VERSION, version_line

if TYPE_CHECKING:
    from .nsqd import NSQD


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


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def collect(nsqd: NSQD, topic: str | None, channel: str | None, include_clients: bool,
            include_mem: bool) -> dict[str, Any]:
    """The JSON document of ``/stats?format=json`` (``null`` lists where NSQ has them)."""
    now = time.monotonic()
    topics: list[dict[str, Any]] | None
    if topic is None:
        topics = [nsqd.topics[name].stats(channel, include_clients, now) for name in sorted(nsqd.topics)
                  if channel is None or channel in nsqd.topics[name].channels]
    elif topic in nsqd.topics and (channel is None or channel in nsqd.topics[topic].channels):
        topics = [nsqd.topics[topic].stats(channel, include_clients, now)]
    else:
        topics = None
    producers = [client.stats() for client in nsqd.producers(topic)]
    document: dict[str, Any] = {"version": VERSION, "health": nsqd.health, "start_time": nsqd.start_time,
                                "topics": topics}
    if include_mem:
        document["memory"] = memory_stats(nsqd.gc_pauses)
    document["producers"] = producers or None
    return document


def render_text(nsqd: NSQD, document: dict[str, Any]) -> str:
    """NSQ's plain-text /stats."""
    started = datetime.fromtimestamp(nsqd.start_time, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [version_line("nsqd"), f"start_time {started}",
             f"uptime {format_duration(time.time() - nsqd.start_time)}", "", f"Health: {document['health']}"]
    if "memory" in document:
        lines += ["", "Memory:"] + [f"   {key:<25}\t{value}" for key, value in document["memory"].items()]
    topics = document["topics"] or []
    lines.append("")
    lines.append("Topics:" if topics else "Topics: None")
    for topic in topics:
        lines.append(_topic_line(topic))
        for channel in topic["channels"]:
            lines.append(_channel_line(channel))
            lines += [f"        {_client_line(client)}" for client in channel["clients"] or []]
    producers = document["producers"] or []
    lines += ["", "Producers:" if producers else "Producers: None"]
    lines += [f"   {_client_line(client)}" for client in producers]
    return "\n".join(lines) + "\n"


def _e2e_text(e2e: dict[str, Any]) -> str:
    return ", ".join(f"{p['quantile'] * 100:.1f}%: {format_duration(p['value'] / 1e9)}"
                     for p in e2e["percentiles"] or [])


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
