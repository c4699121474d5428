"""``nsqd.dat`` in ``--data-path``: the topics and channels an nsqd has and whether they are paused, so a restart
recreates them. NSQ's format::

    {"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":false}]}],"version":"1.3.0"}

Beyond NSQ, a topic with a message TTL of its own has ``"ttl":"1h0m0s"`` (a Go duration), one with retention
settings of its own ``"retention_time":"168h0m0s"`` and ``"retention_bytes":N``, a channel with an attempts limit of
its own ``"max_attempts":5``, one with a rewind under way ``"rewind":[...]`` (where it is, rewind_cursor.py); NSQ
ignores these fields.

Ephemeral topics and channels are never written. The file is replaced atomically (``atomic_file``), so a crash
leaves the old file or the new one, never half.
The data path itself is locked while an nsqd uses it, so two never share one.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from nsqclient.protocol.names import is_ephemeral, is_valid_channel_name, is_valid_topic_name
from nsqclient.version import VERSION
from shared.flags import format_duration, parse_duration

from . import atomic_file
from .retention import DEFAULT, RetentionSettings
from .rewind_cursor import RewindPosition

if TYPE_CHECKING:
    from .channel import Channel
    from .retention import RetainedTopic
    from .topic import Topic

log = logging.getLogger("nsqd")

FILENAME = "nsqd.dat"
# a disk queue's files: its segments, its metadata, its deferred messages (``<topic>`` or ``<topic>:<channel>``);
# and a topic's retention files
_QUEUE_FILE = re.compile(r"^(?P<name>.+)\.(diskqueue\.(\d{6}|meta|deferred)|retention\.\d{6})\.dat$")


class MetadataError(Exception):
    """The data path cannot be used: locked by another nsqd, or its nsqd.dat is unreadable."""


@dataclass
class ChannelMetadata:
    name: str
    paused: bool = False
    max_attempts: int | None = None
    rewind: RewindPosition | None = None

    def restore(self, topic: Topic, channel: Channel, retained: RetainedTopic | None,
                rewind_ended: Callable[[], None]) -> None:
        """What nsqd.dat records of the channel, back on the channel a restart made."""
        if self.paused:
            channel.pause()
        if self.max_attempts is not None:
            channel.set_max_attempts(self.max_attempts)
        if self.rewind is not None:
            from .rewind import resume  # loaded only when a rewind was under way (as the HTTP API loads it)

            resume(topic, channel, retained, self.rewind, rewind_ended)


@dataclass
class TopicMetadata:
    name: str
    paused: bool = False
    channels: list[ChannelMetadata] = field(default_factory=list)
    ttl: float | None = None
    retention: RetentionSettings = DEFAULT


def snapshot(topics: dict[str, Topic], retention: Mapping[str, RetentionSettings]) -> list[TopicMetadata]:
    """What nsqd.dat records of ``topics`` (and their own ``retention`` settings); taken on the event loop, cheap."""
    return [TopicMetadata(topic.name, topic.paused,
                          [ChannelMetadata(channel.name, channel.paused, channel.own_max_attempts,
                                           channel.rewinding.position)
                           for channel in topic.channels.values() if not channel.ephemeral], topic.ttl,
                          retention.get(topic.name, DEFAULT))
            for topic in topics.values() if not topic.ephemeral]


def save(data_path: Path, topics: list[TopicMetadata]) -> None:
    document = {"topics": [{"name": topic.name, "paused": topic.paused,
                            "channels": [_channel_document(channel) for channel in topic.channels],
                            **({} if topic.ttl is None else {"ttl": format_duration(topic.ttl)}),
                            **_retention_document(topic.retention)}
                           for topic in topics],
                "version": VERSION}
    atomic_file.replace(data_path / FILENAME, json.dumps(document, separators=(",", ":")).encode(),
                        sync_directory=True)


def _retention_document(retention: RetentionSettings) -> dict[str, Any]:
    document: dict[str, Any] = {}
    if retention.time is not None:
        document["retention_time"] = format_duration(retention.time)
    if retention.bytes is not None:
        document["retention_bytes"] = retention.bytes
    return document


def _channel_document(channel: ChannelMetadata) -> dict[str, Any]:
    document: dict[str, Any] = {"name": channel.name, "paused": channel.paused}
    if channel.max_attempts is not None:
        document["max_attempts"] = channel.max_attempts
    if channel.rewind is not None:
        document["rewind"] = channel.rewind.document()
    return document


def load(data_path: Path) -> list[TopicMetadata]:
    """The topics nsqd.dat records; none if there is no file yet. Invalid names are skipped with a warning."""
    try:
        text = (data_path / FILENAME).read_text()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise MetadataError(f"failed to read metadata {data_path / FILENAME} - {error}") from None
    try:
        document = json.loads(text)
        return [topic for raw in document.get("topics") or [] if (topic := _topic(raw)) is not None]
    except (ValueError, AttributeError, TypeError, KeyError) as error:
        raise MetadataError(f"failed to parse metadata {data_path / FILENAME} - {error}") from None


def with_queues_on_disk(data_path: Path, recorded: list[TopicMetadata]) -> list[TopicMetadata]:
    """``recorded`` plus the topics and channels whose disk queues (or retention files) are in ``data_path`` but which
    it does not name: nsqd.dat is rewritten after a topic or channel appears, and a crash in between would otherwise
    leave their acknowledged messages on disk, forgotten."""
    topics = {topic.name: topic for topic in recorded}
    for path in sorted(data_path.iterdir()):
        match = _QUEUE_FILE.match(path.name)
        if match is None:
            continue
        topic_name, _, channel_name = match["name"].partition(":")
        if not is_valid_topic_name(topic_name) or is_ephemeral(topic_name) or (channel_name and (
                not is_valid_channel_name(channel_name) or is_ephemeral(channel_name))):
            continue
        topic = topics.get(topic_name)
        if topic is None:
            log.warning("TOPIC(%s): found on disk but not in %s; recovered", topic_name, FILENAME)
            topic = topics[topic_name] = TopicMetadata(topic_name)
        if channel_name and all(channel.name != channel_name for channel in topic.channels):
            log.warning("TOPIC(%s): channel %s found on disk but not in %s; recovered", topic_name, channel_name,
                        FILENAME)
            topic.channels.append(ChannelMetadata(channel_name))
    return list(topics.values())


def _topic(raw: dict[str, Any]) -> TopicMetadata | None:
    name = raw["name"]
    if not is_valid_topic_name(name) or is_ephemeral(name):
        log.warning("skipping creation of invalid topic %s", name)
        return None
    channels = []
    for channel in raw.get("channels") or []:
        if not is_valid_channel_name(channel["name"]) or is_ephemeral(channel["name"]):
            log.warning("skipping creation of invalid channel %s", channel["name"])
            continue
        max_attempts, rewind = channel.get("max_attempts"), channel.get("rewind")
        channels.append(ChannelMetadata(channel["name"], bool(channel.get("paused", False)),
                                        None if max_attempts is None else int(max_attempts),
                                        None if rewind is None else RewindPosition.from_document(rewind)))
    ttl, retention_time, retention_bytes = raw.get("ttl"), raw.get("retention_time"), raw.get("retention_bytes")
    return TopicMetadata(name, bool(raw.get("paused", False)), channels,
                         None if ttl is None else parse_duration(ttl),
                         RetentionSettings(None if retention_time is None else parse_duration(retention_time),
                                           None if retention_bytes is None else int(retention_bytes)))


class DataPathLock:
    """An exclusive, non-blocking flock on the data path directory, held while an nsqd runs (as NSQ's)."""

    def __init__(self, data_path: Path) -> None:
        self.data_path = data_path
        self._descriptor: int | None = None

    def acquire(self) -> None:
        descriptor = os.open(self.data_path, os.O_RDONLY)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            raise MetadataError(f"--data-path={self.data_path} in use (possibly by another instance of nsqd)")
        self._descriptor = descriptor

    @property
    def held(self) -> bool:
        return self._descriptor is not None

    def release(self) -> None:
        if self._descriptor is not None:
            os.close(self._descriptor)  # closing the descriptor drops the lock
            self._descriptor = None
