"""lookupd's HTTP API: NSQ's routes, parameters, error codes and JSON shapes, served by ``shared.http_server``.

Beyond NSQ, unless ``--http-allow-cross-site``: a state-changing request a browser sent for another site's page
(``shared.cross_site`` decides) is refused with 403 ``CROSS_SITE_REQUEST`` before its handler runs, and answers to
GET forbid framing; the server does both.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from nsqclient.protocol.names import is_valid_channel_name, is_valid_topic_name
from shared.http_auth import ACCEPTED, ADMIN_CHANNEL, ADMIN_TOPIC, OPEN, identity_answer
from shared.http_conventions import COMPACT_JSON, HTTPError
from shared.http_router import NSQ_V1, Request, Response, Router, json_document, json_response

from .registration_db import Registration, active

if TYPE_CHECKING:
    from .lookupd import NSQLookupd

log = logging.getLogger("nsqlookupd")

_OK = Response(b"OK")
# NSQ's actions answer 200 without a body: Go sets no Content-Type on an empty body
_EMPTY = Response(headers=NSQ_V1)


def build_router(lookupd: NSQLookupd, external: bool = False) -> Router:
    """The routes of one listener; ``external``: it serves clients outside the nsqds' network
    (``--external-http-address``), who are given the nsqds' external addresses."""
    api, router = _API(lookupd, external), Router()
    for path, handler in (("/ping", api.ping), ("/info", api.info), ("/lookup", api.lookup)):
        router.add("GET", path, handler, OPEN)  # health checks, and what every NSQ client asks
    for path, handler in (("/topics", api.topics), ("/channels", api.channels), ("/nodes", api.nodes),
                          ("/debug", api.debug), ("/metrics", api.metrics), ("/auth", identity_answer)):
        router.add("GET", path, handler, ACCEPTED)
    for path, handler, need in (("/topic/create", api.topic_create, ADMIN_TOPIC),
                                ("/topic/delete", api.topic_delete, ADMIN_TOPIC),
                                ("/topic/tombstone", api.topic_tombstone, ADMIN_TOPIC),
                                ("/channel/create", api.channel_create, ADMIN_CHANNEL),
                                ("/channel/delete", api.channel_delete, ADMIN_CHANNEL)):
        router.add("POST", path, handler, need)
    return router


def count_request(lookupd: NSQLookupd, request: Request, response: Response) -> None:
    """Counts an answer by route and status for /metrics; what no route answered (404, 405, redirects) is
    ``other``."""
    path = request.route.path if request.route is not None else "other"
    counts = lookupd.request_counts
    counts[(path, response.status)] = counts.get((path, response.status), 0) + 1


def _arg(request: Request, name: str) -> str:
    value = request.query.get(name)
    if value is None:
        raise HTTPError(400, f"MISSING_ARG_{name.upper()}")
    return value


def _valid_topic(request: Request) -> str:
    topic = _arg(request, "topic")
    if not is_valid_topic_name(topic):
        raise HTTPError(400, "INVALID_ARG_TOPIC")
    return topic


def _valid_topic_and_channel(request: Request) -> tuple[str, str]:
    topic = _valid_topic(request)
    channel = _arg(request, "channel")
    if not is_valid_channel_name(channel):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic, channel


class _API:
    def __init__(self, lookupd: NSQLookupd, external: bool) -> None:
        self._lookupd = lookupd
        self._external = external

    def ping(self, request: Request) -> Response:
        return _OK

    def info(self, request: Request) -> Response:
        return json_document({"version": self._lookupd.version})

    def lookup(self, request: Request) -> Response:
        lookupd = self._lookupd
        topic = _arg(request, "topic")
        db = lookupd.db
        if not db.find_registrations("topic", topic, ""):
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        producers = active(db.find_producers("topic", topic, ""), time.time(),
                           lookupd.opts.inactive_producer_timeout, lookupd.opts.tombstone_lifetime)
        channels = COMPACT_JSON.encode(sorted(r.subkey for r in db.find_registrations("channel", topic, "*")))
        # each producer's JSON is made once, when first asked for
        encoded = ",".join(producer.peer.encoded(self._external) for producer in producers)
        return json_response(f'{{"channels":{channels},"producers":[{encoded}]}}')

    def topics(self, request: Request) -> Response:
        db = self._lookupd.db
        return json_document({"topics": sorted(r.key for r in db.find_registrations("topic", "*", ""))})

    def channels(self, request: Request) -> Response:
        topic = _arg(request, "topic")
        db = self._lookupd.db
        return json_document({"channels": sorted(r.subkey for r in db.find_registrations("channel", topic, "*"))})

    def nodes(self, request: Request) -> Response:
        lookupd = self._lookupd
        db, now = lookupd.db, time.time()
        # tombstoned nodes are listed, with their tombstones, as NSQ does
        producers = active(db.find_producers("client", "", ""), now, lookupd.opts.inactive_producer_timeout, 0)
        result: list[dict[str, Any]] = []
        for producer in producers:
            topic_names = sorted(r.key for r in db.lookup_registrations(producer.peer.id) if r.category == "topic")
            tombstones = [db.registrations[Registration("topic", name, "")][producer.peer.id]
                          .tombstoned(now, lookupd.opts.tombstone_lifetime) for name in topic_names]
            result.append({**producer.peer.json(self._external), "tombstones": tombstones, "topics": topic_names})
        return json_document({"producers": result})

    def debug(self, request: Request) -> Response:
        db = self._lookupd.db
        data: dict[str, list[dict[str, Any]]] = {}
        for registration, producers in db.registrations.items():
            data[":".join(registration)] = [{
                "id": p.peer.id, "hostname": p.peer.hostname, "broadcast_address": p.peer.broadcast_address,
                "tcp_port": p.peer.tcp_port, "http_port": p.peer.http_port, "version": p.peer.version,
                "topology_zone": p.peer.topology_zone, "topology_region": p.peer.topology_region,
                "last_update": int(p.peer.last_update * 1e9), "tombstoned": p.tombstoned_at is not None,
                "tombstoned_at": int(p.tombstoned_at * 1e9) if p.tombstoned_at is not None else 0,
            } for p in producers.values()]
        return json_document(data)

    def metrics(self, request: Request) -> Response:
        body, content_type = self._lookupd.metrics.render()
        return Response(body, headers=(("Content-Type", content_type),))

    def topic_create(self, request: Request) -> Response:
        topic = _valid_topic(request)
        log.info("DB: adding topic(%s)", topic)
        self._lookupd.db.add_registration(Registration("topic", topic, ""))
        return _EMPTY

    def topic_delete(self, request: Request) -> Response:
        topic = _arg(request, "topic")
        db = self._lookupd.db
        for registration in db.find_registrations("channel", topic, "*"):
            log.info("DB: removing channel(%s) from topic(%s)", registration.subkey, topic)
            db.remove_registration(registration)
        for registration in db.find_registrations("topic", topic, ""):
            log.info("DB: removing topic(%s)", topic)
            db.remove_registration(registration)
        return _EMPTY

    def topic_tombstone(self, request: Request) -> Response:
        topic = _arg(request, "topic")
        node = _arg(request, "node")
        log.info("DB: setting tombstone for producer@%s of topic(%s)", node, topic)
        self._lookupd.db.tombstone(Registration("topic", topic, ""), node, time.time())
        return _EMPTY

    def channel_create(self, request: Request) -> Response:
        topic, channel = _valid_topic_and_channel(request)
        db = self._lookupd.db
        log.info("DB: adding channel(%s) in topic(%s)", channel, topic)
        db.add_registration(Registration("channel", topic, channel))
        db.add_registration(Registration("topic", topic, ""))
        return _EMPTY

    def channel_delete(self, request: Request) -> Response:
        topic, channel = _valid_topic_and_channel(request)
        db = self._lookupd.db
        registrations = db.find_registrations("channel", topic, channel)
        if not registrations:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        for registration in registrations:
            log.info("DB: removing channel(%s) from topic(%s)", channel, topic)
            db.remove_registration(registration)
        return _EMPTY
