"""The admin's pages: each route reads the cluster the way its ``/api`` twin does and hands the same JSON to a
template. A request with ``X-Live-Fragment: 1`` (the pages' refresh script) gets only the live part of the page.

Graphs come from Graphite with ``--graphite-url`` (topics' rates and sparklines, a topic's, a channel's and a
node's graphs, the counter's), else from the admin's history (``charts``).

A read where every host failed renders the error page with 502; partial failures show as the warning banner.
"""

from __future__ import annotations

import asyncio
import functools
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

from aiohttp import web
from markupsafe import Markup

from shared.http_api import Handler

from . import overview
from .aggregation import Json
from .app_state import AdminState, admin_of, is_admin, user_of
from .charts import line_chart_svg
from .graphite import GRAPH_WINDOWS, Graph, Graphite, GraphiteError
from .history import rates
from .security import session_token, set_session_cookie
from .upstream import UpstreamError, Warnings

STATIC_DIR = Path(__file__).resolve().parent / "static"
PageHandler = Callable[[web.Request], Awaitable[web.Response]]
CHART_WINDOWS = {"1h": 3600, "24h": 24 * 3600}
PEEK_COUNT = 10  # queued messages a topic or channel page shows per node


def routes() -> list[tuple[str, Handler]]:
    return [("/", topics_page), ("/topics", topics_page), ("/topics/{topic}", topic_page),
            ("/topics/{topic}/{channel}", channel_page), ("/nodes", nodes_page), ("/nodes/{node}", node_page),
            ("/counter", counter_page), ("/lookup", lookup_page), ("/replication", replication_page),
            ("/audit", audit_page)]


def _render(request: web.Request, template: str, active: str, title: str, warnings: Warnings,
            status: int = 200, **context: Any) -> web.Response:
    admin = admin_of(request)
    token, new_session = session_token(request)
    text = admin.pages.render(template, active=active, title=title, is_admin=is_admin(request),
                              user=user_of(request), message=warnings.message(),
                              lookupd_addresses=admin.cluster.lookupd_addresses, session_token=token,
                              fragment=request.headers.get("X-Live-Fragment") == "1", **context)
    response = web.Response(text=text, content_type="text/html", charset="utf-8", status=status)
    if new_session:
        set_session_cookie(request, response, token)
    return response


def _page(active: str) -> Callable[[PageHandler], PageHandler]:
    """A page whose cluster read failed on every host shows the error page (502) under its nav entry."""
    def decorate(handler: PageHandler) -> PageHandler:
        @functools.wraps(handler)
        async def page(request: web.Request) -> web.Response:
            try:
                return await handler(request)
            except UpstreamError as error:
                return _render(request, "error.html", active, "Error", Warnings(), status=502,
                               error=f"UPSTREAM_ERROR: {error}")
        return page
    return decorate


@_page("topics")
async def topics_page(request: web.Request) -> web.Response:
    admin, warnings = admin_of(request), Warnings()
    names, snapshot = await asyncio.gather(admin.cluster.topic_names(warnings), _counts(admin, warnings))
    if admin.graphite is None:
        latest, sparklines = await _latest_rates(admin, names), {}
    else:
        window = _window(request, admin.graphite)
        latest = await _graphite_rates(admin, admin.graphite, names, warnings)
        sparklines = {name: admin.graphite.topic_sparklines(name, window) for name in names}
    rows = overview.topic_rows(names, snapshot, latest)
    order = overview.sort_order(dict(request.query))
    return _render(request, "topics.html", "topics", "Topics", warnings,
                   topics=overview.sort_rows(rows, *order), order=order, next_order=overview.next_order,
                   graphite=admin.graphite is not None, sparklines=sparklines)


@_page("topics")
async def topic_page(request: web.Request) -> web.Response:
    admin, warnings, topic_name = admin_of(request), Warnings(), request.match_info["topic"]
    topic = await admin.cluster.topic(topic_name, warnings)
    window = _window(request, admin.graphite)
    (queued, peek_failed), (charts, graphs) = await asyncio.gather(
        _peek(admin, topic), _figures(admin, topic, topic_name, "", window))
    return _render(request, "topic.html", "topics", topic_name, warnings, topic=topic, charts=charts,
                   graphs=graphs, chart_window=window, queued=queued, peek_failed=peek_failed)


@_page("topics")
async def channel_page(request: web.Request) -> web.Response:
    admin, warnings, match = admin_of(request), Warnings(), request.match_info
    channel = await admin.cluster.channel(match["topic"], match["channel"], warnings)
    window = _window(request, admin.graphite)
    (queued, peek_failed), (dead, dead_peek_failed), (charts, graphs) = await asyncio.gather(
        _peek(admin, channel), _peek(admin, channel, dead_letters=True),
        _figures(admin, channel, match["topic"], match["channel"], window))
    return _render(request, "channel.html", "topics", f"{match['topic']}/{match['channel']}", warnings,
                   channel=channel, charts=charts, graphs=graphs, chart_window=window, queued=queued,
                   peek_failed=peek_failed, dead_letters=dead, dead_peek_failed=dead_peek_failed)


@_page("nodes")
async def nodes_page(request: web.Request) -> web.Response:
    admin, warnings = admin_of(request), Warnings()
    nodes = await admin.cluster.nodes(warnings)
    return _render(request, "nodes.html", "nodes", "Nodes", warnings, nodes=nodes,
                   lookupd_count=len(admin.cluster.lookupd_addresses))


@_page("nodes")
async def node_page(request: web.Request) -> web.Response:
    admin, warnings, address = admin_of(request), Warnings(), request.match_info["node"]
    node = await admin.cluster.node(address, warnings)
    if node is None:
        return _render(request, "error.html", "nodes", "Error", warnings, status=404,
                       error=f"NODE_NOT_FOUND: no nsqd at {address}")
    window = _window(request, admin.graphite)
    graphs = admin.graphite.node_graphs(address, window) if admin.graphite is not None else []
    return _render(request, "node.html", "nodes", address, warnings, node=node, graphs=graphs, chart_window=window)


@_page("counter")
async def counter_page(request: web.Request) -> web.Response:
    admin, warnings = admin_of(request), Warnings()
    stats = await admin.cluster.counter(warnings)
    window = _window(request, admin.graphite)
    graphs = []
    if admin.graphite is not None:
        graphs = [admin.graphite.graph("Messages processed (msg/s)", [admin.graphite.counter_target()],
                                       "message_count", window)]
    return _render(request, "counter.html", "counter", "Counter", warnings,
                   total=sum(entry["message_count"] for entry in stats.values()), graphs=graphs,
                   chart_window=window)


@_page("lookup")
async def lookup_page(request: web.Request) -> web.Response:
    admin, warnings = admin_of(request), Warnings()
    inactive = await admin.cluster.inactive_topics(warnings)
    return _render(request, "lookup.html", "lookup", "Lookup", warnings, inactive=inactive)


@_page("replication")
async def replication_page(request: web.Request) -> web.Response:
    admin, warnings = admin_of(request), Warnings()
    view = await admin.cluster.replication(warnings)
    return _render(request, "replication.html", "replication", "Replication", warnings, **view)


async def audit_page(request: web.Request) -> web.Response:
    entries = await admin_of(request).audit.recent()
    return _render(request, "audit.html", "audit", "Audit log", Warnings(), entries=entries)


def _window(request: web.Request, graphite: Graphite | None) -> str:
    """The graphs' time frame: ``?window=``, one of Graphite's (2h unless asked, as nsqadmin) or the history's."""
    windows, default = (GRAPH_WINDOWS, "2h") if graphite is not None else (tuple(CHART_WINDOWS), "1h")
    window = request.query.get("window", default)
    return window if window in windows else default


def _quantiles(queue: Json) -> list[float]:
    """The e2e latency quantiles nsqd computes for a topic or channel (none without --e2e-processing-latency-*)."""
    return [item["quantile"] for item in queue["e2e_processing_latency"].get("percentiles") or []]


async def _figures(admin: AdminState, queue: Json, topic: str, channel: str,
                   window: str) -> tuple[list[Markup], list[Graph]]:
    """A topic's or channel's page's history charts, or, with Graphite, its graphs instead."""
    if admin.graphite is None:
        return await _charts(admin, topic, channel, CHART_WINDOWS[window]), []
    if channel:
        return [], admin.graphite.channel_graphs(topic, channel, window, _quantiles(queue))
    return [], admin.graphite.topic_graphs(topic, window, _quantiles(queue))


async def _charts(admin: AdminState, topic: str, channel: str, seconds: int) -> list[Markup]:
    samples = await admin.history.series(topic, channel, time.time() - seconds)
    depth = [(sample.ts, float(sample.depth)) for sample in samples]
    charts = [line_chart_svg("Rate", rates(samples), unit="msg/s"), line_chart_svg("Depth", depth, unit="messages")]
    if channel:
        charts.append(line_chart_svg("In-Flight", [(sample.ts, float(sample.in_flight)) for sample in samples],
                                     unit="messages"))
    else:  # a topic hands its messages on at once: where a backlog grows is in its channels
        backlog = await admin.history.deepest_channel(topic, time.time() - seconds)
        charts.append(line_chart_svg("Slowest channel's depth", backlog, unit="messages"))
    return charts


async def _peek(admin: AdminState, queue: Json, dead_letters: bool = False) -> tuple[list[Json], str]:
    """The messages queued in a topic or channel (or its dead letters) on each of its nodes, and what failed to
    answer: said beside them rather than in the page's warning, since an nsqd without peeking (NSQ's own) is no
    fault of the cluster."""
    failures = Warnings()
    try:
        return await admin.cluster.peek(queue, PEEK_COUNT, failures, dead_letters), "; ".join(failures)
    except UpstreamError as error:
        return [], str(error)


async def _counts(admin: AdminState, warnings: Warnings) -> list[Json]:
    """Every topic's counts; none (and a warning) when no nsqd answered, so that the names still show."""
    try:
        return await admin.cluster.topics_snapshot(warnings)
    except UpstreamError as error:
        warnings.append(str(error))
        return []


async def _graphite_rates(admin: AdminState, graphite: Graphite, topics: list[str],
                          warnings: Warnings) -> dict[str, float]:
    """Each topic's rate over Graphite's last full interval (none while Graphite has no point for it)."""
    try:
        answers = await graphite.rates(admin.session, [graphite.topic_target(topic, "message_count")
                                                       for topic in topics])
    except GraphiteError as error:
        warnings.append(f"Graphite: {error}")
        return {}
    return {topic: float(answer) for topic, answer in zip(topics, answers) if answer != "N/A"}


async def _latest_rates(admin: AdminState, topics: list[str]) -> dict[str, float]:
    """Each topic's rate over its last two samples (none until two were taken)."""
    since = time.time() - 3 * max(admin.opts.history_interval, 1.0)
    latest = {}
    for topic in topics:
        points = rates(await admin.history.series(topic, "", since))
        if points:
            latest[topic] = points[-1][1]
    return latest
