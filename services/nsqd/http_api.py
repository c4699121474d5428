"""nsqd's HTTP API (aiohttp): NSQ's routes, query parameters, status codes, error codes and JSON shapes.

All parameters come from the query string, even on POST; only /pub, /mpub and PUT /config read the body.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from shared.http_api import (
    NSQ_CONTENT_TYPE,
    Handler,
    HTTPError,
    empty_response,
    json_response,
    nsq_errors,
    parse_bool,
    redirect_fixed_paths,
    text_response,
)
from shared.names import is_valid_channel_name, is_valid_topic_name
from shared.protocol.commands import split_mpub
from shared.protocol.errors import FatalClientError
from shared.runtime_config import address_list, option_value, set_log_level
from shared.version import VERSION

from . import stats
from .topic import Topic, TopicError

if TYPE_CHECKING:
    from .nsqd import NSQD

log = logging.getLogger("nsqd")

NSQD_KEY: web.AppKey[NSQD] = web.AppKey("nsqd")


def build_app(nsqd: NSQD, https: bool = False) -> web.Application:
    middlewares = [nsq_errors(log), redirect_fixed_paths]
    if not https and nsqd.opts.tls_required == "true":
        middlewares.insert(0, _https_only)
    app = web.Application(middlewares=middlewares,
                          client_max_size=max(nsqd.opts.max_body_size, nsqd.opts.max_msg_size) + 1)
    app[NSQD_KEY] = nsqd
    for path, handler in (("/ping", ping), ("/info", info), ("/stats", get_stats), ("/metrics", metrics),
                          ("/config/{opt}", config)):
        app.router.add_get(path, handler, allow_head=False)
    app.router.add_post("/pub", pub)
    app.router.add_post("/mpub", mpub)
    for action in ("create", "delete", "empty", "pause", "unpause"):
        app.router.add_post(f"/topic/{action}", topic_action)
        app.router.add_post(f"/channel/{action}", channel_action)
    app.router.add_put("/config/{opt}", config)
    return app


@web.middleware
async def _https_only(request: web.Request, handler: Handler) -> web.StreamResponse:
    """With ``--tls-required=true`` plain HTTP only says where HTTPS is, as NSQ does."""
    body = json.dumps({"https_port": _nsqd(request).https_address[1]})
    return web.Response(status=403, text=body, headers=NSQ_CONTENT_TYPE)


def _nsqd(request: web.Request) -> NSQD:
    return request.app[NSQD_KEY]


async def ping(request: web.Request) -> web.Response:
    nsqd = _nsqd(request)
    if nsqd.health != "OK":
        return web.Response(status=500, text=f"NOK - {nsqd.health}")
    return web.Response(text="OK")


async def info(request: web.Request) -> web.Response:
    nsqd, opts = _nsqd(request), _nsqd(request).opts
    return json_response({
        "version": VERSION, "broadcast_address": opts.broadcast_address, "hostname": nsqd.hostname,
        "http_port": nsqd.http_address[1], "tcp_port": nsqd.tcp_address[1], "start_time": nsqd.start_time,
        "max_heartbeat_interval": int(opts.max_heartbeat_interval * 1e9),
        "max_output_buffer_size": opts.max_output_buffer_size,
        "max_output_buffer_timeout": int(opts.max_output_buffer_timeout * 1e9),
        "max_deflate_level": opts.max_deflate_level,
        "topology_zone": opts.topology_zone, "topology_region": opts.topology_region,
    })


async def get_stats(request: web.Request) -> web.Response:
    query = request.query
    include_clients = parse_bool(query.get("include_clients"))
    include_mem = parse_bool(query.get("include_mem"))
    document = stats.collect(_nsqd(request), query.get("topic") or None, query.get("channel") or None,
                             include_clients is not False, include_mem is not False)
    if query.get("format") == "json":
        return json_response(document)
    return text_response(stats.render_text(_nsqd(request), document))


async def metrics(request: web.Request) -> web.Response:
    body, content_type = _nsqd(request).metrics.render()
    return web.Response(body=body, headers={"Content-Type": content_type})


def _topic_name(request: web.Request, invalid_code: str = "INVALID_TOPIC") -> str:
    name = request.query.get("topic")
    if name is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if not is_valid_topic_name(name):
        raise HTTPError(400, invalid_code)
    return name


async def _read_limited(request: web.Request, limit: int, code: str) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise HTTPError(413, code)
    body = await _read_at_most(request, limit + 1)
    if len(body) > limit:
        raise HTTPError(413, code)
    return body


async def _read_at_most(request: web.Request, size: int) -> bytes:
    """The body up to ``size`` bytes (``content.read(n)`` stops at whatever has arrived, so it loops)."""
    body = bytearray()
    while len(body) < size:
        chunk = await request.content.read(size - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)


def _publish(topic: Topic, bodies: list[bytes], defer_ms: int = 0) -> web.Response:
    try:
        topic.publish(bodies, defer_ms)
    except TopicError as error:
        if topic.exiting:
            raise HTTPError(503, "EXITING") from None
        log.error("failed to publish to topic(%s) - %s", topic.name, error)
        raise HTTPError(500, "INTERNAL_ERROR") from None  # the disk refused it
    return text_response("OK")


async def pub(request: web.Request) -> web.Response:
    nsqd = _nsqd(request)
    body = await _read_limited(request, nsqd.opts.max_msg_size, "MSG_TOO_BIG")
    if not body:
        raise HTTPError(400, "MSG_EMPTY")
    topic = nsqd.get_topic(_topic_name(request))
    defer_ms = 0
    if "defer" in request.query:
        try:
            defer_ms = int(request.query["defer"])
        except ValueError:
            raise HTTPError(400, "INVALID_DEFER") from None
        if not 0 <= defer_ms <= nsqd.opts.max_req_timeout * 1000:
            raise HTTPError(400, "INVALID_DEFER")
    return _publish(topic, [body], defer_ms)


async def mpub(request: web.Request) -> web.Response:
    nsqd, opts = _nsqd(request), _nsqd(request).opts
    if request.content_length is not None and request.content_length > opts.max_body_size:
        raise HTTPError(413, "BODY_TOO_BIG")
    topic = nsqd.get_topic(_topic_name(request))
    binary = parse_bool(request.query.get("binary")) if "binary" in request.query else False
    if binary is None:
        log.warning("deprecated value '%s' used for /mpub binary param", request.query["binary"])
        binary = True
    body = await _read_limited(request, opts.max_body_size, "BODY_TOO_BIG")
    if binary:
        bodies = _binary_messages(body, opts.max_msg_size, opts.max_body_size)
    else:
        bodies = [line for line in body.split(b"\n") if line]
        if any(len(line) > opts.max_msg_size for line in bodies):
            raise HTTPError(413, "MSG_TOO_BIG")
    return _publish(topic, bodies)


def _binary_messages(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    try:
        messages, _ = split_mpub(body, 0, max_msg_size, max_body_size)
    except FatalClientError as error:
        raise HTTPError(413, error.code[2:]) from None
    if messages is None:
        raise HTTPError(413, "BAD_MESSAGE" if len(body) >= 4 else "BAD_BODY")
    return messages


def _existing_topic(request: web.Request, name: str) -> Topic:
    topic = _nsqd(request).topics.get(name)
    if topic is None:
        raise HTTPError(404, "TOPIC_NOT_FOUND")
    return topic


async def topic_action(request: web.Request) -> web.Response:
    nsqd = _nsqd(request)
    action = request.path.rsplit("/", 1)[1]
    if action == "create":
        nsqd.get_topic(_topic_name(request))
        return empty_response()
    # as in NSQ, only /topic/empty validates the name; delete and (un)pause answer 404 for an invalid one
    name = _topic_name(request) if action == "empty" else request.query.get("topic")
    if name is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    topic = _existing_topic(request, name)
    if action == "delete":
        nsqd.delete_topic(name)
    elif action == "empty":
        topic.empty()
    else:
        topic.pause() if action == "pause" else topic.unpause()
        await nsqd.persist_metadata()  # at once, as NSQ does, so a crash cannot forget it
    return empty_response()


def _topic_and_channel_names(request: web.Request) -> tuple[str, str]:
    topic_name = _topic_name(request, "INVALID_ARG_TOPIC")
    channel_name = request.query.get("channel")
    if channel_name is None:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_channel_name(channel_name):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic_name, channel_name


async def channel_action(request: web.Request) -> web.Response:
    action = request.path.rsplit("/", 1)[1]
    topic_name, channel_name = _topic_and_channel_names(request)
    topic = _existing_topic(request, topic_name)
    if action == "create":
        topic.get_channel(channel_name)
        return empty_response()
    channel = topic.channels.get(channel_name)
    if channel is None:
        raise HTTPError(404, "CHANNEL_NOT_FOUND")
    if action == "delete":
        topic.delete_channel(channel_name)
    elif action == "empty":
        channel.empty()
    else:
        channel.pause() if action == "pause" else channel.unpause()
        await _nsqd(request).persist_metadata()
    return empty_response()


async def config(request: web.Request) -> web.Response:
    nsqd, name = _nsqd(request), request.match_info["opt"]
    if request.method == "PUT":
        body = await _read_at_most(request, nsqd.opts.max_msg_size + 1)
        if not body or len(body) > nsqd.opts.max_msg_size:
            raise HTTPError(413, "INVALID_VALUE")
        if name == "nsqlookupd_tcp_addresses":
            await nsqd.set_lookupd_addresses(address_list(body))
        else:
            _set_option(nsqd, name, body)
    return json_response(option_value(nsqd.opts, name))


def _set_option(nsqd: NSQD, name: str, body: bytes) -> None:
    if name != "log_level":
        raise HTTPError(400, "INVALID_OPTION")
    set_log_level(nsqd.opts, "nsqd", body)
