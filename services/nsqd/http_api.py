"""nsqd's HTTP API: NSQ's routes, query parameters, status codes, error codes and JSON shapes, served by
``http_server``.

All parameters come from the query string, even on POST; only /pub, /mpub and PUT /config read the body, each
up to its limit (a larger body is never buffered).

Beyond NSQ, ``GET /topic/peek`` and ``GET /channel/peek`` (``queue=dead``: the dead-letter queue) show up to ``n``
queued messages without consuming them, in the order they would be delivered; deferred and in-flight messages are
not queued, so not shown.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from nsqclient.protocol.names import is_valid_channel_name, is_valid_topic_name
from nsqclient.version import VERSION
from shared.flags import parse_duration
from shared.http_auth import (
    ACCEPTED,
    ADMIN_CHANNEL,
    ADMIN_NODE,
    ADMIN_TOPIC,
    OPEN,
    PUBLISH,
    SUBSCRIBE,
    SUBSCRIBE_TOPIC,
    identity_answer,
)
from shared.http_conventions import COMPACT_JSON, HTTPError, parse_bool
from shared.http_router import NSQ_V1, Request, Response, Router, json_document, json_response
from shared.protocol.commands import split_mpub
from shared.protocol.errors import FatalClientError
from shared.runtime_config import address_list, option_value, set_log_level

from .message import QueuedMessage
from .topic import ReplicationError, Topic, TopicError, TopicFull

if TYPE_CHECKING:
    from .message_queue import MessageQueue
    from .nsqd import NSQD

log = logging.getLogger("nsqd")

_OK = Response(b"OK", headers=NSQ_V1)
_EMPTY = Response(headers=NSQ_V1)
PEEK_DEFAULT = 10  # messages a peek shows when it does not say
PEEK_MAX = 100


def build_router(nsqd: NSQD) -> Router:
    """The routes, each with what it needs of a request's identity under ``--http-auth-required`` (the README's
    table of routes says the same)."""
    api, opts, router = _API(nsqd), nsqd.opts, Router()
    router.add("GET", "/ping", api.ping, OPEN)
    router.add("GET", "/info", api.info, OPEN)
    router.add("GET", "/stats", api.stats, ACCEPTED)  # what the identity may see of it
    router.add("GET", "/metrics", api.metrics, ACCEPTED)
    router.add("GET", "/config/:opt", api.config, ACCEPTED)
    router.add("GET", "/auth", identity_answer, ACCEPTED)
    router.add("POST", "/pub", api.pub, PUBLISH, lambda: opts.max_msg_size)
    router.add("POST", "/mpub", api.mpub, PUBLISH, lambda: opts.max_body_size)
    for action in ("create", "delete", "empty", "pause", "unpause"):
        router.add("POST", f"/topic/{action}", getattr(api, f"topic_{action}"), ADMIN_TOPIC)
        router.add("POST", f"/channel/{action}", getattr(api, f"channel_{action}"),
                   SUBSCRIBE if action == "create" else ADMIN_CHANNEL)  # as a SUB creates it
    router.add("POST", "/topic/ttl", api.topic_ttl, ADMIN_TOPIC)
    router.add("POST", "/topic/retention", api.topic_retention, ADMIN_TOPIC)
    router.add("POST", "/channel/rewind", api.channel_rewind, SUBSCRIBE)
    router.add("POST", "/channel/dead_letter", api.channel_dead_letter, ADMIN_CHANNEL)
    router.add("POST", "/channel/replay", api.channel_replay, ADMIN_CHANNEL)
    router.add("GET", "/topic/peek", api.topic_peek, SUBSCRIBE_TOPIC)
    router.add("GET", "/channel/peek", api.channel_peek, SUBSCRIBE)
    router.add("PUT", "/config/:opt", api.config, ADMIN_NODE, lambda: opts.max_msg_size)
    router.add("POST", "/debug/freememory", api.free_memory, ADMIN_NODE)
    return router


def tls_required(nsqd: NSQD) -> Response:
    """With ``--tls-required=true`` plain HTTP only says where HTTPS is, as NSQ does."""
    body = f'{{"message": "TLS_REQUIRED", "https_port": {nsqd.https_address[1]}}}'
    return json_response(body, 403)


def _topic_name(request: Request, invalid_code: str = "INVALID_TOPIC") -> str:
    name = request.query.get("topic")
    if name is None:
        raise HTTPError(400, "MISSING_ARG_TOPIC")
    if not is_valid_topic_name(name):
        raise HTTPError(400, invalid_code)
    return name


def _body(request: Request, code: str) -> bytes:
    """The body, or NSQ's 413 when it passed the route's limit (it was not read)."""
    if request.body is None:
        raise HTTPError(413, code)
    return request.body


def _topic_and_channel_names(request: Request) -> tuple[str, str]:
    topic_name = _topic_name(request, "INVALID_ARG_TOPIC")
    channel_name = request.query.get("channel")
    if channel_name is None:
        raise HTTPError(400, "MISSING_ARG_CHANNEL")
    if not is_valid_channel_name(channel_name):
        raise HTTPError(400, "INVALID_ARG_CHANNEL")
    return topic_name, channel_name


def _count(request: Request, parameter: str) -> int | None:
    """A non-negative integer query parameter, None when absent, 400 ``INVALID_ARG_<PARAMETER>`` when not one;
    a number too long to mean anything is 2**62 (never int() of a thousand digits)."""
    text = request.query.get(parameter)
    if text is None:
        return None
    if not text.isascii() or not text.isdigit():
        raise HTTPError(400, f"INVALID_ARG_{parameter.upper()}")
    digits = text.lstrip("0")
    return 1 << 62 if len(digits) > 18 else int(digits or "0")


def _dead_letters_asked(request: Request) -> bool:
    """``queue=dead``: the channel's dead-letter queue rather than the channel's own."""
    queue = request.query.get("queue")
    if queue not in (None, "dead"):
        raise HTTPError(400, "INVALID_QUEUE")
    return queue == "dead"


def _binary_messages(body: bytes, max_msg_size: int, max_body_size: int) -> list[bytes]:
    try:
        messages, _ = split_mpub(body, 0, max_msg_size, max_body_size)
    except FatalClientError as error:
        raise HTTPError(413, error.code[2:]) from None
    if messages is None:
        raise HTTPError(413, "BAD_MESSAGE" if len(body) >= 4 else "BAD_BODY")
    return messages


def _peek_count(request: Request) -> int:
    count = _count(request, "n")
    if count == 0:
        raise HTTPError(400, "INVALID_ARG_N")
    return PEEK_DEFAULT if count is None else min(count, PEEK_MAX)


class _API:
    """The handlers, bound to one nsqd."""

    def __init__(self, nsqd: NSQD) -> None:
        self.nsqd = nsqd
        self.opts = nsqd.opts

    # -- /ping, /info, /stats, /metrics ------------------------------------------------------------------

    def ping(self, request: Request) -> Response:
        health = self.nsqd.health
        if health != "OK":
            return Response(f"NOK - {health}".encode(), 500)
        return Response(b"OK")

    def free_memory(self, request: Request) -> Response:
        """NSQ 1.3's ``/debug/freememory``, answered 200 (NSQ's own answers 500 once the memory is freed)."""
        from . import stats

        stats.give_back_memory()
        return Response()

    def info(self, request: Request) -> Response:
        nsqd, opts = self.nsqd, self.opts
        return json_document({
            "version": VERSION, "broadcast_address": opts.broadcast_address, "hostname": nsqd.hostname,
            "http_port": nsqd.http_address[1], "tcp_port": nsqd.tcp_address[1], "start_time": nsqd.start_time,
            "max_heartbeat_interval": int(opts.max_heartbeat_interval * 1e9),
            "max_output_buffer_size": opts.max_output_buffer_size,
            "max_output_buffer_timeout": int(opts.max_output_buffer_timeout * 1e9),
            "max_deflate_level": opts.max_deflate_level,
            "topology_zone": opts.topology_zone, "topology_region": opts.topology_region,
        })

    def stats(self, request: Request) -> Response:
        from . import stats  # at the first /stats: an nsqd nobody reads the stats of need not carry it

        query = request.query
        include_clients = parse_bool(query.get("include_clients"))
        include_mem = parse_bool(query.get("include_mem"))
        document = stats.collect(self.nsqd, query.get("topic") or None, query.get("channel") or None,
                                 include_clients is not False, include_mem is not False)
        if request.identity is not None:
            stats.narrow_to(document, request.identity)
        if query.get("format") == "json":
            return json_document(document)
        return Response(stats.render_text(self.nsqd, document).encode(), headers=NSQ_V1)

    def metrics(self, request: Request) -> Response:
        body, content_type = self.nsqd.metrics.render()
        return Response(body, headers=(("Content-Type", content_type),))

    # -- publishing ----------------------------------------------------------------------------------------

    def _publish(self, topic: Topic, bodies: list[bytes], defer_ms: int = 0) -> Response | Awaitable[Response]:
        try:
            replicated = topic.publish(bodies, defer_ms)
        except TopicError as error:
            if topic.exiting:
                raise HTTPError(503, "EXITING") from None
            if isinstance(error, TopicFull):
                raise HTTPError(500, f"QUEUE_FULL - {error}") from None
            log.error("failed to publish to topic(%s) - %s", topic.name, error)
            raise HTTPError(500, "INTERNAL_ERROR") from None  # the disk refused it
        if replicated is not None:
            return _once_replicated(topic, replicated)
        return topic.when_started(_OK)

    def _publish_topic(self, request: Request) -> Topic:
        """The topic to publish to, made if new; the name of one that exists was checked when it was made."""
        name = request.query.get("topic")
        topic = self.nsqd.topics.get(name) if name is not None else None
        return topic if topic is not None else self.nsqd.get_topic(_topic_name(request))

    def pub(self, request: Request) -> Response | Awaitable[Response]:
        body = _body(request, "MSG_TOO_BIG")
        if not body:
            raise HTTPError(400, "MSG_EMPTY")
        topic = self._publish_topic(request)
        defer_ms = 0
        if "defer" in request.query:
            try:
                defer_ms = int(request.query["defer"])
            except ValueError:
                raise HTTPError(400, "INVALID_DEFER") from None
            if not 0 <= defer_ms <= self.opts.max_req_timeout * 1000:
                raise HTTPError(400, "INVALID_DEFER")
        return self._publish(topic, [body], defer_ms)

    def mpub(self, request: Request) -> Response | Awaitable[Response]:
        opts = self.opts
        if request.content_length is not None and request.content_length > opts.max_body_size:
            raise HTTPError(413, "BODY_TOO_BIG")
        topic = self._publish_topic(request)
        binary = parse_bool(request.query.get("binary")) if "binary" in request.query else False
        if binary is None:
            log.warning("deprecated value '%s' used for /mpub binary param", request.query["binary"])
            binary = True
        body = _body(request, "BODY_TOO_BIG")
        if binary:
            bodies = _binary_messages(body, opts.max_msg_size, opts.max_body_size)
        else:
            bodies = [line for line in body.split(b"\n") if line]
            if any(len(line) > opts.max_msg_size for line in bodies):
                raise HTTPError(413, "MSG_TOO_BIG")
        return self._publish(topic, bodies)

    # -- topics and channels -------------------------------------------------------------------------------

    def _existing_topic(self, name: str) -> Topic:
        topic = self.nsqd.topics.get(name)
        if topic is None:
            raise HTTPError(404, "TOPIC_NOT_FOUND")
        return topic

    def _named_topic(self, request: Request) -> Topic:
        """As in NSQ, only /topic/empty validates the name; delete and (un)pause answer 404 for an invalid one."""
        name = request.query.get("topic")
        if name is None:
            raise HTTPError(400, "MISSING_ARG_TOPIC")
        return self._existing_topic(name)

    def topic_create(self, request: Request) -> Response | Awaitable[Response]:
        return self.nsqd.get_topic(_topic_name(request)).when_started(_EMPTY)

    def topic_delete(self, request: Request) -> Response:
        self.nsqd.delete_topic(self._named_topic(request).name)
        return _EMPTY

    def topic_empty(self, request: Request) -> Response:
        self._existing_topic(_topic_name(request)).empty()
        return _EMPTY

    async def topic_pause(self, request: Request) -> Response:
        self._named_topic(request).pause()
        await self.nsqd.persist_metadata()  # at once, as NSQ does, so a crash cannot forget it
        return _EMPTY

    async def topic_unpause(self, request: Request) -> Response:
        self._named_topic(request).unpause()
        await self.nsqd.persist_metadata()
        return _EMPTY

    async def topic_ttl(self, request: Request) -> Response:
        """Beyond NSQ: the topic's own message TTL (``ttl``, a Go duration; 0: none), kept in nsqd.dat."""
        topic = self._named_topic(request)
        text = request.query.get("ttl")
        if text is None:
            raise HTTPError(400, "MISSING_ARG_TTL")
        try:
            seconds = parse_duration(text)
        except ValueError:
            raise HTTPError(400, "INVALID_TTL") from None
        if seconds < 0:
            raise HTTPError(400, "INVALID_TTL")
        topic.set_ttl(seconds)
        await self.nsqd.persist_metadata()
        return _EMPTY

    def _channel_topic(self, request: Request) -> tuple[Topic, str]:
        topic_name, channel_name = _topic_and_channel_names(request)
        return self._existing_topic(topic_name), channel_name

    def _existing_channel(self, request: Request) -> tuple[Topic, str]:
        topic, name = self._channel_topic(request)
        if name not in topic.channels:
            raise HTTPError(404, "CHANNEL_NOT_FOUND")
        return topic, name

    def channel_create(self, request: Request) -> Response | Awaitable[Response]:
        """Beyond NSQ, ``since`` makes a new channel from the topic's history (http_retention.py)."""
        topic, name = self._channel_topic(request)
        if "since" in request.query:
            from . import http_retention  # at the first rewind: an nsqd nobody rewinds need not carry it

            return http_retention.create_channel_since(self.nsqd, topic, name, request)
        topic.get_channel(name)
        return _EMPTY

    def channel_rewind(self, request: Request) -> Awaitable[Response]:
        from . import http_retention

        topic, name = self._existing_channel(request)
        return http_retention.rewind_channel(self.nsqd, topic, topic.channels[name], request)

    def topic_retention(self, request: Request) -> Awaitable[Response]:
        from . import http_retention

        return http_retention.set_retention(self.nsqd, self._named_topic(request), request)

    def channel_delete(self, request: Request) -> Response:
        topic, name = self._existing_channel(request)
        topic.delete_channel(name)
        return _EMPTY

    def channel_empty(self, request: Request) -> Response:
        """Beyond NSQ, ``queue=dead`` empties the channel's dead-letter queue instead."""
        topic, name = self._existing_channel(request)
        if _dead_letters_asked(request):
            topic.channels[name].empty_dead_letters()
        else:
            topic.channels[name].empty()
        return _EMPTY

    async def channel_dead_letter(self, request: Request) -> Response:
        """Beyond NSQ: the channel's own attempts limit (``attempts``; 0: none), kept in nsqd.dat."""
        topic, name = self._existing_channel(request)
        attempts = _count(request, "attempts")
        if attempts is None:
            raise HTTPError(400, "MISSING_ARG_ATTEMPTS")
        if attempts > 65535:  # a message's attempts are a uint16
            raise HTTPError(400, "INVALID_ARG_ATTEMPTS")
        topic.channels[name].set_max_attempts(attempts)
        await self.nsqd.persist_metadata()
        return _EMPTY

    def channel_replay(self, request: Request) -> Response:
        """Beyond NSQ: up to ``n`` (all by default) dead letters back to the channel, attempts reset."""
        topic, name = self._existing_channel(request)
        count = _count(request, "n")
        moved = topic.channels[name].replay(count if count is not None else 1 << 62)
        return json_document({"replayed": moved})

    async def channel_pause(self, request: Request) -> Response:
        topic, name = self._existing_channel(request)
        topic.channels[name].pause()
        await self.nsqd.persist_metadata()
        return _EMPTY

    async def channel_unpause(self, request: Request) -> Response:
        topic, name = self._existing_channel(request)
        topic.channels[name].unpause()
        await self.nsqd.persist_metadata()
        return _EMPTY

    # -- peeking, beyond NSQ -------------------------------------------------------------------------------

    async def topic_peek(self, request: Request) -> Response:
        count = _peek_count(request)
        return await _peek(self._existing_topic(_topic_name(request)).queue, count)

    async def channel_peek(self, request: Request) -> Response:
        """``queue=dead`` peeks at the channel's dead-letter queue instead, as /channel/empty empties it."""
        count = _peek_count(request)
        topic, name = self._existing_channel(request)
        channel = topic.channels[name]
        return await _peek(channel.dead_letters if _dead_letters_asked(request) else channel.queue, count)

    # -- /config -----------------------------------------------------------------------------------------

    async def config(self, request: Request) -> Response:
        nsqd, name = self.nsqd, request.route_params["opt"]
        if request.method == "PUT":
            body = request.body
            if not body:  # empty, or over --max-msg-size
                raise HTTPError(413, "INVALID_VALUE")
            if name == "nsqlookupd_tcp_addresses":
                await nsqd.set_lookupd_addresses(address_list(body))
            else:
                self._set_option(name, body)
        return json_document(option_value(nsqd.opts, name))

    def _set_option(self, name: str, body: bytes) -> None:
        if name != "log_level":
            raise HTTPError(400, "INVALID_OPTION")
        set_log_level(self.opts, "nsqd", body)


async def _once_replicated(topic: Topic, replicated: Awaitable[None]) -> Response:
    """200 OK once the mirrors hold the publish; 500 when too few copies do."""
    try:
        await replicated
    except ReplicationError as error:
        raise HTTPError(500, f"PUB_FAILED - {error}") from None
    started = topic.when_started(_OK)
    return started if isinstance(started, Response) else await started


async def _peek(queue: MessageQueue, count: int) -> Response:
    """The queue's next ``count`` messages as JSON; disk reads and encoding run off the event loop (a hundred
    messages may be a hundred megabytes)."""
    job = queue.peek_job(count)
    try:
        body = await asyncio.to_thread(lambda: _messages_json(job()))
    except OSError as error:
        log.error("failed to peek at %s - %s", queue.name, error)
        raise HTTPError(500, "INTERNAL_ERROR") from None
    return json_response(body)


def _messages_json(entries: list[QueuedMessage]) -> str:
    # IDs are 16 ASCII hex digits, as NSQ's; "replace" keeps the answer JSON should a damaged file say otherwise
    messages = [{"id": msg_id.decode("ascii", "replace"), "timestamp": timestamp, "attempts": attempts,
                 "body": base64.b64encode(body).decode("ascii")} for msg_id, body, timestamp, attempts in entries]
    return COMPACT_JSON.encode({"messages": messages})
