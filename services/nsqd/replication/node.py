"""This nsqd as a node of the replicated cluster (``--etcd-address``), held by nsqd as one object: it listens for
origins that mirror their queues here, makes this nsqd an origin (at a ``--replication-factor`` above 1, recording
its queues through storage's seam), registers it in etcd, takes over the lost origins it mirrors, and reports it
all (``stats``).

What it needs of nsqd is ``Host``: its options, its topics, and where its queues' recorders come from.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from nsqclient.addresses import join_host_port
from nsqclient.version import VERSION
from shared.listeners import listen_tcp

from ..message import ATTEMPTS, BODY, TIMESTAMP, QueuedMessage
from ..retention import RetentionSettings
from .mirror_server import MirrorLinkServer
from .origin import Origin
from .records import OriginRecording
from .wire import DEAD_LETTERS, Messages, Publish, dead_letters_of

if TYPE_CHECKING:
    from pathlib import Path

    from ..options import Options
    from ..recorder import Outstanding, Recording
    from ..retention import Retention
    from ..topic import Topic
    from .adoption import Adoption
    from .membership import Membership
    from .mirror_store import MirrorStore
    from .placement import ClusterNodes, Nodes

log = logging.getLogger("nsqd")

ADOPT_CHUNK = 10_000  # messages taken over at a time
MIRRORS_DIRECTORY = "mirrors"  # under --data-path: the copies this nsqd holds of other nsqd's messages


class Host(Protocol):
    """What replication needs of its nsqd."""

    opts: Options
    data_path: Path
    hostname: str
    topics: dict[str, Topic]

    retention: Retention

    def get_topic(self, name: str) -> Topic: ...

    def set_retention(self, topic: Topic, settings: RetentionSettings) -> None: ...

    def record_with(self, recording: Recording) -> None:
        """Every queue that is not ephemeral is recorded by ``recording`` from now on."""

    def broadcast_tcp_address(self) -> str: ...

    def broadcast_tcp_port(self) -> int: ...

    def broadcast_http_port(self) -> int: ...


class Replication:
    def __init__(self, host: Host) -> None:
        self._host = host
        self._opts = host.opts
        self.membership: Membership | None = None
        self._membership_start: asyncio.Task[None] | None = None
        self.cluster_nodes: ClusterNodes | None = None
        self.adoption: Adoption | None = None  # takes over the origins this nsqd mirrors when they are lost
        self.origin: Origin | None = None  # this nsqd's records for its mirrors (--replication-factor above 1)
        self.mirror_stores: dict[str, MirrorStore] = {}  # what this nsqd mirrors, by origin
        self._server: asyncio.AbstractServer | None = None
        self.address: tuple[str, int] = ("", 0)
        self._origin_changes: set[asyncio.Task[None]] = set()
        self._mirror_links: set[MirrorLinkServer] = set()

    async def start(self) -> None:
        """Listens for origins, makes this nsqd an origin (at a factor above 1), and registers it in etcd, whose
        client (aiohttp's) is imported on a thread, so that serving goes on meanwhile."""
        stores, links = self.mirror_stores, self._mirror_links
        directory = self._host.data_path / MIRRORS_DIRECTORY
        shutil.rmtree(directory, ignore_errors=True)  # an earlier process's copies: the origins send them again
        self._server, self.address = await listen_tcp(
            self._opts.replication_address, lambda: MirrorLinkServer(stores, links, directory), log,
            label="REPLICATION")
        if self._opts.replication_factor > 1:
            self.origin = Origin(self._host.broadcast_tcp_address(), 0, self._opts.min_in_sync,
                                 self._opts.replication_timeout)
            self.origin.outstanding = self._outstanding
            self._host.record_with(OriginRecording(self.origin, self._host.retention))
        self._membership_start = asyncio.create_task(self._join_cluster(), name="etcd-membership-start")

    async def stop(self) -> None:
        if self._membership_start is not None:
            self._membership_start.cancel()
            await asyncio.wait({self._membership_start})
        for task in list(self._origin_changes):
            await asyncio.wait({task})
        if self.cluster_nodes is not None:
            await self.cluster_nodes.stop()
        if self.adoption is not None:
            await self.adoption.stop()
        if self.origin is not None:
            await asyncio.gather(*self.origin.set_mirrors({}))
        if self.membership is not None:
            await self.membership.stop()
            await self.membership.etcd.close()
        if self._server is not None:
            self._server.close()
            for link in list(self._mirror_links):
                if link.transport is not None:
                    link.transport.close()
        for store in self.mirror_stores.values():
            store.close()
        self.mirror_stores.clear()

    def stats(self) -> dict[str, Any]:
        """This nsqd as an origin (its epoch, records and mirrors) and as a mirror (of which origins, how far)."""
        origin, membership, adoption = self.origin, self.membership, self.adoption
        return {
            "node": membership.node if membership else None,
            "epoch": origin.epoch if origin else (membership.epoch if membership else 0),
            "replication_factor": self._opts.replication_factor, "min_in_sync": self._opts.min_in_sync,
            "records": origin.sequence if origin else 0, "refused_publishes": origin.refused if origin else 0,
            "in_sync_recorded": sorted(origin.recorded) if origin else [],
            "fenced": origin.fenced if origin else False,
            "mirrors": [{"node": link.mirror, "address": link.address, "connected": link.connected,
                         "in_sync": link.in_sync, "acknowledged": link.acked, "lag": origin.sequence - link.acked}
                        for link in origin.links.values()] if origin else [],
            "mirroring": [{"origin": store.origin, "epoch": store.epoch, "applied": store.applied,
                           "depth": store.depth, "topics": store.topic_depths(), "origin_gone": store.fenced}
                          for store in self.mirror_stores.values()],
            "leases_lost": membership.leases_lost if membership else 0,
            "adopted_origins": adoption.adopted if adoption else 0,
            "adopted_messages": adoption.adopted_messages if adoption else 0,
        }

    # -- the cluster ---------------------------------------------------------------------------------------------

    async def _join_cluster(self) -> None:
        await asyncio.to_thread(_import_etcd_client)
        from shared.etcd.client import Etcd

        from .adoption import Adoption, taken_over
        from .membership import Membership
        from .placement import ClusterNodes

        etcd = Etcd(self._opts.etcd_addresses, timeout=self._opts.http_client_request_timeout)
        node = self._host.broadcast_tcp_address()
        self.membership = Membership(etcd, node, self._membership_info, self._opts.replication_liveness_timeout,
                                     self._registered, lambda: taken_over(etcd, node))
        if self.origin is not None:
            from .in_sync import InSyncRecord

            membership = self.membership
            self.origin.record_in_sync = InSyncRecord(etcd, self.origin.node).write
            # surely alive: registered, and the lease renewed within its time to live (counted from before asking)
            self.origin.lease_holds = lambda: membership.epoch == 0 or time.monotonic() < membership.alive_until
        self.adoption = Adoption(etcd, node, self.mirror_stores, self._adopt)
        self.cluster_nodes = ClusterNodes(etcd, self._nodes_changed)
        self.cluster_nodes.start()
        self.membership.start()

    def _membership_info(self) -> dict[str, object]:
        host, opts = self._host, self._opts
        return {"node": host.broadcast_tcp_address(), "node_id": opts.node_id, "hostname": host.hostname,
                "broadcast_address": opts.broadcast_address, "tcp_port": host.broadcast_tcp_port(),
                "http_port": host.broadcast_http_port(), "version": VERSION,
                "replication_address": join_host_port(opts.broadcast_address, self.address[1])}

    def _registered(self, epoch: int) -> None:
        """A new epoch: the links to the mirrors start over under it."""
        if self.origin is not None:
            self._change_origin(self._restart_origin(epoch))

    async def _restart_origin(self, epoch: int) -> None:
        assert self.origin is not None and self.membership is not None
        from .in_sync import MIRRORS

        try:
            record = await self.membership.etcd.get(MIRRORS + self.origin.node)
        except Exception as error:  # EtcdError: the record is read again at the next registration
            log.warning("REPLICATION: reading %s: %s", MIRRORS + self.origin.node, error)
            record = None
        if record is not None:
            previous = json.loads(record.value)
            # only once the adoption is done: a claimant stopped half-way may not have the messages
            if previous.get("adopted") and previous.get("epoch", 0) < epoch:
                self._start_clean(str(previous["adopted_by"]), int(previous["epoch"]))
        await self.origin.restart(epoch)
        if self.cluster_nodes is not None:
            self._nodes_changed(self.cluster_nodes.nodes)

    def _nodes_changed(self, nodes: Nodes) -> None:
        from .placement import choose_mirrors

        if self.adoption is not None:
            self.adoption.nodes_changed(nodes)
        if self.origin is None or not self.origin.epoch:
            return  # not registered yet: the links start with the epoch
        mirrors = choose_mirrors(self.origin.node, nodes, self._opts.replication_factor - 1)
        for closing in self.origin.set_mirrors(mirrors):
            self._change_origin(closing)

    def _change_origin(self, change: Awaitable[None]) -> None:
        task = asyncio.ensure_future(change)
        self._origin_changes.add(task)
        task.add_done_callback(self._origin_changes.discard)

    # -- what this nsqd has outstanding --------------------------------------------------------------------------

    def _outstanding(self) -> Callable[[], list[Publish]]:
        """Every message this nsqd has outstanding, for a mirror's snapshot: what memory holds is copied now, on the
        event loop; the disk queues are read, and the publishes made, by the job returned, on any thread."""
        jobs: list[Callable[[], list[Publish]]] = []
        for topic in self._host.topics.values():
            if topic.ephemeral:
                continue
            jobs.append(_snapshot_job(topic.name, (), topic.outstanding()))
            for channel in topic.channels.values():
                if not channel.ephemeral:
                    jobs.append(_snapshot_job(topic.name, (channel.name,), channel.outstanding()))
        return lambda: [part for job in jobs for part in job()]

    def _start_clean(self, adopted_by: str, epoch: int) -> None:
        """Another nsqd took over this one's messages of an earlier epoch: they are its now, and dropped here."""
        log.warning("REPLICATION: %s took over this nsqd's messages of epoch %d: dropping them here", adopted_by,
                    epoch)
        for topic in self._host.topics.values():
            if topic.ephemeral:
                continue
            for channel in topic.channels.values():
                if not channel.ephemeral:
                    channel.empty()
            topic.empty()

    async def _adopt(self, store: MirrorStore) -> int:
        """A lost origin's outstanding messages into this nsqd's topics and channels; done once this nsqd's own
        mirrors hold them (those that could not have enough copies are kept here all the same). Read from the copy's
        files and put into the queues ``ADOPT_CHUNK`` at a time, so that a deep backlog is never all in memory, nor
        holds up the event loop (the copy is fenced: nothing changes it meanwhile)."""
        now, count = time.time_ns(), 0
        waits: list[Awaitable[None]] = []
        groups: dict[tuple[str, str | None, int], list[QueuedMessage]] = {}
        for topic_name, channel_name, message, due in store.outstanding():
            defer_ms = max(0, (due - now) // 1_000_000) if due else 0
            groups.setdefault((topic_name, channel_name, defer_ms), []).append(message)
            count += 1
            if count % ADOPT_CHUNK == 0:
                self._take_adopted(groups, waits)
                await asyncio.sleep(0)
        self._take_adopted(groups, waits)
        for result in await asyncio.gather(*waits, return_exceptions=True):
            if isinstance(result, Exception):
                log.warning("REPLICATION: adopted messages of %s without all their copies: %s", store.origin, result)
        await self._adopt_history(store)
        return count

    async def _adopt_history(self, store: MirrorStore) -> None:
        """What the lost origin's topics retained, into this nsqd's retention of the same topics, and to this nsqd's
        own mirrors: a rewind here goes back as far as it could there, and survives the next loss too. A topic
        without settings of its own here takes the origin's (an operator's setting follows the topic)."""
        retention = self._host.retention
        for name, (time_ns, max_bytes) in store.history.retain.items():
            topic = self._host.get_topic(name)
            if name not in retention.own and retention.kept(name) != (time_ns, max_bytes):
                self._host.set_retention(topic, RetentionSettings(time_ns / 1e9, max_bytes))
            retained = retention.topics.get(name)
            if retained is None:  # this nsqd keeps no files (no data path)
                continue
            batches, count = store.history.read(name), 0
            while (batch := await asyncio.to_thread(next, batches, None)) is not None:
                retained.take_history(batch)
                if self.origin is not None:
                    self._record_history(self.origin, name, retained.kept, batch)
                count += len(batch)
            log.info("REPLICATION: took over %d retained messages of %s's topic %s", count, store.origin, name)

    @staticmethod
    def _record_history(origin: Origin, name: str, kept: tuple[int, int],
                        batch: list[tuple[QueuedMessage, int]]) -> None:
        """History taken over, to this nsqd's mirrors: a deferred publish alone, with its due time as a delay."""
        for due_ns, group in itertools.groupby(batch, key=lambda item: item[1]):
            if not due_ns:
                origin.record_history(name, kept, 0, [entry for entry, _ in group])
                continue
            for entry, _ in group:
                origin.record_history(name, kept, (due_ns - entry[TIMESTAMP]) // 1_000_000, [entry])

    def _take_adopted(self, groups: dict[tuple[str, str | None, int], list[QueuedMessage]],
                      waits: list[Awaitable[None]]) -> None:
        """``groups`` into their topics and channels (the link's names), under new IDs (emptied); TopicError if a
        topic refuses them."""
        for (topic_name, channel_name, defer_ms), messages in groups.items():
            topic = self._host.get_topic(topic_name)
            entries = [(msg_id, message[BODY], message[TIMESTAMP], message[ATTEMPTS])
                       for msg_id, message in zip(topic.new_ids(len(messages)), messages)]
            if channel_name is None:
                waiting = topic.take(entries, defer_ms, sum(len(entry[BODY]) for entry in entries))
            elif channel_name.endswith(DEAD_LETTERS):
                waiting = topic.get_channel(channel_name[:-len(DEAD_LETTERS)]).add_dead_letters(entries)
            else:
                waiting = topic.get_channel(channel_name).add(entries, defer_ms)
            if waiting is not None:
                waits.append(waiting)
        groups.clear()


def _snapshot_job(topic: str, channels: tuple[str, ...], outstanding: Outstanding) -> Callable[[], list[Publish]]:
    def parts() -> list[Publish]:
        own = _snapshot_parts(topic, channels, outstanding.queued(), outstanding.delayed)
        if not channels:
            return own
        return own + _snapshot_parts(topic, (dead_letters_of(channels[0]),), outstanding.dead_letters(), [])
    return parts


def _snapshot_parts(topic: str, channels: tuple[str, ...], queued: list[QueuedMessage],
                    delayed: list[tuple[QueuedMessage, int]], size: int = 1000) -> list[Publish]:
    """``queued`` in publishes of ``size`` messages; each of ``delayed`` in one of its own, its delay counted from
    its timestamp, as a mirror counts it."""
    parts = [Publish(0, topic, channels, 0, Messages.of(queued[start:start + size]))
             for start in range(0, len(queued), size)]
    now = time.time_ns()
    for entry, delay_ms in delayed:
        since_published = max(0, now - entry[TIMESTAMP]) // 1_000_000
        parts.append(Publish(0, topic, channels, since_published + delay_ms, Messages.of([entry])))
    return parts


def _import_etcd_client() -> None:
    import shared.etcd.client  # noqa: F401  (with it aiohttp)
