"""What the admin's request handlers see of the admin: ``AdminState``, the part of ``NSQAdmin`` they use, kept in
the app under ``ADMIN_KEY``; and who is asking (``user_of``, ``is_admin``: the built-in login or
``--acl-http-header``, and ``--admin-user``).

The handlers (``http_api``, ``web_ui``) depend on this interface rather than on ``admin``, so imports run one way:
``admin`` builds the app from ``http_api``, which takes the pages from ``web_ui``, and both read this module.
"""

from __future__ import annotations

from typing import Protocol

import aiohttp
from aiohttp import web

from shared.metrics import PrometheusEndpoint

from .aggregation import Json
from .audit import AuditEntry, AuditLog
from .cluster import Cluster
from .graphite import Graphite
from .history import History
from .login import Login
from .options import Options
from .pages import Pages


class AdminState(Protocol):
    opts: Options
    cluster: Cluster
    history: History
    audit: AuditLog
    pages: Pages
    login: Login | None  # --htpasswd-file
    allowed_hosts: frozenset[str]  # the names a request's Host may give (shared/allowed_hosts.py)
    metrics: PrometheusEndpoint
    graphite: Graphite | None  # --graphite-url: the pages' graphs come from it
    # requests answered, by route, method and status: (count, seconds spent)
    request_stats: dict[tuple[str, str, int], tuple[int, float]]

    @property
    def session(self) -> aiohttp.ClientSession:
        """The HTTP client the admin asks nsqd, lookupd and Graphite with."""

    async def snapshot(self) -> list[Json]:
        """Every topic across the cluster now; also kept for ``/metrics``."""

    async def record_action(self, entry: AuditEntry, url: str, notify: bool) -> None:
        """Stores an operator action and, with ``notify``, sends its notification."""

    async def identity(self) -> str:
        """The identity the cluster's auth server names the admin's secret ("" without one)."""

    def set_lookupd_addresses(self, addresses: list[str]) -> None:
        """``PUT /config/nsqlookupd_http_addresses``: later requests use the new lookupds."""


ADMIN_KEY: web.AppKey[AdminState] = web.AppKey("nsqadmin")
USER_KEY = "nsqadmin.user"  # on a request, the user the built-in login proved


def admin_of(request: web.Request) -> AdminState:
    return request.app[ADMIN_KEY]


def user_of(request: web.Request) -> str:
    """The user the built-in login proved or, without one, the one ``--acl-http-header`` names."""
    admin = admin_of(request)
    if admin.login is not None:
        return str(request.get(USER_KEY, ""))
    return request.headers.get(admin.opts.acl_http_header, "")


def is_admin(request: web.Request) -> bool:
    admins = admin_of(request).opts.admin_users
    return not admins or user_of(request) in admins
