"""NSQLookupd: one discovery instance. ``await start()`` binds TCP (nsqd registrations) and HTTP (lookups),
``await stop()`` closes them. State is in memory only: nsqd re-registers everything when it reconnects.
With ``--tls-cert`` nsqds may register over TLS (``shared.protocol.lookup_v1`` says how it is negotiated)."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from typing import TYPE_CHECKING, Iterator

from nsqclient.version import VERSION
from shared.allowed_hosts import allowed_names
from shared.http_auth import HTTPAuth
from shared.http_server import HTTPService
from shared.listeners import listen_tcp
from shared.metrics import PrometheusEndpoint
from shared.tls import server_context

from .http_api import build_router, count_request
from .options import Options
from .protocol_v1 import ConnectionV1
from .registration_db import Registration, RegistrationDB

if TYPE_CHECKING:
    from shared.auth_client import AuthClient

log = logging.getLogger("nsqlookupd")

# both ends of a registration are ours when it is over TLS: no reason to accept older versions
TLS_MIN_VERSION = "tls1.2"


class NSQLookupd:
    def __init__(self, opts: Options) -> None:
        opts.validate()
        self.opts = opts
        self.version = VERSION
        self.hostname = socket.gethostname()
        self.db = RegistrationDB()
        # the certificate nsqds that ask for TLS in IDENTIFY upgrade to; None: plain only, as NSQ
        self.tls_context = server_context(opts.tls_cert, opts.tls_key, opts.tls_root_ca_file,
                                          client_certificates=bool(opts.tls_root_ca_file),
                                          min_version=TLS_MIN_VERSION)
        # HTTP requests answered, by route and status, for /metrics
        self.request_counts: dict[tuple[str, int], int] = {}
        self.metrics = PrometheusEndpoint(lambda: LookupdCollector(self))
        self.tcp_address: tuple[str, int] = ("", 0)
        self.http_address: tuple[str, int] = ("", 0)
        self.external_http_address: tuple[str, int] = ("", 0)
        self.https_address: tuple[str, int] = ("", 0)
        self._tcp_server: asyncio.AbstractServer | None = None
        self._http_servers: list[tuple[asyncio.AbstractServer, HTTPService]] = []
        self.auth_client = _auth_client(opts) if opts.auth_http_addresses else None
        # one gate for every HTTP listener: they share the auth server's answers
        self._http_auth = HTTPAuth(self.auth_client, "nsqlookupd", log) \
            if opts.http_auth_required and self.auth_client is not None else None

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.stop()
            raise

    async def _start(self) -> None:
        self._tcp_server, self.tcp_address = await listen_tcp(self.opts.tcp_address, lambda: ConnectionV1(self), log)
        self.http_address = await self._listen_http(self.opts.http_address, "HTTP", external=False)
        if self.opts.https_address:
            self.https_address = await self._listen_http(self.opts.https_address, "HTTPS", external=False,
                                                         tls=self.tls_context)
        if self.opts.external_http_address:
            self.external_http_address = await self._listen_http(self.opts.external_http_address, "HTTP (external)",
                                                                 external=True)

    async def _listen_http(self, address: str, label: str, external: bool,
                           tls: ssl.SSLContext | None = None) -> tuple[str, int]:
        # lookupd may sit behind a proxy: the names it puts in X-Forwarded-Host are lookupd's own
        service = HTTPService(build_router(self, external), log, allow_cross_site=self.opts.http_allow_cross_site,
                              observe=lambda request, response: count_request(self, request, response),
                              trust_forwarded_host=True, allowed_hosts=allowed_names(
                                  self.opts.http_allowed_host, socket.gethostname(), self.opts.broadcast_address,
                                  self.opts.http_address, self.opts.https_address,
                                  self.opts.external_http_address), auth=self._http_auth)
        server, bound = await listen_tcp(address, service, log, tls, label)
        self._http_servers.append((server, service))
        return bound

    async def stop(self) -> None:
        if self._tcp_server is not None:
            self._tcp_server.close()
        for server, service in self._http_servers:
            server.close()
            service.close_connections()
            await server.wait_closed()
        self._http_servers.clear()
        if self._tcp_server is not None:
            await self._tcp_server.wait_closed()
        if self.auth_client is not None:
            await self.auth_client.close()


def _auth_client(opts: Options) -> AuthClient:
    from shared.auth_client import AuthClient  # aiohttp's client, only for a lookupd that has auth servers

    return AuthClient(opts.auth_http_addresses, opts.auth_http_request_method,
                      connect_timeout=opts.http_client_connect_timeout,
                      request_timeout=opts.http_client_request_timeout,
                      ssl_context=ssl.create_default_context(cafile=opts.tls_root_ca_file)
                      if opts.tls_root_ca_file else None)


class LookupdCollector:
    def __init__(self, lookupd: NSQLookupd) -> None:
        self._lookupd = lookupd

    def collect(self) -> Iterator[object]:
        from prometheus_client.core import GaugeMetricFamily

        db = self._lookupd.db
        counts = {"client": 0, "topic": 0, "channel": 0}
        for registration in db.registrations:
            counts[registration.category] = counts.get(registration.category, 0) + 1
        for category, help_text in (("topic", "Topics registered"), ("channel", "Channels registered")):
            family = GaugeMetricFamily(f"nsqlookupd_{category}s", help_text)
            family.add_metric([], counts[category])
            yield family
        clients = db.registrations.get(Registration("client", "", ""), {})
        producers = GaugeMetricFamily("nsqlookupd_producers", "nsqd nodes identified")
        producers.add_metric([], len(clients))
        yield producers
        over_tls = GaugeMetricFamily("nsqlookupd_producers_tls", "nsqd nodes identified over TLS")
        over_tls.add_metric([], sum(producer.peer.tls for producer in clients.values()))
        yield over_tls
        registrations = GaugeMetricFamily("nsqlookupd_registrations", "Producer registrations by category",
                                          labels=["category"])
        for category in ("client", "topic", "channel"):
            registrations.add_metric([category], sum(len(p) for r, p in db.registrations.items()
                                                     if r.category == category))
        yield registrations
        from prometheus_client.core import CounterMetricFamily

        requests = CounterMetricFamily("nsqlookupd_http_requests", "HTTP requests answered",
                                       labels=["path", "status"])
        for (path, status), count in sorted(self._lookupd.request_counts.items()):
            requests.add_metric([path, str(status)], count)
        yield requests
