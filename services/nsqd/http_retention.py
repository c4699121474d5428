"""nsqd's HTTP routes for retention and rewinds, beyond NSQ (retention.py, rewind.py):

- ``POST /topic/retention?topic=T&time=168h&bytes=N``: the topic's own settings; a value left out stays as it is,
  ``0`` turns it off, ``default`` goes back to the flags'.
- ``POST /channel/rewind?topic=T&channel=C&since=S``: puts back every retained message since S, answering
  ``{"rewound": N}`` (and ``"expired": E``, those past the TTL, when there are any).
- ``POST /channel/create?...&since=S``: a new channel already holding every retained message since S,
  ``{"rewound": N, "created": true}``; an existing one is left as it is, ``{"rewound": 0, "created": false}``.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from shared.flags import format_duration, parse_duration
from shared.http_conventions import HTTPError
from shared.http_router import Request, Response, json_document

from .http_api import _count
from .retention import DEFAULT
from .rewind import parse_since, rewind

if TYPE_CHECKING:
    from .channel import Channel
    from .nsqd import NSQD
    from .topic import Topic

_DEFAULT = "default"


async def set_retention(nsqd: NSQD, topic: Topic, request: Request) -> Response:
    """Answers the settings in force: ``{"time": "168h0m0s", "bytes": 0, ...}``, and whether each is the flags'."""
    if topic.ephemeral:
        raise HTTPError(400, "EPHEMERAL_TOPIC")
    settings = nsqd.retention.own.get(topic.name, DEFAULT)
    time_text, bytes_text = request.query.get("time"), request.query.get("bytes")
    if time_text is not None:
        settings = replace(settings, time=None if time_text == _DEFAULT else _duration(time_text))
    if bytes_text is not None:  # a non-negative count, as every count nsqd's API takes
        settings = replace(settings, bytes=None if bytes_text == _DEFAULT else _count(request, "bytes"))
    nsqd.set_retention(topic, settings)
    await nsqd.persist_metadata()
    return json_document(retention_document(nsqd, topic.name))


def retention_document(nsqd: NSQD, name: str) -> dict[str, Any]:
    seconds, max_bytes = nsqd.retention.settings(name)
    own = nsqd.retention.own.get(name, DEFAULT)
    return {"time": format_duration(seconds), "bytes": max_bytes, "time_is_default": own.time is None,
            "bytes_is_default": own.bytes is None}


def _duration(text: str) -> float:
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise HTTPError(400, "INVALID_ARG_TIME") from None
    if seconds < 0:
        raise HTTPError(400, "INVALID_ARG_TIME")
    return seconds


def _since(request: Request) -> int:
    text = request.query.get("since")
    if text is None:
        raise HTTPError(400, "MISSING_ARG_SINCE")
    try:
        return parse_since(text, time.time_ns())
    except (ValueError, OverflowError):
        raise HTTPError(400, "INVALID_ARG_SINCE") from None


async def rewind_channel(nsqd: NSQD, topic: Topic, channel: Channel, request: Request) -> Response:
    return json_document(await _rewind(nsqd, topic, channel, _since(request)))


async def create_channel_since(nsqd: NSQD, topic: Topic, name: str, request: Request) -> Response:
    since_ns = _since(request)
    if name in topic.channels:
        return json_document({"rewound": 0, "created": False})
    channel = topic.get_channel(name)
    return json_document({**await _rewind(nsqd, topic, channel, since_ns), "created": True})


async def _rewind(nsqd: NSQD, topic: Topic, channel: Channel, since_ns: int) -> dict[str, int]:
    result = rewind(topic, channel, nsqd.retention.topics.get(topic.name), since_ns, nsqd.opts.mem_queue_size,
                    nsqd.note_metadata_change)
    if result.rewound and not channel.ephemeral:
        await nsqd.persist_metadata()  # a restart goes on with it
    return {"rewound": result.rewound, **({"expired": result.expired} if result.expired else {})}

