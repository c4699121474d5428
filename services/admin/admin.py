"""NSQAdmin: one admin instance. ``await start()`` opens its SQLite store, its HTTP client and its listener and starts
the history sampler; ``await stop()`` undoes all of it. Everything it shows is read from the cluster on request;
only history samples and the audit log are kept."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from typing import Iterator
from urllib.parse import urlsplit

import aiohttp
import aiosqlite
from aiohttp import web

from nsqclient.version import VERSION
from shared.allowed_hosts import allowed_names
from shared.cluster_info import ClusterInfo, ClusterInfoError
from shared.flags import secret_from_file
from shared.listeners import listen_http
from shared.metrics import PrometheusEndpoint

from .aggregation import Json
from .audit import AuditEntry, AuditLog
from .cluster import Cluster
from .graphite import Graphite
from .history import History, samples_from_stats
from .http_api import build_app
from .login import Login
from .notifications import Notifier, notification_body
from .options import Options
from .pages import Pages
from .store import open_store
from .upstream import UpstreamError, Warnings

log = logging.getLogger("nsqadmin")

DATABASE_FILE = "nsqadmin.db"
IDENTITY_KEPT = 60.0  # seconds the identity of the admin's secret is kept before it is asked again


class NSQAdmin:
    def __init__(self, opts: Options) -> None:
        opts.validate()
        self.opts = opts
        self.version = VERSION
        self.hostname = socket.gethostname()
        # the names a request's Host may give (shared/allowed_hosts.py): the admin's own, and the origins it trusts
        self.allowed_hosts = allowed_names(opts.http_allowed_host, self.hostname, opts.http_address,
                                           *(urlsplit(origin).netloc for origin in opts.allowed_origins))
        self.pages = Pages(opts.base_path, VERSION)
        self.graphite = Graphite.from_options(opts)
        self.login = Login(opts.htpasswd_file) if opts.htpasswd_file else None
        self.http_address: tuple[str, int] = ("", 0)
        # requests answered, by route, method and status: (count, seconds spent)
        self.request_stats: dict[tuple[str, str, int], tuple[int, float]] = {}
        self.metrics = PrometheusEndpoint(lambda: AdminCollector(self))
        self.last_snapshot: list[Json] = []
        self.last_snapshot_errors = 0
        self._session: aiohttp.ClientSession | None = None
        self._secret = ""  # --http-client-auth-secret-file's
        self._identity = ("", -IDENTITY_KEPT)  # the auth server's name for it, and when it was asked
        self._database: aiosqlite.Connection | None = None
        self._runner: web.AppRunner | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._notifier: Notifier | None = None
        self.cluster: Cluster
        self.history: History
        self.audit: AuditLog

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "the admin is not started"
        return self._session

    @property
    def database_path(self) -> str:
        return os.path.join(self.opts.data_path or os.getcwd(), DATABASE_FILE)

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        self._database = await open_store(self.database_path)
        self.history, self.audit = History(self._database), AuditLog(self._database)
        timeout = aiohttp.ClientTimeout(total=self.opts.http_client_request_timeout,
                                        sock_connect=self.opts.http_client_connect_timeout)
        self._session = aiohttp.ClientSession(timeout=timeout, headers={"User-Agent": f"nsqadmin/{VERSION}"})
        self._secret = secret_from_file(self.opts.http_client_auth_secret_file)
        self.cluster = Cluster(ClusterInfo(self._session, secret=self._secret), self.opts.nsqlookupd_http_addresses,
                               self.opts.nsqd_http_addresses)
        if self.opts.notification_http_endpoint:
            self._notifier = Notifier(self._session, self.opts.notification_http_endpoint, timeout)
        self._runner, self.http_address = await listen_http(self.opts.http_address, build_app(self), log)
        if self.opts.history_interval > 0:
            self._sampler = asyncio.create_task(self._sample_forever())

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            await asyncio.wait([self._sampler])
        if self._runner is not None:
            await self._runner.cleanup()
        if self._notifier is not None:
            await self._notifier.close()
        if self._session is not None:
            await self._session.close()
        if self._database is not None:
            await self._database.close()

    def set_lookupd_addresses(self, addresses: list[str]) -> None:
        """``PUT /config/nsqlookupd_http_addresses``: later requests use the new lookupds."""
        self.opts.nsqlookupd_http_addresses = list(addresses)
        self.cluster.lookupd_addresses = list(addresses)

    # --- history -------------------------------------------------------------------------------------------------

    async def snapshot(self) -> list[Json]:
        """Every topic across the cluster now; also kept for /metrics."""
        warnings = Warnings()
        try:
            topics = await self.cluster.topics_snapshot(warnings)
        except UpstreamError as error:
            log.warning("cluster snapshot failed - %s", error)
            self.last_snapshot_errors = 1
            return self.last_snapshot
        self.last_snapshot, self.last_snapshot_errors = topics, len(warnings)
        return topics

    async def sample(self, now: float) -> None:
        """One history sample of every topic and channel, and old samples and audit entries dropped."""
        topics = await self.snapshot()
        await self.history.record(now, samples_from_stats(topics))
        before = now - self.opts.history_retention
        await self.history.prune(before)
        await self.audit.prune(before)

    async def _sample_forever(self) -> None:
        while True:
            started = time.monotonic()
            try:
                await self.sample(time.time())
            except (aiosqlite.Error, OSError) as error:
                log.error("history sample failed - %s", error)
            await asyncio.sleep(max(0.0, self.opts.history_interval - (time.monotonic() - started)))

    # --- audit ---------------------------------------------------------------------------------------------------

    async def identity(self) -> str:
        """The identity the cluster's auth server names the admin's secret, asked of the first lookupd (or nsqd)
        and kept for a minute; "" without a secret, or when no node says."""
        if not self._secret:
            return ""
        now = time.monotonic()
        if now - self._identity[1] > IDENTITY_KEPT:
            address = (self.opts.nsqlookupd_http_addresses or self.opts.nsqd_http_addresses)[0]
            try:
                self._identity = (await self.cluster.client.identity(address), now)
            except ClusterInfoError as error:
                log.warning("the identity of the admin's secret is unknown - %s", error)
                return ""
        return self._identity[0]

    async def record_action(self, entry: AuditEntry, url: str, notify: bool) -> None:
        """Stores an operator action and, with ``notify``, sends nsqadmin's notification for it (if an endpoint is
        set)."""
        try:
            await self.audit.record(entry)
        except aiosqlite.Error as error:
            log.error("audit log write failed - %s", error)
        if notify and self._notifier is not None:
            self._notifier.send(notification_body(entry, url, self.hostname))


class AdminCollector:
    """The cluster as the admin last saw it, and the admin's own HTTP requests."""

    def __init__(self, admin: NSQAdmin) -> None:
        self._admin = admin

    def collect(self) -> Iterator[object]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily

        topics = self._admin.last_snapshot
        topic_labels = ["topic"]
        channel_labels = ["topic", "channel"]
        topic_gauges = {key: GaugeMetricFamily(f"nsqadmin_topic_{key}", text, labels=topic_labels)
                        for key, text in (("depth", "Messages queued at the topic, across nodes"),
                                          ("backend_depth", "Messages of the topic on disk, across nodes"),
                                          ("paused", "1 when the topic is paused on any node"),
                                          ("nodes", "nsqd nodes with the topic"))}
        topic_messages = CounterMetricFamily("nsqadmin_topic_messages", "Messages published to the topic, "
                                             "across nodes", labels=topic_labels)
        channel_gauges = {key: GaugeMetricFamily(f"nsqadmin_channel_{key}", text, labels=channel_labels)
                          for key, text in (("depth", "Messages queued at the channel, across nodes"),
                                            ("in_flight", "Messages delivered and not yet finished"),
                                            ("deferred", "Messages deferred"),
                                            ("clients", "Consumers connected"),
                                            ("paused", "1 when the channel is paused on any node"))}
        channel_counters = {key: CounterMetricFamily(f"nsqadmin_channel_{key}", text, labels=channel_labels)
                            for key, text in (("messages", "Messages that reached the channel"),
                                              ("requeued", "Messages requeued"),
                                              ("timed_out", "Messages that timed out in flight"))}
        for topic in topics:
            name = [topic["topic_name"]]
            for key, value in (("depth", topic["depth"]), ("backend_depth", topic["backend_depth"]),
                               ("paused", int(topic["paused"])), ("nodes", len(topic["nodes"]))):
                topic_gauges[key].add_metric(name, value)
            topic_messages.add_metric(name, topic["message_count"])
            for channel in topic["channels"]:
                labels = [topic["topic_name"], channel["channel_name"]]
                for key, field in (("depth", "depth"), ("in_flight", "in_flight_count"),
                                   ("deferred", "deferred_count"), ("clients", "client_count")):
                    channel_gauges[key].add_metric(labels, channel[field])
                channel_gauges["paused"].add_metric(labels, int(channel["paused"]))
                for key, field in (("messages", "message_count"), ("requeued", "requeue_count"),
                                   ("timed_out", "timeout_count")):
                    channel_counters[key].add_metric(labels, channel[field])
        yield from topic_gauges.values()
        yield topic_messages
        yield from channel_gauges.values()
        yield from channel_counters.values()
        errors = GaugeMetricFamily("nsqadmin_upstream_errors", "Hosts that failed to answer the last cluster read")
        errors.add_metric([], self._admin.last_snapshot_errors)
        yield errors
        requests = SummaryMetricFamily("nsqadmin_http_request_duration_seconds", "HTTP requests answered",
                                       labels=["route", "method", "status"])
        for (route, method, status), (count, seconds) in sorted(self._admin.request_stats.items()):
            requests.add_metric([route, method, str(status)], count, seconds)
        yield requests
