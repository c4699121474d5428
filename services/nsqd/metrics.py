"""/metrics: Prometheus text on the instance's own registry, read from nsqd's counters at scrape time.

Nothing is counted per message for Prometheus; the collector walks topics and channels only when scraped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .nsqd import NSQD


class NSQDCollector(Collector):
    def __init__(self, nsqd: NSQD) -> None:
        self._nsqd = nsqd

    def collect(self) -> Iterator[Metric]:
        topic_labels, channel_labels = ["topic"], ["topic", "channel"]
        topic_depth = GaugeMetricFamily("nsq_topic_depth", "Messages queued in the topic", labels=topic_labels)
        topic_messages = CounterMetricFamily("nsq_topic_messages", "Messages published to the topic",
                                             labels=topic_labels)
        topic_bytes = CounterMetricFamily("nsq_topic_message_bytes", "Bytes published to the topic",
                                          labels=topic_labels)
        topic_paused = GaugeMetricFamily("nsq_topic_paused", "1 if the topic is paused", labels=topic_labels)
        depth = GaugeMetricFamily("nsq_channel_depth", "Messages queued in the channel", labels=channel_labels)
        in_flight = GaugeMetricFamily("nsq_channel_in_flight", "Messages delivered and not yet acknowledged",
                                      labels=channel_labels)
        deferred = GaugeMetricFamily("nsq_channel_deferred", "Messages deferred", labels=channel_labels)
        clients = GaugeMetricFamily("nsq_channel_clients", "Consumers subscribed", labels=channel_labels)
        messages = CounterMetricFamily("nsq_channel_messages", "Messages that reached the channel",
                                       labels=channel_labels)
        requeued = CounterMetricFamily("nsq_channel_requeued", "Messages requeued by consumers",
                                       labels=channel_labels)
        timed_out = CounterMetricFamily("nsq_channel_timed_out", "Messages that timed out in flight",
                                        labels=channel_labels)
        paused = GaugeMetricFamily("nsq_channel_paused", "1 if the channel is paused", labels=channel_labels)
        for topic in list(self._nsqd.topics.values()):
            topic_depth.add_metric([topic.name], topic.depth)
            topic_messages.add_metric([topic.name], topic.message_count)
            topic_bytes.add_metric([topic.name], topic.message_bytes)
            topic_paused.add_metric([topic.name], int(topic.paused))
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
        connections = GaugeMetricFamily("nsq_tcp_connections", "Open TCP client connections")
        connections.add_metric([], len(self._nsqd.connections))
        healthy = GaugeMetricFamily("nsq_healthy", "1 while nsqd is healthy")
        healthy.add_metric([], int(self._nsqd.health == "OK"))
        yield from (topic_depth, topic_messages, topic_bytes, topic_paused, depth, in_flight, deferred, clients,
                    messages, requeued, timed_out, paused, connections, healthy)


def build_registry(nsqd: NSQD) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(NSQDCollector(nsqd))
    ProcessCollector(registry=registry)
    return registry
