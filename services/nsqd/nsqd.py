"""NSQD: one broker instance. ``await start()`` binds its listeners and starts its loops, ``await stop()``
closes everything it started. Owns the topics, the client connections and the end-of-turn flush of output.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from nsqclient.addresses import is_unix_socket, join_host_port
from nsqclient.protocol.names import is_ephemeral, is_valid_channel_name
from nsqclient.version import VERSION
from shared.addresses import remove_unix_socket
from shared.flags import secret_from_file
from shared.http_server import HTTPService
from shared.metrics import PrometheusEndpoint

from . import atomic_file, http_listeners, identify, metadata, tls, workers
from .busy_poll import BusyPoll
from .channel import Channel
from .client import Client, EndOfTurnFlush
from .lookup_peer import LookupPeer, channels_in_cluster, registrations
from .metadata import DataPathLock
from .options import Options
from .listener_context import ListenerContext
from .protocol_v2 import ConnectionV2
from .queue_scan import QueueScanner
from .stats import GCPauses, collect
from .retention import Retention, RetentionSettings
from .storage import Storage
from .topic import Topic

if TYPE_CHECKING:
    from collections.abc import Iterator

    from shared.auth_client import AuthClient
    from shared.cluster_info import ClusterInfo

    from .metrics import NSQDCollector
    from .node_id_check import NodeIdCheck
    from .recorder import Recording
    from .replication.node import Replication
    from .statsd import StatsdPusher

log = logging.getLogger("nsqd")

METADATA_RETRY = 1.0  # seconds between attempts to write nsqd.dat while the disk refuses it
NODE_ID_CHECK_DELAY = 0.5  # seconds after the first lookupd is known: its registrations are out by then


class NSQD:
    def __init__(self, opts: Options) -> None:
        opts.validate()
        self.opts = opts
        self.hostname = socket.gethostname()
        self.start_time = int(time.time())
        self.topics: dict[str, Topic] = {}
        self.connections: set[ConnectionV2] = set()
        self.metrics = PrometheusEndpoint(self._metrics_collector)
        self.gc_pauses = GCPauses()
        self.tcp_address: tuple[str, int] = ("", 0)
        self.http_address: tuple[str, int] = ("", 0)
        self._client_ids = itertools.count(1)
        self._tcp_server: workers.Listener | None = None
        # the HTTP and HTTPS listeners, each with the service that holds its connections
        self._http_servers: list[tuple[asyncio.AbstractServer, HTTPService]] = []
        self.https_address: tuple[str, int] = ("", 0)
        # the certificate clients upgrade to after IDENTIFY, and HTTPS serves
        self.tls_context = tls.server_context(opts)
        # how nsqd verifies its lookupds; None: it registers in plain, as NSQ
        self.lookupd_tls_context = tls.lookupd_context(opts)
        self.auth_client = _auth_client(opts) if opts.auth_http_addresses else None
        self._tcp_context = ListenerContext(opts, identify.defaults(opts), self.tls_context, self.auth_client,
                                            EndOfTurnFlush(), BusyPoll())
        self._scanner = QueueScanner(opts, self.channels)
        self._scan_task: asyncio.Task[None] | None = None
        self.data_path = Path(opts.data_path or os.getcwd())
        self.storage = Storage(self.data_path, opts)
        self.retention = Retention(self.data_path, opts)
        self.storage.record_with(self.retention)
        self.storage.reclaim_with(self.retention.reclaim)
        self._retention_task: asyncio.Task[None] | None = None
        self._sync_task: asyncio.Task[None] | None = None
        self.lookup_peers: dict[str, LookupPeer] = {}
        self._node_id_check: NodeIdCheck | None = None  # started with the first lookupd
        self._node_id_check_start: asyncio.Task[None] | None = None
        self._topic_starts: set[asyncio.Task[None]] = set()
        # one thread for fsyncs: they never overlap, and stop() can wait for the one under way
        self._disk_sync = ThreadPoolExecutor(max_workers=1, thread_name_prefix="disk-sync")
        self._data_path_lock = DataPathLock(self.data_path)
        self._metadata_changed = asyncio.Event()
        self._metadata_write = asyncio.Lock()
        self._metadata_task: asyncio.Task[None] | None = None
        self.replication: Replication | None = None  # with --etcd-address
        self._statsd: StatsdPusher | None = None  # with --statsd-address

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()  # nothing bound so far stays open
            raise

    async def _start(self) -> None:
        self._data_path_lock.acquire()
        atomic_file.remove_leftovers(self.data_path)
        self._load_metadata()
        metadata.save(self.data_path, self._metadata())  # nothing is served yet: blocking is fine
        self._metadata_task = asyncio.create_task(self._write_metadata_when_changed(), name="metadata")
        self._sync_task = asyncio.create_task(self._sync_disk_queues(), name="disk-sync")
        self._retention_task = asyncio.create_task(self.retention.run(), name="retention")
        context = self._tcp_context
        self._tcp_server, self.tcp_address = await workers.listen(self.opts, lambda: ConnectionV2(self, context), log)
        self._http_servers = await http_listeners.listen(self)
        gc.callbacks.append(self.gc_pauses)
        await self.set_lookupd_addresses(self.opts.nsqlookupd_tcp_addresses)
        if self.opts.etcd_addresses:
            await self._start_replication()
        if self.opts.statsd_address:
            self._start_statsd()
        self._scan_task = asyncio.create_task(self._scanner.run(), name="queue-scan")

    async def stop(self) -> None:
        """Stop accepting, close every client, stop the loops."""
        log.info("NSQ: stopping subsystems")
        if self._tcp_server is not None:
            self._tcp_server.close()
        for connection in list(self.connections):
            connection.close()
        for peer in self.lookup_peers.values():
            await peer.stop()
        if self.replication is not None:
            await self.replication.stop()
        if self._statsd is not None:
            await self._statsd.stop()
        if self._node_id_check_start is not None:
            self._node_id_check_start.cancel()
            await asyncio.wait({self._node_id_check_start})
        if self._node_id_check is not None:
            await self._node_id_check.stop()
        for topic in list(self.topics.values()):
            topic.close()
        tasks = [*self._topic_starts, self._scan_task, self._metadata_task, self._sync_task, self._retention_task]
        for task in filter(None, tasks):
            task.cancel()
            await asyncio.wait({task})
        self._disk_sync.shutdown(wait=True)
        for topic in self.topics.values():
            topic.flush_to_disk()
        self.retention.close()
        for server, service in self._http_servers:
            server.close()
            service.close_connections()
            await server.wait_closed()
        if self._tcp_server is not None:
            await self._tcp_server.wait_closed()
        for address in (self.opts.tcp_address, self.opts.http_address):
            if address and is_unix_socket(address):
                remove_unix_socket(address)
        if self.gc_pauses in gc.callbacks:
            gc.callbacks.remove(self.gc_pauses)
        if self.auth_client is not None:
            await self.auth_client.close()
        if self._data_path_lock.held:
            try:
                metadata.save(self.data_path, self._metadata())
            except OSError as error:  # a full disk: the previous nsqd.dat stays, as NSQ's Exit does
                log.error("failed to persist metadata - %s", error)
            self._data_path_lock.release()
        log.info("NSQ: bye")

    def _metrics_collector(self) -> NSQDCollector:
        from .metrics import NSQDCollector  # at the first scrape

        return NSQDCollector(self)

    # -- clients ---------------------------------------------------------------------------------------------

    def connected(self, connection: ConnectionV2) -> int:
        self.connections.add(connection)
        return next(self._client_ids)

    def disconnected(self, connection: ConnectionV2) -> None:
        self.connections.discard(connection)

    def producers(self, topic: str | None) -> Iterator[Client]:
        for connection in self.connections:
            client = connection.client
            if client.pub_counts and (topic is None or topic in client.pub_counts):
                yield client

    # -- topics ----------------------------------------------------------------------------------------------

    def get_topic(self, name: str) -> Topic:
        """The topic, created on first use."""
        topic = self.topics.get(name)
        if topic is None:
            topic = Topic(name, self.opts, self.storage, self._channels_changed)
            self.topics[name] = topic
            log.info("TOPIC(%s): created", name)
            if any(peer.http_address for peer in self.lookup_peers.values()) and not topic.ephemeral:
                # as NSQ does: the channels the cluster has for this topic exist before any message moves, so
                # the first consumer's channel does not take what the others should get too
                topic.started = False
                task = asyncio.create_task(self._start_with_cluster_channels(topic))
                self._topic_starts.add(task)
                task.add_done_callback(self._topic_starts.discard)
            self._topics_changed(topic)
        return topic

    async def _start_with_cluster_channels(self, topic: Topic) -> None:
        try:

            names = await channels_in_cluster(self.lookup_peers.values(), topic.name, self.cluster_client)
            for name in sorted(names):
                if is_valid_channel_name(name) and not is_ephemeral(name) and not topic.exiting:
                    topic.get_channel(name)
        finally:
            topic.start()

    def delete_topic(self, name: str) -> None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            topic.delete()
            self.retention.forget_settings(name)
            log.info("TOPIC(%s): deleted", name)
            self._topics_changed(topic)

    def _channels_changed(self, topic: Topic) -> None:
        if topic.ephemeral and not topic.channels and not topic.exiting:
            self.delete_topic(topic.name)
        else:
            self._topics_changed(topic)

    def _topics_changed(self, topic: Topic) -> None:
        """A topic or channel came or went: lookupds hear of every one, nsqd.dat of the durable ones."""
        for peer in self.lookup_peers.values():
            peer.changed()
        if not topic.ephemeral:
            self._metadata_changed.set()

    # -- lookupd ---------------------------------------------------------------------------------------------

    async def set_lookupd_addresses(self, addresses: list[str]) -> None:
        """Connects to the lookupds in ``addresses`` not yet known, and drops those no longer in it."""
        self.opts.nsqlookupd_tcp_addresses = list(addresses)
        for address in list(self.lookup_peers):
            if address not in addresses:
                await self.lookup_peers.pop(address).stop()
        for address in addresses:
            if address not in self.lookup_peers:
                peer = LookupPeer(address, self._lookupd_identity, lambda: registrations(self.topics),
                                  tls=self.lookupd_tls_context, tls_server_name=self.opts.lookupd_tls_server_name,
                                  identified=self._lookupd_identified)
                self.lookup_peers[address] = peer
                peer.start()
        if addresses and self._node_id_check_start is None:
            self._node_id_check_start = asyncio.create_task(self._start_node_id_check(), name="node-id-check-start")

    def _lookupd_identified(self) -> None:
        if self._node_id_check is not None:
            self._node_id_check.due()  # else it checks once it has started

    async def _start_node_id_check(self) -> None:
        """Starts the check that warns of other nsqd using this one's node ID (with the first lookupd), once the
        registrations with the lookupds are out: its HTTP client (aiohttp's, only for an nsqd that knows lookupds)
        takes a tenth of a second or more to import, on a thread then, so that the event loop goes on serving."""
        await asyncio.sleep(NODE_ID_CHECK_DELAY)
        await asyncio.to_thread(_import_http_client)
        from .node_id_check import NodeIdCheck

        self._node_id_check = NodeIdCheck(self.opts.node_id, self.broadcast_tcp_address, self._identified_lookupds,
                                          self.cluster_client())
        self._node_id_check.start()
        self._node_id_check.due()

    def cluster_client(self) -> ClusterInfo:
        """A client of the lookupds' and the other nsqds' HTTP APIs, with ``--http-client-auth-secret-file``'s
        secret for those that ask for one."""
        from shared.cluster_info import ClusterInfo  # aiohttp: only once nsqd asks

        return ClusterInfo.open(self.opts.http_client_connect_timeout, self.opts.http_client_request_timeout,
                                secret=secret_from_file(self.opts.http_client_auth_secret_file))

    def broadcast_tcp_port(self) -> int:
        # 0 on a unix socket (bound port -1), as NSQ registers then
        return self.opts.broadcast_tcp_port or max(0, self.tcp_address[1])

    def broadcast_http_port(self) -> int:
        return self.opts.broadcast_http_port or max(0, self.http_address[1])

    def broadcast_tcp_address(self) -> str:
        """This nsqd as lookupds list it."""
        return join_host_port(self.opts.broadcast_address, self.broadcast_tcp_port())

    def _identified_lookupds(self) -> list[str]:
        return [peer.http_address for peer in self.lookup_peers.values() if peer.http_address]

    def _lookupd_identity(self) -> dict[str, object]:
        opts = self.opts
        identity: dict[str, object] = {
            "version": VERSION, "tcp_port": self.broadcast_tcp_port(),
            "http_port": self.broadcast_http_port(), "hostname": self.hostname,
            "broadcast_address": opts.broadcast_address, "topology_zone": opts.topology_zone,
            "topology_region": opts.topology_region}
        if opts.external_broadcast_address:
            identity.update(external_broadcast_address=opts.external_broadcast_address,
                            external_tcp_port=opts.external_broadcast_tcp_port,
                            external_http_port=opts.external_broadcast_http_port)
        return identity

    def _start_statsd(self) -> None:
        from .statsd import StatsdPusher, expand_prefix  # only with --statsd-address

        opts = self.opts
        prefix = expand_prefix(opts.statsd_prefix, opts.broadcast_address,
                               self.broadcast_http_port())
        self._statsd = StatsdPusher(opts.statsd_address, opts.statsd_interval, opts.statsd_udp_packet_size,
                                    prefix, opts.statsd_exclude_ephemeral,
                                    lambda: collect(self, None, None, False, opts.statsd_mem_stats))
        self._statsd.start()

    # -- replication -----------------------------------------------------------------------------------------

    async def _start_replication(self) -> None:
        """The one place nsqd loads replication (only with --etcd-address)."""
        from .replication.node import Replication

        self.replication = Replication(self)
        await self.replication.start()

    def record_with(self, recording: Recording) -> None:
        """Every queue that is not ephemeral, now and to come, is recorded by ``recording`` too."""
        self.storage.record_with(recording)
        for topic in self.topics.values():
            topic.record_with(self.storage.topic_recorder(topic.name))

    # -- metadata --------------------------------------------------------------------------------------------

    def set_retention(self, topic: Topic, settings: RetentionSettings) -> None:
        """The topic's own retention settings, in force at once."""
        self.retention.set(topic.name, settings)
        topic.record_with(self.storage.topic_recorder(topic.name))
        self._metadata_changed.set()

    def note_metadata_change(self) -> None:
        """Something nsqd.dat records changed outside nsqd's own methods (a rewind ended): written again soon."""
        self._metadata_changed.set()

    def _metadata(self) -> list[metadata.TopicMetadata]:
        return metadata.snapshot(self.topics, self.retention.own)

    def _load_metadata(self) -> None:
        for recorded in metadata.with_queues_on_disk(self.data_path, metadata.load(self.data_path)):
            self.retention.set(recorded.name, recorded.retention)  # before the topic: its files stay
            topic = self.get_topic(recorded.name)
            topic.started = False  # its backlog waits for all its channels
            if recorded.paused:
                topic.pause()
            if recorded.ttl is not None:
                topic.set_ttl(recorded.ttl)
            for recorded_channel in recorded.channels:
                recorded_channel.restore(topic, topic.get_channel(recorded_channel.name),
                                         self.retention.topics.get(topic.name), self.note_metadata_change)
            topic.start()

    @property
    def health(self) -> str:
        return self.storage.health.status

    async def _sync_disk_queues(self) -> None:
        """Each disk queue is synced (fsync and metadata, off the event loop) once --sync-every operations or
        --sync-timeout have passed since its last sync, whichever comes first."""
        interval = min(self.opts.sync_timeout, 0.1)
        last_sync: dict[str, float] = {}
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for name, queue in list(self.storage.queues.items()):
                timed_out = now - last_sync.get(name, 0.0) >= self.opts.sync_timeout
                if queue.sync_due or (queue.dirty and timed_out):
                    last_sync[name] = now
                    try:
                        await loop.run_in_executor(self._disk_sync, queue.sync_job())
                    except OSError as error:
                        self.storage.health.write_failed(f"failed to sync {name}", error)
                    else:
                        self.storage.health.write_succeeded()  # the disk takes writes again

    async def persist_metadata(self) -> None:
        """Writes nsqd.dat now (off the event loop). One write at a time, each taking its snapshot when its turn
        comes, so the last one written is the newest."""
        async with self._metadata_write:
            await asyncio.to_thread(metadata.save, self.data_path, self._metadata())

    async def _write_metadata_when_changed(self) -> None:
        """Writes nsqd.dat after changes; one the disk refuses (full) makes nsqd unhealthy and is tried again every
        ``METADATA_RETRY`` seconds until it succeeds, so that the topics created meanwhile are not forgotten."""
        while True:
            await self._metadata_changed.wait()
            self._metadata_changed.clear()
            try:
                await self.persist_metadata()
            except OSError as error:
                self.storage.health.write_failed("failed to persist metadata", error)
                await asyncio.sleep(METADATA_RETRY)
                self._metadata_changed.set()

    def channels(self) -> list[Channel]:
        return [channel for topic in self.topics.values() for channel in topic.channels.values()]


def _auth_client(opts: Options) -> AuthClient:
    from shared.auth_client import AuthClient  # aiohttp's client, only for an nsqd that has auth servers

    return AuthClient(opts.auth_http_addresses, opts.auth_http_request_method,
                      connect_timeout=opts.http_client_connect_timeout,
                      request_timeout=opts.http_client_request_timeout, ssl_context=tls.auth_server_context(opts))


def _import_http_client() -> None:
    import services.nsqd.node_id_check  # noqa: F401  (with it shared.cluster_info and aiohttp)
