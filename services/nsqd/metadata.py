"""``nsqd.dat`` in ``--data-path``: the topics and channels an nsqd has and whether they are paused, so a restart
recreates them. NSQ's format::

    {"topics":[{"name":"t","paused":false,"channels":[{"name":"c","paused":false}]}],"version":"1.3.0"}

Ephemeral topics and channels are never written. The file is replaced atomically (written to a temporary file,
fsynced, renamed over the old one, directory fsynced), so a crash leaves the old file or the new one, never half.
The data path itself is locked while an nsqd uses it, so two never share one.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shared.names import is_ephemeral, is_valid_channel_name, is_valid_topic_name
from shared.version import VERSION

if TYPE_CHECKING:
    from .topic import Topic

log = logging.getLogger("nsqd")

FILENAME = "nsqd.dat"


class MetadataError(Exception):
    """The data path cannot be used: locked by another nsqd, or its nsqd.dat is unreadable."""


@dataclass
class ChannelMetadata:
    name: str
    paused: bool = False


@dataclass
class TopicMetadata:
    name: str
    paused: bool = False
    channels: list[ChannelMetadata] = field(default_factory=list)


def snapshot(topics: dict[str, Topic]) -> list[TopicMetadata]:
    """What nsqd.dat records of ``topics``; taken on the event loop, cheap."""
    return [TopicMetadata(topic.name, topic.paused,
                          [ChannelMetadata(channel.name, channel.paused) for channel in topic.channels.values()
                           if not channel.ephemeral])
            for topic in topics.values() if not topic.ephemeral]


def save(data_path: Path, topics: list[TopicMetadata]) -> None:
    document = {"topics": [{"name": topic.name, "paused": topic.paused,
                            "channels": [{"name": c.name, "paused": c.paused} for c in topic.channels]}
                           for topic in topics],
                "version": VERSION}
    target = data_path / FILENAME
    temporary = data_path / f"{FILENAME}.{os.urandom(4).hex()}.tmp"
    try:
        with open(temporary, "w") as file:
            json.dump(document, file, separators=(",", ":"))
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    finally:
        temporary.unlink(missing_ok=True)
    _fsync_directory(data_path)


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
        channels.append(ChannelMetadata(channel["name"], bool(channel.get("paused", False))))
    return TopicMetadata(name, bool(raw.get("paused", False)), channels)


def _fsync_directory(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


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
