"""nsqd's statsd lines and packets: NSQ's names, counters as the change since the last push, packets no larger
than the packet size."""

from __future__ import annotations

from typing import Any

from services.nsqd.statsd import expand_prefix, packets, stat_lines


def channel(name: str, **figures: Any) -> dict[str, Any]:
    return {"channel_name": name, "message_count": 0, "depth": 0, "backend_depth": 0, "in_flight_count": 0,
            "deferred_count": 0, "requeue_count": 0, "timeout_count": 0, "client_count": 0,
            "e2e_processing_latency": {"count": 0, "percentiles": None}, **figures}


def topic(name: str, channels: list[dict[str, Any]], **figures: Any) -> dict[str, Any]:
    return {"topic_name": name, "message_count": 0, "message_bytes": 0, "depth": 0, "backend_depth": 0,
            "channels": channels, "e2e_processing_latency": {"count": 0, "percentiles": None}, **figures}


def test_the_prefix_names_the_host_by_its_broadcast_address_and_http_port() -> None:
    assert expand_prefix("nsq.%s", "host.example.com", 4151) == "nsq.host_example_com_4151."
    assert expand_prefix("nsq.%s.", "10.0.0.1", 4151) == "nsq.10_0_0_1_4151."
    assert expand_prefix("plain", "h", 1) == "plain."
    assert expand_prefix("", "h", 1) == ""


def test_counters_are_the_change_since_the_last_push_and_gauges_the_value_now() -> None:
    last = {"topics": [topic("t", [channel("c", message_count=4, requeue_count=1)], message_count=4,
                             message_bytes=40)]}
    now = {"topics": [topic("t", [channel("c", message_count=10, depth=3, backend_depth=1, in_flight_count=2,
                                          deferred_count=1, requeue_count=3, timeout_count=1, client_count=2)],
                            message_count=10, message_bytes=100, depth=3, backend_depth=1),
                      topic("new", [], message_count=5, message_bytes=50)]}
    assert stat_lines(now, last, "nsq.h_4151.", exclude_ephemeral=False) == [
        "nsq.h_4151.topic.t.message_count:6|c",
        "nsq.h_4151.topic.t.message_bytes:60|c",
        "nsq.h_4151.topic.t.depth:3|g",
        "nsq.h_4151.topic.t.backend_depth:1|g",
        "nsq.h_4151.topic.t.channel.c.message_count:6|c",
        "nsq.h_4151.topic.t.channel.c.depth:3|g",
        "nsq.h_4151.topic.t.channel.c.backend_depth:1|g",
        "nsq.h_4151.topic.t.channel.c.in_flight_count:2|g",
        "nsq.h_4151.topic.t.channel.c.deferred_count:1|g",
        "nsq.h_4151.topic.t.channel.c.requeue_count:2|c",
        "nsq.h_4151.topic.t.channel.c.timeout_count:1|c",
        "nsq.h_4151.topic.t.channel.c.clients:2|g",
        "nsq.h_4151.topic.new.message_count:5|c",  # new since the last push: counted from 0
        "nsq.h_4151.topic.new.message_bytes:50|c",
        "nsq.h_4151.topic.new.depth:0|g",
        "nsq.h_4151.topic.new.backend_depth:0|g",
    ]


def test_e2e_percentiles_memory_and_ephemeral_names() -> None:
    latency = {"count": 9, "percentiles": [{"quantile": 0.99, "value": 2500.0}, {"quantile": 0.5, "value": 700.0}]}
    memory = {"heap_objects": 7, "heap_idle_bytes": 0, "heap_in_use_bytes": 4096, "heap_released_bytes": 0,
              "gc_pause_usec_100": 90, "gc_pause_usec_99": 80, "gc_pause_usec_95": 70, "next_gc_bytes": 0,
              "gc_total_runs": 12}
    now = {"topics": [topic("t", [channel("c", e2e_processing_latency=latency), channel("x#ephemeral")],
                            e2e_processing_latency=latency),
                      topic("gone#ephemeral", [])],
           "memory": memory}
    lines = stat_lines(now, {"memory": {**memory, "gc_total_runs": 10}}, "", exclude_ephemeral=True)
    assert "topic.t.e2e_processing_latency_99:2500|g" in lines and "topic.t.e2e_processing_latency_50:700|g" in lines
    assert "topic.t.channel.c.e2e_processing_latency_99:2500|g" in lines
    assert not [line for line in lines if "ephemeral" in line]
    assert lines[-9:] == ["mem.heap_objects:7|g", "mem.heap_idle_bytes:0|g", "mem.heap_in_use_bytes:4096|g",
                          "mem.heap_released_bytes:0|g", "mem.gc_pause_usec_100:90|g", "mem.gc_pause_usec_99:80|g",
                          "mem.gc_pause_usec_95:70|g", "mem.next_gc_bytes:0|g", "mem.gc_runs:2|c"]
    assert len([line for line in stat_lines(now, {}, "", exclude_ephemeral=False) if "ephemeral" in line]) == 8 + 4


def test_packets_hold_whole_lines_in_order_and_no_more_than_the_size() -> None:
    lines = [f"stat.{number}:{number}|g" for number in range(100)]
    sent = packets(lines, 64)
    assert b"".join(sent).decode().splitlines() == lines
    assert all(len(packet) <= 64 for packet in sent)
    assert all(len(packet) + len(later.split(b"\n")[0]) + 1 > 64 for packet, later in zip(sent, sent[1:]))
    long = "x" * 100 + ":1|c"
    assert packets(["a:1|c", long, "b:1|c"], 64) == [b"a:1|c\n", long.encode() + b"\n", b"b:1|c\n"]
    assert packets([], 508) == []
