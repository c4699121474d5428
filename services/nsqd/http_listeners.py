"""nsqd's HTTP and HTTPS listeners: one router, and, with ``--http-auth-required``, one gate to the auth server
whose answers both listeners share."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from shared.allowed_hosts import allowed_names
from shared.http_auth import HTTPAuth
from shared.http_server import HTTPService
from shared.listeners import listen_tcp

from .http_api import build_router, tls_required

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("nsqd")


async def listen(nsqd: NSQD) -> list[tuple[asyncio.AbstractServer, HTTPService]]:
    """Starts the listeners the options ask for (setting nsqd's ``https_address`` and ``http_address``)."""
    opts, listening = nsqd.opts, []
    router, hosts = build_router(nsqd), allowed_hosts(nsqd)
    auth = None
    if opts.http_auth_required:
        assert nsqd.auth_client is not None  # the options ask for an address with it
        auth = HTTPAuth(nsqd.auth_client, "nsqd", log)
    if nsqd.tls_context is not None and opts.https_address:
        service = HTTPService(router, log, allow_cross_site=opts.http_allow_cross_site, allowed_hosts=hosts,
                              auth=auth)
        server, nsqd.https_address = await listen_tcp(opts.https_address, service, log, nsqd.tls_context, "HTTPS")
        listening.append((server, service))
    if opts.http_address:
        # --tls-required=true: plain HTTP only says where HTTPS is
        service = HTTPService(router, log, (lambda request: tls_required(nsqd)) if opts.tls_required == "true"
                              else None, opts.http_allow_cross_site, allowed_hosts=hosts, auth=auth)
        server, nsqd.http_address = await listen_tcp(opts.http_address, service, log, label="HTTP", unix=True)
        listening.append((server, service))
    return listening


def allowed_hosts(nsqd: NSQD) -> frozenset[str]:
    """The names an HTTP request's Host may give (allowed_hosts.py)."""
    opts = nsqd.opts
    return allowed_names(opts.http_allowed_host, nsqd.hostname, opts.broadcast_address,
                         opts.external_broadcast_address, opts.http_address, opts.https_address)
