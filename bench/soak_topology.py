"""The soak's topics and channels: durable ones that live the whole run, transient ones created and deleted along the
way through nsqd's and lookupd's HTTP APIs (as nsqadmin deletes: on every nsqd, then on lookupd), each channel with
its consumers (``ChannelConsumers``).

Transient topics reuse a few names, so a deleted topic is created again while its old messages must stay gone.
Each durable topic gets a transient channel now and then, and each transient topic a channel late in its life
(owed only what is published after it). Before a deletion nothing more is owed to what goes (a topic is closed to
the producers and its publishes under way are awaited; a channel is owed nothing sent once it closes), its
consumers stop, and the ledger checks that every nsqd still holds at least what it owes there.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from bench.soak_ledger import ChannelLife, Ledger, TopicLife
from bench.soak_traffic import ChannelConsumers, Cluster, Counters, Policy, pause
from shared.cluster_info import ClusterInfo, ClusterInfoError

DURABLE_TOPICS = ("soak-a", "soak-b")
TOPIC_CHANNELS = ("c0", "c1")  # every topic's, for its whole life; c1 of the durable topics has rude clients too
TRANSIENT_TOPICS = ("soak-x0", "soak-x1", "soak-x2")  # two alive at a time: names come back
TRANSIENT_ALIVE = 2
TOPIC_LIFETIME = (8.0, 30.0)  # seconds
CHANNEL_LIFETIME = (5.0, 20.0)
CHURN_EVERY = 1.0
NSQD_COUNTS = ("message_count", "requeue_count", "timeout_count")


class Topology:
    def __init__(self, cluster: Cluster, ledger: Ledger, info: ClusterInfo, policy: Policy, rng: random.Random,
                 counters: Counters) -> None:
        self.cluster, self.ledger, self.info, self.policy, self.rng = cluster, ledger, info, policy, rng
        self.counters = counters
        self.consumers: dict[ChannelLife, ChannelConsumers] = {}
        # nsqd's own counts over every channel, summed from their stats when deleted and at the end
        self.nsqd_counts = dict.fromkeys(NSQD_COUNTS, 0)
        self.deletions = {"topics": 0, "channels": 0}
        self._expiry: dict[TopicLife | ChannelLife, float] = {}
        self._stopping = asyncio.Event()
        self._churn: asyncio.Task[None] | None = None

    @property
    def nodes(self) -> range:
        return range(len(self.cluster.nsqd_http))

    async def start(self) -> None:
        """The durable topics, then the churn."""
        for name in DURABLE_TOPICS:
            await self.open_topic(name, durable=True)
        self._churn = asyncio.create_task(self._keep_churning())

    async def stop_churn(self) -> None:
        self._stopping.set()
        if self._churn is not None:
            await self._churn

    async def calm(self) -> None:
        """Every live channel keeps one plain consumer."""
        await asyncio.gather(*(consumers.calm() for consumers in self.consumers.values()))

    async def stop_consumers(self) -> None:
        await asyncio.gather(*(consumers.stop() for consumers in self.consumers.values()))
        self.consumers.clear()

    # -- creating --------------------------------------------------------------------------------------------

    async def open_topic(self, name: str, durable: bool) -> TopicLife:
        topic = self.ledger.new_topic(name, durable)
        topic.open = False  # until its channels exist: what it holds before then would go to the first one
        for node in self.nodes:
            await self.info.post(self.cluster.nsqd_http[node], "/topic/create", topic=name)
        for channel in TOPIC_CHANNELS:  # they go with the topic: a topic without channels would keep messages
            await self.open_channel(topic, channel, expires=False, rude=durable and channel == "c1")
        topic.open = True
        if not durable:
            self._expiry[topic] = time.monotonic() + self.rng.uniform(*TOPIC_LIFETIME)
        return topic

    async def open_channel(self, topic: TopicLife, name: str, expires: bool, rude: bool = False) -> ChannelLife:
        channel = self.ledger.new_channel(topic, name)
        for node in self.nodes:
            await self.info.post(self.cluster.nsqd_http[node], "/channel/create", topic=topic.name, channel=name)
            channel.created[node] = time.monotonic()
        consumers = ChannelConsumers(channel, self.cluster, self.ledger, self.policy, self.rng, self.counters, rude)
        consumers.start()
        self.consumers[channel] = consumers
        if expires:
            self._expiry[channel] = time.monotonic() + self.rng.uniform(*CHANNEL_LIFETIME)
        return channel

    # -- deleting --------------------------------------------------------------------------------------------

    async def delete_channel(self, channel: ChannelLife) -> None:
        channel.closed_at = time.monotonic()
        await self.consumers.pop(channel).stop()
        await self._check_held(channel.topic, [channel])
        query = {"topic": channel.topic.name, "channel": channel.name}
        for node in self.nodes:
            await self.info.post(self.cluster.nsqd_http[node], "/channel/delete", **query)
        await self._forget_on_lookupd("/channel/delete", **query)
        self.ledger.deleted(channel)
        self.deletions["channels"] += 1

    async def delete_topic(self, topic: TopicLife) -> None:
        topic.open = False
        while topic.publishing:
            await asyncio.sleep(0.05)
        channels = [channel for channel in topic.channels if not channel.deleted]
        closed_at = time.monotonic()
        for channel in channels:
            channel.closed_at = closed_at
        await asyncio.gather(*(self.consumers.pop(channel).stop() for channel in channels))
        await self._check_held(topic, channels)
        for node in self.nodes:
            await self.info.post(self.cluster.nsqd_http[node], "/topic/delete", topic=topic.name)
        await self._forget_on_lookupd("/topic/delete", topic=topic.name)
        for channel in channels:
            self.ledger.deleted(channel)
        self.deletions["topics"] += 1

    async def _check_held(self, topic: TopicLife, channels: list[ChannelLife]) -> None:
        """What the ledger owes, counted first, against what each nsqd then says it holds."""
        owed = {(channel, node): self.ledger.owed_on(channel, node) for channel in channels for node in self.nodes}
        for node in self.nodes:
            held = await self.held(node, topic.name)
            for channel in channels:
                stats = held.get(channel.name, {})
                self.ledger.held_shortfall(channel, node, owed[channel, node], stats.get("held", 0))
                for name in NSQD_COUNTS:
                    self.nsqd_counts[name] += stats.get(name, 0)

    async def held(self, node: int, topic: str) -> dict[str, dict[str, int]]:
        """Per channel of ``topic`` on nsqd ``node``: the messages it holds (queued, in flight, deferred, and the
        topic's own queue, which every channel will get) as "held", and its counts."""
        document = await self.info.stats(self.cluster.nsqd_http[node], topic=topic)
        return {channel["channel_name"]: _held(topic_stats, channel)
                for topic_stats in document.get("topics") or [] if topic_stats["topic_name"] == topic
                for channel in topic_stats["channels"]}

    async def holding(self) -> int:
        """Messages every nsqd still holds, over all its topics and channels."""
        total = 0
        for node in self.nodes:
            document = await self.info.stats(self.cluster.nsqd_http[node])
            for topic in document.get("topics") or []:
                total += topic["depth"] if not topic["channels"] else 0
                total += sum(_held(topic, channel)["held"] for channel in topic["channels"])
        return total

    async def nodes_known(self) -> int:
        """How many nsqd lookupd hands out (it forgets one that stops PINGing)."""
        return len(await self.info.nodes(self.cluster.lookupd_http))

    async def count_live(self) -> None:
        """Adds nsqd's counts of the channels still alive (at the end)."""
        for node in self.nodes:
            document = await self.info.stats(self.cluster.nsqd_http[node])
            for topic in document.get("topics") or []:
                for channel in topic["channels"]:
                    for name in NSQD_COUNTS:
                        self.nsqd_counts[name] += int(channel.get(name, 0))

    async def _forget_on_lookupd(self, path: str, **query: str) -> None:
        try:
            await self.info.post(self.cluster.lookupd_http, path, **query)
        except ClusterInfoError as error:
            if error.status != 404:  # nothing registered any more
                raise

    # -- churn -----------------------------------------------------------------------------------------------

    async def _keep_churning(self) -> None:
        while not await pause(self._stopping, CHURN_EVERY):
            await self._delete_expired()
            await self._create_some()

    async def _delete_expired(self) -> None:
        now = time.monotonic()
        for target, expiry in list(self._expiry.items()):
            if expiry > now:
                continue
            del self._expiry[target]
            if isinstance(target, TopicLife):
                await self.delete_topic(target)
            elif not target.deleted:  # not gone with its topic
                await self.delete_channel(target)

    async def _create_some(self) -> None:
        live = [topic for topic in self.ledger.lives if topic.open]
        transient = [topic for topic in live if not topic.durable]
        if len(transient) < TRANSIENT_ALIVE:
            taken = {topic.name for topic in transient}
            await self.open_topic(self.rng.choice([name for name in TRANSIENT_TOPICS if name not in taken]),
                                  durable=False)
            return
        for topic in live:
            extra = "t" if topic.durable else "late"
            if all(channel.name != extra or channel.deleted for channel in topic.channels) \
                    and self.rng.random() < 0.1:
                await self.open_channel(topic, extra, expires=True)


def _held(topic: dict[str, Any], channel: dict[str, Any]) -> dict[str, int]:
    counts = {name: int(channel.get(name, 0)) for name in NSQD_COUNTS}
    counts["held"] = int(topic["depth"] + channel["depth"] + channel["in_flight_count"] + channel["deferred_count"])
    return counts
