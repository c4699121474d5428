"""lookupd's HTTP API (aiohttp): NSQ's routes, parameters, error codes and JSON shapes.

Beyond NSQ, unless ``--http-allow-cross-site``: a state-changing request a browser sent for another site's page
(``shared.cross_site`` decides) is refused with 403 ``CROSS_SITE_REQUEST`` before its handler runs, and answers to
GET forbid framing.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from shared.cross_site import CROSS_SITE_CODE, FRAME_DENY_HEADERS
from shared.http_api import (
    Handler,
    HTTPError,
    cross_site_source_of,
    empty_response,
    json_response,
    nsq_errors,
    redirect_fixed_paths,
)
from shared.protocol.names import go_quote, is_valid_channel_name, is_valid_topic_name

from .registration_db import Registration, active

if TYPE_CHECKING:
    from .lookupd import NSQLookupd

log = logging.getLogger("nsqlookupd")

LOOKUPD_KEY: web.AppKey[NSQLookupd] = web.AppKey("nsqlookupd")
# whether the app serves clients outside the nsqd's network (--external-http-address)
EXTERNAL_KEY: web.AppKey[bool] = web.AppKey("external", bool)


@web.middleware
async def count_requests(request: web.Request, handler: Handler) -> web.StreamResponse:
    response = await handler(request)
    route = request.match_info.route.resource
    path = route.canonical if route is not None else "other"
    counts = _lookupd(request).request_counts
    counts[(path, response.status)] = counts.get((path, response.status), 0) + 1
    return response


@web.middleware
async def refuse_cross_site(request: web.Request, handler: Handler) -> web.StreamResponse:
    """NSQ's 403 for a state-changing request a browser sent for another site's page."""
    source = cross_site_source_of(request)
    if source is not None:
        log.warning("HTTP: refused %s %s from %s: a cross-site request (--http-allow-cross-site serves it)",
                    request.method, go_quote(request.path), go_quote(source))
        raise HTTPError(403, CROSS_SITE_CODE)
    return await handler(request)


async def deny_framing(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer to GET, errors and redirects included, forbids other sites to frame it."""
    if request.method == "GET":
        response.headers.extend(FRAME_DENY_HEADERS)


def build_app(lookupd: NSQLookupd, external: bool = False) -> web.Application:
    checked = [] if lookupd.opts.http_allow_cross_site else [refuse_cross_site]
    app = web.Application(middlewares=[count_requests, nsq_errors(log), *checked, redirect_fixed_paths])
    if checked:
        app.on_response_prepare.append(deny_framing)
    app[LOOKUPD_KEY] = lookupd
    app[EXTERNAL_KEY] = external
    for path, handler in (("/ping", ping), ("/info", info), ("/lookup", lookup), ("/topics", topics),
                          ("/channels", channels), ("/nodes", nodes), ("/debug", debug), ("/metrics", metrics)):
        app.router.add_get(path, handler, allow_head=False)
    for path, handler in (("/topic/create", topic_create), ("/topic/delete", topic_delete),
                          ("/topic/tombstone", topic_tombstone), ("/channel/create", channel_create),
                          ("/channel/delete", channel_delete)):
        app.router.add_post(path, handler)
    return app


def _lookupd(request: web.Request) -> NSQLookupd:
    return request.app[LOOKUPD_KEY]


def _arg(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if value is None:
        raise HTTPError(400, f"MISSING_ARG_{name.upper()}")
    return value


def _valid_topic(request: web.Request) -> str:
    topic = _arg(request, "topic")
    if not is_valid_topic_name(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    return topic


def _valid_topic_and_channel(request: web.Request) -> tuple[str, str]:
    topic = _valid_topic(request)
    channel = _arg(request, "channel")
    if not is_valid_channel_name(channel):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


async def ping(request: web.Request) -> web.Response:
    return web.Response(text="OK")


async def info(request: web.Request) -> web.Response:
    return json_response({"version": _lookupd(request).version})


async def lookup(request: web.Request) -> web.Response:
    lookupd = _lookupd(request)
    topic = _arg(request, "topic")
    db = lookupd.db
    if not db.find_registrations("topic", topic, ""):
        raise HTTPError(404, "TOPIC_NOT_FOUND")
    producers = active(db.find_producers("topic", topic, ""), time.time(), lookupd.opts.inactive_producer_timeout,
                       lookupd.opts.tombstone_lifetime)
    return json_response({"channels": sorted(r.subkey for r in db.find_registrations("channel", topic, "*")),
                          "producers": [producer.peer.json(request.app[EXTERNAL_KEY]) for producer in producers]})


async def topics(request: web.Request) -> web.Response:
    db = _lookupd(request).db
    return json_response({"topics": sorted(r.key for r in db.find_registrations("topic", "*", ""))})


async def channels(request: web.Request) -> web.Response:
    topic = _arg(request, "topic")
    db = _lookupd(request).db
    return json_response({"channels": sorted(r.subkey for r in db.find_registrations("channel", topic, "*"))})


async def nodes(request: web.Request) -> web.Response:
    lookupd = _lookupd(request)
    db, now = lookupd.db, time.time()
    # tombstoned nodes are listed, with their tombstones, as NSQ does
    producers = active(db.find_producers("client", "", ""), now, lookupd.opts.inactive_producer_timeout, 0)
    result: list[dict[str, Any]] = []
    for producer in producers:
        topic_names = sorted(r.key for r in db.lookup_registrations(producer.peer.id) if r.category == "topic")
        tombstones = [db.registrations[Registration("topic", name, "")][producer.peer.id]
                      .tombstoned(now, lookupd.opts.tombstone_lifetime) for name in topic_names]
        result.append({**producer.peer.json(request.app[EXTERNAL_KEY]), "tombstones": tombstones,
                       "topics": topic_names})
    return json_response({"producers": result})


async def debug(request: web.Request) -> web.Response:
    db = _lookupd(request).db
    data: dict[str, list[dict[str, Any]]] = {}
    for registration, producers in db.registrations.items():
        data[":".join(registration)] = [{
            "id": p.peer.id, "hostname": p.peer.hostname, "broadcast_address": p.peer.broadcast_address,
            "tcp_port": p.peer.tcp_port, "http_port": p.peer.http_port, "version": p.peer.version,
            "topology_zone": p.peer.topology_zone, "topology_region": p.peer.topology_region,
            "last_update": int(p.peer.last_update * 1e9), "tombstoned": p.tombstoned_at is not None,
            "tombstoned_at": int(p.tombstoned_at * 1e9) if p.tombstoned_at is not None else 0,
        } for p in producers.values()]
    return json_response(data)


async def metrics(request: web.Request) -> web.Response:
    body, content_type = _lookupd(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


async def topic_create(request: web.Request) -> web.Response:
    topic = _valid_topic(request)
    log.info("DB: adding topic(%s)", topic)
    _lookupd(request).db.add_registration(Registration("topic", topic, ""))
    return empty_response()


async def topic_delete(request: web.Request) -> web.Response:
    topic = _arg(request, "topic")
    db = _lookupd(request).db
    for registration in db.find_registrations("channel", topic, "*"):
        log.info("DB: removing channel(%s) from topic(%s)", registration.subkey, topic)
        db.remove_registration(registration)
    for registration in db.find_registrations("topic", topic, ""):
        log.info("DB: removing topic(%s)", topic)
        db.remove_registration(registration)
    return empty_response()


async def topic_tombstone(request: web.Request) -> web.Response:
    topic = _arg(request, "topic")
    node = _arg(request, "node")
    log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
    _lookupd(request).db.tombstone(Registration("topic", topic, ""), node, time.time())
    return empty_response()


async def channel_create(request: web.Request) -> web.Response:
    topic, channel = _valid_topic_and_channel(request)
    db = _lookupd(request).db
    log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
    db.add_registration(Registration("channel", topic, channel))
    db.add_registration(Registration("topic", topic, ""))
    return empty_response()


async def channel_delete(request: web.Request) -> web.Response:
    topic, channel = _valid_topic_and_channel(request)
    db = _lookupd(request).db
    registrations = db.find_registrations("channel", topic, channel)
    if not registrations:
        raise HTTPError(404, "CHANNEL_NOT_FOUND")
    for registration in registrations:
        log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
        db.remove_registration(registration)
    return empty_response()
