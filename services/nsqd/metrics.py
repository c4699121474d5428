"""nsqd's Prometheus metrics, read from its counters at scrape time (see shared/metrics.py).

Nothing is counted per message for Prometheus; the collector walks topics and channels only when scraped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from .nsqd import NSQD


class NSQDCollector:
    def __init__(self, nsqd: NSQD) -> None:
        self._nsqd = nsqd

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        def gauge(name: str, documentation: str, labels: list[str]) -> Any:
            return GaugeMetricFamily(name, documentation, labels=labels)

        def counter(name: str, documentation: str, labels: list[str]) -> Any:
            return CounterMetricFamily(name, documentation, labels=labels)

        topic_labels, channel_labels = ["topic"], ["topic", "channel"]
        topic_depth = gauge("nsq_topic_depth", "Messages queued in the topic", topic_labels)
        topic_messages = counter("nsq_topic_messages", "Messages published to the topic", topic_labels)
        topic_bytes = counter("nsq_topic_message_bytes", "Bytes published to the topic", topic_labels)
        topic_paused = gauge("nsq_topic_paused", "1 if the topic is paused", topic_labels)
        topic_dropped = counter("nsq_topic_dropped", "Messages discarded: by an ephemeral topic when full, or at "
                                "--max-bytes-per-queue with drop-oldest", topic_labels)
        retained = gauge("nsq_topic_retained", "Messages the topic retains for rewinds", topic_labels)
        retained_bytes = gauge("nsq_topic_retained_bytes", "Bytes of the topic's retention files", topic_labels)
        not_retained = counter("nsq_topic_retention_refused", "Messages published but not retained: no room on "
                               "disk", topic_labels)
        depth = gauge("nsq_channel_depth", "Messages queued in the channel", channel_labels)
        in_flight = gauge("nsq_channel_in_flight", "Messages delivered and not yet acknowledged", channel_labels)
        deferred = gauge("nsq_channel_deferred", "Messages deferred", channel_labels)
        clients = gauge("nsq_channel_clients", "Consumers subscribed", channel_labels)
        messages = counter("nsq_channel_messages", "Messages that reached the channel", channel_labels)
        requeued = counter("nsq_channel_requeued", "Messages requeued by consumers", channel_labels)
        timed_out = counter("nsq_channel_timed_out", "Messages that timed out in flight", channel_labels)
        paused = gauge("nsq_channel_paused", "1 if the channel is paused", channel_labels)
        dropped = counter("nsq_channel_dropped", "Messages discarded: by an ephemeral channel when full, or at "
                          "--max-bytes-per-queue with drop-oldest", channel_labels)
        expired = counter("nsq_channel_expired", "Messages dropped past their TTL", channel_labels)
        dead_letters = counter("nsq_channel_dead_letters", "Messages parked in the dead-letter queue", channel_labels)
        dead_letter_depth = gauge("nsq_channel_dead_letter_depth", "Messages in the dead-letter queue",
                                  channel_labels)
        if self._nsqd.replication is not None:
            yield from _replication(self._nsqd.replication.stats(), gauge, counter)
        for topic in list(self._nsqd.topics.values()):
            topic_depth.add_metric([topic.name], topic.depth)
            topic_messages.add_metric([topic.name], topic.message_count)
            topic_bytes.add_metric([topic.name], topic.message_bytes)
            topic_paused.add_metric([topic.name], int(topic.paused))
            topic_dropped.add_metric([topic.name], topic.dropped_count)
            if (retention := self._nsqd.retention.stats(topic.name)):
                retained.add_metric([topic.name], retention["retained_count"])
                retained_bytes.add_metric([topic.name], retention["retained_bytes"])
                not_retained.add_metric([topic.name], retention["retention_refused_count"])
            for channel in list(topic.channels.values()):
                labels = [topic.name, channel.name]
                depth.add_metric(labels, channel.depth)
                in_flight.add_metric(labels, len(channel.in_flight))
                deferred.add_metric(labels, len(channel.deferred))
                clients.add_metric(labels, len(channel.clients))
                messages.add_metric(labels, channel.message_count)
                requeued.add_metric(labels, channel.requeue_count)
                timed_out.add_metric(labels, channel.timeout_count)
                paused.add_metric(labels, int(channel.paused))
                dropped.add_metric(labels, channel.dropped_count)
                expired.add_metric(labels, channel.expired_count)
                dead_letters.add_metric(labels, channel.dead_letter_count)
                dead_letter_depth.add_metric(labels, len(channel.dead_letters))
        connections = gauge("nsq_tcp_connections", "Open TCP client connections", [])
        connections.add_metric([], len(self._nsqd.connections))
        healthy = gauge("nsq_healthy", "1 while nsqd is healthy", [])
        healthy.add_metric([], int(self._nsqd.health == "OK"))
        yield from (topic_depth, topic_messages, topic_bytes, topic_paused, topic_dropped, retained, retained_bytes,
                    not_retained, depth, in_flight, deferred,
                    clients, messages, requeued, timed_out, paused, dropped, expired, dead_letters, dead_letter_depth,
                    connections, healthy)


def _replication(stats: dict[str, Any], gauge: Any, counter: Any) -> Iterator[Metric]:
    """Beyond NSQ, with --etcd-address: this nsqd as an origin (its mirrors) and as a mirror (of which origins),
    from replication's own stats (its /stats block)."""
    def single(kind: Any, name: str, documentation: str, value: float) -> Any:
        metric = kind(name, documentation, [])
        metric.add_metric([], value)
        return metric

    yield single(gauge, "nsq_replication_epoch", "This nsqd's registration in etcd (0: not registered)",
                 stats["epoch"])
    yield single(counter, "nsq_replication_leases_lost", "Times this nsqd found its lease in etcd ended",
                 stats["leases_lost"])
    yield single(gauge, "nsq_replication_records", "Records sent to the mirrors in this epoch", stats["records"])
    yield single(counter, "nsq_replication_refused_publishes", "Publishes refused for want of copies",
                 stats["refused_publishes"])
    yield single(gauge, "nsq_replication_fenced", "1 if another nsqd took this one's place in this epoch",
                 int(stats["fenced"]))
    yield single(gauge, "nsq_replication_in_sync_recorded", "Mirrors recorded in sync in etcd",
                 len(stats["in_sync_recorded"]))
    in_sync = gauge("nsq_replication_mirror_in_sync", "1 if the mirror holds every record sent", ["mirror"])
    connected = gauge("nsq_replication_mirror_connected", "1 if the link to the mirror is up", ["mirror"])
    lag = gauge("nsq_replication_mirror_lag", "Records sent and not yet acknowledged by the mirror", ["mirror"])
    for link in stats["mirrors"]:
        in_sync.add_metric([link["node"]], int(link["in_sync"]))
        connected.add_metric([link["node"]], int(link["connected"]))
        lag.add_metric([link["node"]], link["lag"])
    mirrored = gauge("nsq_replication_mirrored_depth", "Messages held for an origin", ["origin"])
    applied = gauge("nsq_replication_mirrored_records", "Records of an origin applied here", ["origin"])
    for store in stats["mirroring"]:
        mirrored.add_metric([store["origin"]], store["depth"])
        applied.add_metric([store["origin"]], store["applied"])
    yield from (in_sync, connected, lag, mirrored, applied)
    yield single(counter, "nsq_replication_adopted_origins", "Lost nsqd whose messages this one took over",
                 stats["adopted_origins"])
    yield single(counter, "nsq_replication_adopted_messages", "Messages taken over from lost nsqd",
                 stats["adopted_messages"])
