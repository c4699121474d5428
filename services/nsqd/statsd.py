"""Pushing nsqd's figures to statsd (``--statsd-address``), as NSQ's nsqd does: every ``--statsd-interval`` the
figures of ``/stats`` as statsd lines under NSQ's names (``<prefix>topic.<t>.channel.<c>.depth:5|g``), counters
as the change since the last push, packed into UDP packets of at most ``--statsd-udp-packet-size`` bytes (a
line longer than that goes alone) and spread over the interval less one second.

With ``--statsd-mem-stats`` the ``mem.*`` gauges follow ``/stats``' ``memory`` block (stats.py says which CPython
figures stand in for Go's). The lines and packets are made without I/O; ``StatsdPusher`` sends them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from typing import Any

from nsqclient.addresses import join_host_port, split_host_port

log = logging.getLogger("nsqd")

# the part of the interval the packets are spread over is the interval less this (NSQ's)
SPREAD_MARGIN = 1.0

Document = dict[str, Any]


def expand_prefix(template: str, broadcast_address: str, http_port: int) -> str:
    """``%s`` replaced by the host key (``host_port``, dots and colons as underscores), ending in a dot."""
    if not template:
        return ""
    host_key = join_host_port(broadcast_address, http_port).replace(".", "_").replace(":", "_")
    prefix = template.replace("%s", host_key)
    return prefix if prefix.endswith(".") else prefix + "."


def stat_lines(document: Document, last: Document, prefix: str, exclude_ephemeral: bool) -> list[str]:
    """The lines for ``document`` (``/stats``' JSON), counters counted from ``last`` (the one pushed before)."""
    lines: list[str] = []

    def count(stat: str, now: int, before: int) -> None:
        lines.append(f"{prefix}{stat}:{now - before}|c")

    def gauge(stat: str, value: int) -> None:
        lines.append(f"{prefix}{stat}:{value}|g")

    def e2e(stat: str, latency: dict[str, Any]) -> None:
        for item in latency.get("percentiles") or []:
            gauge(f"{stat}.e2e_processing_latency_{item['quantile'] * 100:.0f}", int(item["value"]))

    last_topics = {topic["topic_name"]: topic for topic in last.get("topics") or []}
    for topic in document.get("topics") or []:
        name = topic["topic_name"]
        if exclude_ephemeral and name.endswith("#ephemeral"):
            continue
        before = last_topics.get(name, {})
        stat = f"topic.{name}"
        count(f"{stat}.message_count", topic["message_count"], before.get("message_count", 0))
        count(f"{stat}.message_bytes", topic["message_bytes"], before.get("message_bytes", 0))
        gauge(f"{stat}.depth", topic["depth"])
        gauge(f"{stat}.backend_depth", topic["backend_depth"])
        e2e(stat, topic["e2e_processing_latency"])
        last_channels = {channel["channel_name"]: channel for channel in before.get("channels") or []}
        for channel in topic["channels"] or []:
            channel_name = channel["channel_name"]
            if exclude_ephemeral and channel_name.endswith("#ephemeral"):
                continue
            was = last_channels.get(channel_name, {})
            stat = f"topic.{name}.channel.{channel_name}"
            count(f"{stat}.message_count", channel["message_count"], was.get("message_count", 0))
            gauge(f"{stat}.depth", channel["depth"])
            gauge(f"{stat}.backend_depth", channel["backend_depth"])
            gauge(f"{stat}.in_flight_count", channel["in_flight_count"])
            gauge(f"{stat}.deferred_count", channel["deferred_count"])
            count(f"{stat}.requeue_count", channel["requeue_count"], was.get("requeue_count", 0))
            count(f"{stat}.timeout_count", channel["timeout_count"], was.get("timeout_count", 0))
            gauge(f"{stat}.clients", channel["client_count"])
            e2e(stat, channel["e2e_processing_latency"])
    memory = document.get("memory")
    if memory is not None:
        for field in ("heap_objects", "heap_idle_bytes", "heap_in_use_bytes", "heap_released_bytes",
                      "gc_pause_usec_100", "gc_pause_usec_99", "gc_pause_usec_95", "next_gc_bytes"):
            gauge(f"mem.{field}", memory[field])
        count("mem.gc_runs", memory["gc_total_runs"], (last.get("memory") or {}).get("gc_total_runs", 0))
    return lines


def packets(lines: list[str], size: int) -> list[bytes]:
    """``lines`` (each ending in a newline) packed in order into packets of at most ``size`` bytes; a line longer
    than that is a packet of its own."""
    out: list[bytes] = []
    packet = bytearray()
    for line in lines:
        data = (line + "\n").encode()
        if packet and len(packet) + len(data) > size:
            out.append(bytes(packet))
            packet.clear()
        packet += data
        if len(packet) >= size:
            out.append(bytes(packet))
            packet.clear()
    if packet:
        out.append(bytes(packet))
    return out


class StatsdPusher:
    """The loop: a push every interval, its packets spread over the interval less ``SPREAD_MARGIN``."""

    def __init__(self, address: str, interval: float, packet_size: int, prefix: str, exclude_ephemeral: bool,
                 snapshot: Callable[[], Document]) -> None:
        self._address = address
        self._interval = interval
        self._packet_size = packet_size
        self._prefix = prefix
        self._exclude_ephemeral = exclude_ephemeral
        self._snapshot = snapshot
        self._last: Document = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="statsd")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.wait({self._task})
        log.info("STATSD: closing")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_push = loop.time() + self._interval
        while True:
            await asyncio.sleep(max(0.0, next_push - loop.time()))
            next_push += self._interval
            try:
                await self.push()
            except OSError as error:
                log.error("STATSD: failed to push to statsd(%s): %s", self._address, error)
            if next_push < loop.time():  # a push that overran: the next tick, as a ticker drops the ones missed
                next_push += ((loop.time() - next_push) // self._interval + 1) * self._interval

    async def push(self) -> None:
        """One push: the lines for now, against the last push, sent spread over the interval."""
        host, port = split_host_port(self._address)
        info = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_DGRAM)
        family, kind, proto, _, address = info[0]
        # only once statsd's address is known: a push that fails leaves its changes to the next one
        document = self._snapshot()
        lines = stat_lines(document, self._last, self._prefix, self._exclude_ephemeral)
        self._last = document
        log.info("STATSD: pushing stats to %s", self._address)
        with socket.socket(family, kind, proto) as udp:
            udp.setblocking(False)
            udp.connect(address)
            sent = packets(lines, self._packet_size)
            pause = max(0.0, self._interval - SPREAD_MARGIN) / max(1, len(sent))
            for packet in sent:
                try:
                    udp.send(packet)
                except OSError as error:  # nobody listening (ECONNREFUSED from an earlier packet), a full buffer
                    log.debug("STATSD: %s", error)
                await asyncio.sleep(pause)
