"""The cluster as the admin sees it: which nsqd exist and what they hold, read from the lookupds (or from nsqds given
directly), and the operator actions fanned out to them in nsqadmin's order.

Every read takes a ``Warnings`` that collects the hosts that failed; a step where every host failed raises
``UpstreamError``. The hosts are asked through ``shared.cluster_info``; the JSON shapes come from ``aggregation``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from shared.cluster_info import ClusterInfo, ClusterInfoError, http_address

from . import aggregation
from .aggregation import Json
from .upstream import Warnings, each


@dataclass(frozen=True)
class Node:
    """An nsqd as the admin reaches it: ``address`` is its ``broadcast_address:http_port``."""

    address: str
    hostname: str


class Cluster:
    def __init__(self, client: ClusterInfo, lookupd_addresses: list[str], nsqd_addresses: list[str]) -> None:
        self.client = client
        self.lookupd_addresses = list(lookupd_addresses)
        self.nsqd_addresses = list(nsqd_addresses)

    # --- reads ---------------------------------------------------------------------------------------------------

    async def topic_names(self, warnings: Warnings) -> list[str]:
        if self.lookupd_addresses:
            answers = await each((self.client.topics(address) for address in self.lookupd_addresses), warnings)
            names = {name for topics in answers for name in topics}
        else:
            stats = await each((self.client.stats(address) for address in self.nsqd_addresses), warnings)
            names = {topic["topic_name"] for answer in stats for topic in answer.get("topics") or []}
        return sorted(names)

    async def inactive_topics(self, warnings: Warnings) -> dict[str, list[str]]:
        """Topics lookupd knows that no nsqd produces, with their channels (lookupd mode only, as nsqadmin)."""
        if not self.lookupd_addresses:
            return {}
        found = await asyncio.gather(*(self._inactive_channels(topic, warnings)
                                       for topic in await self.topic_names(warnings)))
        return {topic: channels for topic, channels in found if channels is not None}

    async def _inactive_channels(self, topic: str, warnings: Warnings) -> tuple[str, list[str] | None]:
        if await self.topic_nodes(topic, warnings):
            return topic, None
        answers = await each((self.client.channels(address, topic) for address in self.lookupd_addresses), warnings)
        return topic, sorted({name for channels in answers for name in channels})

    async def nodes(self, warnings: Warnings) -> list[Json]:
        """nsqadmin's ``/api/nodes`` rows."""
        if self.lookupd_addresses:
            answers = await each((self._lookupd_nodes(address) for address in self.lookupd_addresses), warnings)
            return aggregation.merge_nodes(answers)
        rows = await each((self._nsqd_row(address) for address in self.nsqd_addresses), warnings)
        return sorted(rows, key=lambda row: (row["hostname"], row["broadcast_address"], row["http_port"]))

    async def topic_nodes(self, topic: str, warnings: Warnings) -> list[Node]:
        """The nsqd that have ``topic``."""
        if self.lookupd_addresses:
            answers = await each((self._producers(address, topic) for address in self.lookupd_addresses), warnings)
            return [Node(http_address(producer), producer.get("hostname", ""))
                    for producer in aggregation.merge_producers(answers)]
        nodes = []
        for row in await self.nodes(warnings):
            if any(entry["topic"] == topic for entry in row["topics"]):
                nodes.append(Node(http_address(row), row["hostname"]))
        return nodes

    async def all_nodes(self, warnings: Warnings) -> list[Node]:
        return [Node(http_address(row), row["hostname"]) for row in await self.nodes(warnings)]

    async def topic(self, topic: str, warnings: Warnings) -> Json:
        nodes = await self.topic_nodes(topic, warnings)
        rows = await self.node_topic_rows(nodes, warnings, topic=topic)
        return aggregation.aggregate_topic(topic, rows)

    async def channel(self, topic: str, channel: str, warnings: Warnings) -> Json:
        nodes = await self.topic_nodes(topic, warnings)
        rows = await self.node_topic_rows(nodes, warnings, topic=topic, channel=channel, include_clients=True)
        channels = [row for topic_row in rows for row in topic_row["channels"] if row["channel_name"] == channel]
        return aggregation.aggregate_channel(topic, channel, channels)

    async def node(self, address: str, warnings: Warnings) -> Json | None:
        """``/api/nodes/:node``, or None when no nsqd has that address."""
        node = next((node for node in await self.all_nodes(warnings) if node.address == address), None)
        if node is None:
            return None
        return aggregation.node_summary(address, await self.node_topic_rows([node], warnings, include_clients=True))

    async def topics_snapshot(self, warnings: Warnings) -> list[Json]:
        """Every topic aggregated over every node, from one ``/stats`` per node (history and metrics use it)."""
        rows = await self.node_topic_rows(await self.all_nodes(warnings), warnings)
        by_topic: dict[str, list[Json]] = {}
        for row in rows:
            by_topic.setdefault(row["topic_name"], []).append(row)
        return [aggregation.aggregate_topic(name, by_topic[name]) for name in sorted(by_topic)]

    async def replication(self, warnings: Warnings) -> Json:
        """Beyond NSQ: each replicated nsqd's ``replication`` section of ``/stats``, and per topic which nodes
        hold which nsqd's copy (``aggregation.replication_view``)."""
        nodes = await self.all_nodes(warnings)
        answers = await each((self._replication(node) for node in nodes), warnings)
        return aggregation.replication_view([answer for answer in answers if answer is not None])

    async def _replication(self, node: Node) -> Json | None:
        section = (await self.client.stats(node.address)).get("replication")
        return None if section is None else {"address": node.address, "hostname": node.hostname, **section}

    async def counter(self, warnings: Warnings) -> Json:
        return aggregation.counter_stats(await self.node_topic_rows(await self.all_nodes(warnings), warnings))

    async def peek(self, queue: Json, count: int, warnings: Warnings, dead_letters: bool = False) -> list[Json]:
        """Up to ``count`` messages queued on each node of ``queue``, an aggregated topic (its own queue) or channel
        (``topic``, ``channel``): each node's in the order it would deliver them, with the node under ``node``.
        ``dead_letters``: the channel's dead letters instead, asked only of the nodes that have some."""
        topic, channel = queue["topic_name"], queue.get("channel_name", "")
        nodes = [row["node"] for row in queue["nodes"] if not dead_letters or row.get("dead_letter_depth")]
        kind = "dead" if dead_letters else ""
        answers = await each((self._node_peek(node, topic, channel, count, kind) for node in nodes), warnings)
        return [message for answer in answers for message in answer]

    async def _node_peek(self, node: str, topic: str, channel: str, count: int, queue: str) -> list[Json]:
        return [{"node": node, **message} for message in await self.client.peek(node, topic, channel, count, queue)]

    async def channel_nodes(self, topic: str, channel: str, warnings: Warnings) -> list[Node]:
        """The nsqd that have the channel, as their ``/stats`` say."""
        rows = await self.node_topic_rows(await self.topic_nodes(topic, warnings), warnings, topic=topic,
                                          channel=channel)
        return [Node(row["node"], row["hostname"]) for row in rows
                if any(found["channel_name"] == channel for found in row["channels"])]

    async def node_topic_rows(self, nodes: list[Node], warnings: Warnings, topic: str = "", channel: str = "",
                              include_clients: bool = False) -> list[Json]:
        """Per-node topic rows of the given nodes' ``/stats`` (narrowed to ``topic``/``channel`` when given)."""
        answers = await each((self._node_topics(node, topic, channel, include_clients) for node in nodes), warnings)
        rows = [row for answer in answers for row in answer]
        return [row for row in rows if not topic or row["topic_name"] == topic]

    async def _node_topics(self, node: Node, topic: str, channel: str, include_clients: bool) -> list[Json]:
        stats = await self.client.stats(node.address, topic, channel, include_clients)
        return aggregation.node_topics(node.address, node.hostname, stats, time.time())

    async def _nsqd_row(self, address: str) -> Json:
        info = await self.client.info(address)
        return aggregation.nsqd_node_row(info, await self.client.stats(address))

    async def _lookupd_nodes(self, address: str) -> tuple[str, list[Json]]:
        return address, await self.client.nodes(address)

    async def _producers(self, address: str, topic: str) -> list[Json]:
        try:
            return await self.client.producers(address, topic)
        except ClusterInfoError as error:
            # a lookupd that has never heard of a topic answers 404 TOPIC_NOT_FOUND: no producers, not a failure
            if error.status == 404:
                return []
            raise

    # --- actions, in nsqadmin's order: a delete finds the topic's nodes before the lookupds forget them ----------

    async def create_topic_channel(self, topic: str, channel: str, warnings: Warnings) -> None:
        await self._on_lookupds("/topic/create", warnings, topic=topic)
        if channel:
            await self._on_lookupds("/channel/create", warnings, topic=topic, channel=channel)
            nodes = await self.topic_nodes(topic, warnings)
            await self._on_nodes(nodes, "/channel/create", warnings, topic=topic, channel=channel)

    async def topic_action(self, topic: str, action: str, warnings: Warnings) -> None:
        """``pause``, ``unpause`` or ``empty`` on every nsqd with the topic."""
        await self._on_nodes(await self.topic_nodes(topic, warnings), f"/topic/{action}", warnings, topic=topic)

    async def channel_action(self, topic: str, channel: str, action: str, warnings: Warnings) -> None:
        await self._on_nodes(await self.topic_nodes(topic, warnings), f"/channel/{action}", warnings, topic=topic,
                             channel=channel)

    async def replay_dead_letters(self, topic: str, channel: str, warnings: Warnings) -> int:
        """Beyond nsqadmin: every dead letter back to the channel on each nsqd with it; how many in all."""
        nodes = await self.channel_nodes(topic, channel, warnings)
        return sum(await each((self.client.replay(node.address, topic, channel) for node in nodes), warnings))

    async def rewind(self, topic: str, channel: str, since: str, warnings: Warnings) -> int:
        """Beyond nsqadmin: what the topic retains since ``since`` back into the channel on each nsqd with it; how
        many messages in all."""
        nodes = await self.channel_nodes(topic, channel, warnings)
        return sum(await each((self.client.rewind(node.address, topic, channel, since) for node in nodes), warnings))

    async def set_retention(self, topic: str, settings: dict[str, str], warnings: Warnings) -> None:
        """Beyond nsqadmin: the topic's retention settings (``time``, ``bytes``) on every nsqd with it."""
        await self._on_nodes(await self.topic_nodes(topic, warnings), "/topic/retention", warnings, topic=topic,
                             **settings)

    async def empty_dead_letters(self, topic: str, channel: str, warnings: Warnings) -> None:
        """Beyond nsqadmin: the channel's dead letters discarded on each nsqd with it."""
        nodes = await self.channel_nodes(topic, channel, warnings)
        await self._on_nodes(nodes, "/channel/empty", warnings, topic=topic, channel=channel, queue="dead")

    async def delete_topic(self, topic: str, warnings: Warnings) -> None:
        nodes = await self.topic_nodes(topic, warnings)
        await self._on_lookupds("/topic/delete", warnings, topic=topic)
        await self._on_nodes(nodes, "/topic/delete", warnings, topic=topic)

    async def delete_channel(self, topic: str, channel: str, warnings: Warnings) -> None:
        nodes = await self.topic_nodes(topic, warnings)
        await self._on_lookupds("/channel/delete", warnings, topic=topic, channel=channel)
        await self._on_nodes(nodes, "/channel/delete", warnings, topic=topic, channel=channel)

    async def tombstone(self, address: str, topic: str, warnings: Warnings) -> None:
        """Tombstones the topic for one node on every lookupd (consumers stop finding it there), then deletes the
        topic on that node."""
        await self._on_lookupds("/topic/tombstone", warnings, topic=topic, node=address)
        await self._on_nodes([Node(address, "")], "/topic/delete", warnings, topic=topic)

    async def _on_lookupds(self, path: str, warnings: Warnings, **query: str) -> None:
        await each((self.client.post(address, path, **query) for address in self.lookupd_addresses), warnings)

    async def _on_nodes(self, nodes: list[Node], path: str, warnings: Warnings, **query: str) -> None:
        await each((self.client.post(node.address, path, **query) for node in nodes), warnings)
