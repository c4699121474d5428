"""The admin's HTTP app: nsqadmin's JSON API under ``/api`` (same routes, bodies, error codes and shapes),
``/ping``, ``/config/:opt``, ``/metrics``, and the pages (``web_ui``). Every route sits under ``--base-path``.

Beyond nsqadmin, ``GET /api/peek/:topic[/:channel]`` gathers the messages queued on each node (nsqd's peek;
``?queue=dead``: a channel's dead letters), and a channel's ``replay_dead_letters`` and ``empty_dead_letters`` actions
reach every nsqd with the channel (a replay answers how many messages went back, ``replayed``).

Reads answer 502 ``UPSTREAM_ERROR: ...`` when every host failed and 200 with ``"message": "WARNING: ..."`` when some
did. Actions (``actions``) need an admin (``--admin-user`` via the login or ``--acl-http-header``; everyone when no
admin is configured) and are written to the audit log, with nsqadmin's notification, whatever their outcome. Before
any of that, ``security`` refuses what a browser sent for another site, without the page's token or not as JSON: an
action refused, there or for want of an admin, is audited as ``refused: ...`` and not notified.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from typing import Any

import aiohttp
from aiohttp import web

from shared.http_api import Handler, HTTPError, json_response, nsq_errors, redirect_fixed_paths
from shared.runtime_config import address_list, option_value, set_log_level

from . import security, web_ui
from .actions import ACTION_ROUTES, PLANNERS_KEY, audit_refusal, run_action
from .app_state import ADMIN_KEY, AdminState, admin_of
from .graphite import GraphiteError
from .options import redact_url
from .upstream import UpstreamError, Warnings

log = logging.getLogger("nsqadmin")

_CONFIG_BODY_LIMIT = 1024 * 1024
# what the Graphite proxy passes on: the parameters the pages' graphs use, the formats they take
RENDER_PARAMETERS = frozenset({"target", "from", "until", "format", "width", "height", "title", "colorList",
                               "hideGrid", "hideLegend", "hideAxes", "bgcolor", "fgcolor", "margin", "yMin",
                               "lineMode", "drawNullAsZero"})
RENDER_FORMATS = {"png": "image/png", "json": "application/json"}
RENDER_BODY_LIMIT = 16 * 1024 * 1024
PEEK_DEFAULT, PEEK_MAX = 10, 100  # as nsqd's peek: messages per node


def build_app(admin: AdminState) -> web.Application:
    app = web.Application(middlewares=[measure_requests, compress, nsq_errors(log),
                                       security.guard(audit_refusal), upstream_errors, redirect_fixed_paths])
    app[ADMIN_KEY] = admin
    app[PLANNERS_KEY] = {}
    prefix = admin.opts.base_path.rstrip("/")
    gets: list[tuple[str, Handler]] = [
        ("/ping", ping), ("/metrics", metrics), ("/config/{opt}", get_config),
        ("/api/topics", api_topics), ("/api/topics/{topic}", api_topic),
        ("/api/topics/{topic}/{channel}", api_channel), ("/api/nodes", api_nodes), ("/api/nodes/{node}", api_node),
        ("/api/counter", api_counter), ("/api/audit", api_audit), ("/api/replication", api_replication),
        ("/api/history/{topic}", api_history), ("/api/history/{topic}/{channel}", api_history),
        ("/api/peek/{topic}", api_peek), ("/api/peek/{topic}/{channel}", api_peek),
        ("/api/graphite", api_graphite)]
    if admin.opts.proxy_graphite:
        gets.append(("/render", graphite_render))
    for path, handler in gets + web_ui.routes():
        app.router.add_get(prefix + path, handler, allow_head=False)
    if prefix:
        app.router.add_get(prefix, web_ui.topics_page, allow_head=False)
    app.router.add_put(prefix + "/config/{opt}", put_config)
    for method, path, planner in ACTION_ROUTES:
        app[PLANNERS_KEY][app.router.add_route(method, prefix + path, run_action)] = planner
    app.router.add_static(prefix + "/static", web_ui.STATIC_DIR)
    image_origin = admin.graphite.image_origin if admin.graphite is not None else ""
    app.on_response_prepare.append(security.adding_security_headers(security.security_headers(image_origin)))
    return app


# --- middlewares -------------------------------------------------------------------------------------------------

@web.middleware
async def measure_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as error:
        status = error.status
        raise
    finally:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "other"
        stats = admin_of(request).request_stats
        count, seconds = stats.get((route, request.method, status), (0, 0.0))
        stats[(route, request.method, status)] = (count + 1, seconds + time.perf_counter() - started)


@web.middleware
async def compress(request: web.Request, handler: Handler) -> web.StreamResponse:
    """As nsqadmin: gzip or deflate whenever the client accepts it."""
    response = await handler(request)
    if isinstance(response, web.Response) and not isinstance(response, web.FileResponse):
        response.enable_compression()
    return response


@web.middleware
async def upstream_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except UpstreamError as error:
        raise HTTPError(502, f"UPSTREAM_ERROR: {error}") from None


# --- reads -------------------------------------------------------------------------------------------------------

def with_message(document: dict[str, Any], warnings: Warnings) -> web.Response:
    return json_response({**document, "message": warnings.message()})


async def ping(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def api_topics(request: web.Request) -> web.Response:
    cluster, warnings = admin_of(request).cluster, Warnings()
    if request.query.get("inactive") == "true":
        return with_message({"topics": await cluster.inactive_topics(warnings)}, warnings)
    return with_message({"topics": await cluster.topic_names(warnings)}, warnings)


async def api_topic(request: web.Request) -> web.Response:
    warnings = Warnings()
    return with_message(await admin_of(request).cluster.topic(request.match_info["topic"], warnings), warnings)


async def api_channel(request: web.Request) -> web.Response:
    warnings, match = Warnings(), request.match_info
    return with_message(await admin_of(request).cluster.channel(match["topic"], match["channel"], warnings),
                        warnings)


async def api_nodes(request: web.Request) -> web.Response:
    warnings = Warnings()
    return with_message({"nodes": await admin_of(request).cluster.nodes(warnings)}, warnings)


async def api_replication(request: web.Request) -> web.Response:
    """Beyond NSQ: what every replicated nsqd says of its mirrors and copies (aggregation.replication_view)."""
    warnings = Warnings()
    return with_message(await admin_of(request).cluster.replication(warnings), warnings)


async def api_node(request: web.Request) -> web.Response:
    warnings = Warnings()
    node = await admin_of(request).cluster.node(request.match_info["node"], warnings)
    if node is None:
        raise HTTPError(404, "NODE_NOT_FOUND")
    return with_message(node, warnings)


async def api_counter(request: web.Request) -> web.Response:
    warnings = Warnings()
    return with_message({"stats": await admin_of(request).cluster.counter(warnings)}, warnings)


async def api_audit(request: web.Request) -> web.Response:
    """The audit log, newest first (``?limit=``, ``?offset=``)."""
    limit, offset = _int_arg(request, "limit", 200), _int_arg(request, "offset", 0)
    entries = await admin_of(request).audit.recent(limit, offset)
    return json_response({"entries": [vars(entry) for entry in entries], "message": ""})


async def api_history(request: web.Request) -> web.Response:
    """The samples behind a topic's or channel's charts: ``?window=`` seconds back (default an hour)."""
    admin, match = admin_of(request), request.match_info
    window = _int_arg(request, "window", 3600)
    samples = await admin.history.series(match["topic"], match.get("channel", ""), time.time() - window)
    return json_response({"samples": [vars(sample) for sample in samples], "message": ""})


async def api_peek(request: web.Request) -> web.Response:
    """The messages queued in a channel (or in the topic's own queue) on every nsqd that has it, each with its
    ``node``: ``?n=`` per node (10, at most 100); ``?queue=dead``, a channel's dead letters."""
    count = min(_int_arg(request, "n", PEEK_DEFAULT), PEEK_MAX)
    if count == 0:
        raise HTTPError(400, "INVALID_ARG_N")
    cluster, warnings, match = admin_of(request).cluster, Warnings(), request.match_info
    dead_letters = request.query.get("queue") == "dead"
    if request.query.get("queue") not in (None, "dead") or (dead_letters and "channel" not in match):
        raise HTTPError(400, "INVALID_QUEUE")  # only a channel has dead letters
    if "channel" in match:
        queue = await cluster.channel(match["topic"], match["channel"], warnings)
    else:
        queue = await cluster.topic(match["topic"], warnings)
    return with_message({"messages": await cluster.peek(queue, count, warnings, dead_letters)}, warnings)


async def api_graphite(request: web.Request) -> web.Response:
    """nsqadmin's ``?metric=rate&target=<a Graphite target>``: the counter's last interval per second,
    ``{"rate": "12.34"}`` (``N/A`` while Graphite has no point)."""
    graphite = admin_of(request).graphite
    if request.query.get("metric") != "rate":
        raise HTTPError(400, "INVALID_ARG_METRIC")
    target = request.query.get("target")
    if not target:
        raise HTTPError(400, "INVALID_ARG_TARGET")
    if graphite is None:
        raise HTTPError(400, "GRAPHITE_NOT_CONFIGURED: the admin has no --graphite-url")
    try:
        rate = await graphite.rate(admin_of(request).session, target)
    except GraphiteError as error:
        raise HTTPError(502, f"UPSTREAM_ERROR: {error}") from None
    return json_response({"rate": rate})


async def graphite_render(request: web.Request) -> web.Response:
    """``--proxy-graphite``: Graphite's render API through the admin, with the credentials ``--graphite-url``
    gives. Only what the pages ask passes (``RENDER_PARAMETERS``), and only PNG images and JSON data come back:
    nothing the admin's origin would serve as script or markup (Graphite's ``jsonp``, SVG)."""
    admin = admin_of(request)
    graphite = admin.graphite
    assert graphite is not None  # the route exists only with a Graphite URL
    if request.query.get("format", "png") not in RENDER_FORMATS:
        raise HTTPError(400, "INVALID_ARG_FORMAT")
    query = [(key, value) for key, value in request.query.items() if key in RENDER_PARAMETERS]
    try:
        async with admin.session.get(f"{graphite.url}/render", params=query, headers=graphite.headers) as upstream:
            content_type = upstream.content_type
            body = await upstream.content.read(RENDER_BODY_LIMIT + 1)
    except (aiohttp.ClientError, TimeoutError) as error:
        raise HTTPError(502, f"UPSTREAM_ERROR: {graphite.url}/render: {error or type(error).__name__}") from None
    if upstream.status != 200 or content_type not in RENDER_FORMATS.values() or len(body) > RENDER_BODY_LIMIT:
        raise HTTPError(502, f"UPSTREAM_ERROR: {graphite.url}/render answered {upstream.status} {content_type}, "
                             f"{len(body)} bytes")
    return web.Response(body=body, content_type=content_type)


def _int_arg(request: web.Request, name: str, default: int) -> int:
    try:
        value = int(request.query.get(name, default))
    except ValueError:
        raise HTTPError(400, f"INVALID_ARG_{name.upper()}") from None
    if value < 0:
        raise HTTPError(400, f"INVALID_ARG_{name.upper()}")
    return value


async def metrics(request: web.Request) -> web.Response:
    admin = admin_of(request)
    await admin.snapshot()
    body, content_type = admin.metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


# --- /config/:opt --------------------------------------------------------------------------------------------------

def _check_config_access(request: web.Request) -> None:
    cidr = admin_of(request).opts.allow_config_from_cidr
    if not cidr:
        return
    try:
        address = ipaddress.ip_address(request.remote or "")
    except ValueError:
        raise HTTPError(400, "INVALID_REMOTE_ADDR") from None
    if address not in ipaddress.ip_network(cidr, strict=False):
        raise HTTPError(403, "FORBIDDEN")


async def get_config(request: web.Request) -> web.Response:
    _check_config_access(request)
    value = option_value(admin_of(request).opts, request.match_info["opt"], unknown_status=404)
    if request.match_info["opt"] == "graphite_url":
        value = redact_url(value)  # the password goes to Graphite alone
    return json_response(value)


async def put_config(request: web.Request) -> web.Response:
    _check_config_access(request)
    admin, name = admin_of(request), request.match_info["opt"]
    body = await request.content.read(_CONFIG_BODY_LIMIT + 1)
    if not body or len(body) > _CONFIG_BODY_LIMIT:
        raise HTTPError(413, "INVALID_VALUE")
    if name == "nsqlookupd_http_addresses":
        admin.set_lookupd_addresses(address_list(body))
    elif name == "log_level":
        set_log_level(admin.opts, "nsqadmin", body)
    else:
        raise HTTPError(400, "INVALID_OPTION")
    return json_response(option_value(admin.opts, name))
