from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.nsqd import metadata
from services.nsqd.storage import Storage
from services.nsqd.metadata import ChannelMetadata, DataPathLock, MetadataError, TopicMetadata
from services.nsqd.retention import RetentionSettings
from services.nsqd.rewind_cursor import RewindPosition
from services.nsqd.topic import Topic
from tests.unit.nsqd_fixtures import options


def test_round_trip_in_nsqs_format(tmp_path: Path) -> None:
    topics = [TopicMetadata("t", True, [ChannelMetadata("a"), ChannelMetadata("b", True)]), TopicMetadata("u")]
    metadata.save(tmp_path, topics)
    assert json.loads((tmp_path / "nsqd.dat").read_text()) == {
        "topics": [{"name": "t", "paused": True, "channels": [{"name": "a", "paused": False},
                                                               {"name": "b", "paused": True}]},
                   {"name": "u", "paused": False, "channels": []}],
        "version": "1.3.0"}
    assert metadata.load(tmp_path) == topics
    assert [path.name for path in tmp_path.iterdir()] == ["nsqd.dat"]  # no temporary file left behind


def test_no_file_means_no_topics(tmp_path: Path) -> None:
    assert metadata.load(tmp_path) == []


def test_invalid_and_ephemeral_names_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "nsqd.dat").write_text(json.dumps({"topics": [
        {"name": "bad name", "paused": False, "channels": []},
        {"name": "ok", "paused": False, "channels": [{"name": "x#ephemeral", "paused": False},
                                                      {"name": "c", "paused": False}]}]}))
    assert metadata.load(tmp_path) == [TopicMetadata("ok", False, [ChannelMetadata("c")])]


@pytest.mark.parametrize("text", ["{not json", '{"topics": [{"paused": false}]}', '{"topics": 5}'])
def test_unreadable_metadata_is_an_error(tmp_path: Path, text: str) -> None:
    (tmp_path / "nsqd.dat").write_text(text)
    with pytest.raises(MetadataError, match="failed to parse metadata"):
        metadata.load(tmp_path)


def test_snapshot_leaves_out_ephemeral_topics_and_channels() -> None:
    durable = Topic("t", options(), Storage(None, options()), lambda topic: None)
    durable.get_channel("c").pause()
    durable.get_channel("tail#ephemeral")
    ephemeral = Topic("e#ephemeral", options(), Storage(None, options()), lambda topic: None)
    assert metadata.snapshot({"t": durable, "e#ephemeral": ephemeral}, {}) == [
        TopicMetadata("t", False, [ChannelMetadata("c", True)])]


def test_a_data_path_is_locked_by_one_holder(tmp_path: Path) -> None:
    first, second = DataPathLock(tmp_path), DataPathLock(tmp_path)
    first.acquire()
    with pytest.raises(MetadataError, match=f"--data-path={tmp_path} in use"):
        second.acquire()
    first.release()
    second.acquire()
    second.release()


def test_disk_queues_nsqd_dat_does_not_name_are_recovered(tmp_path: Path) -> None:
    recorded = [TopicMetadata("kept", channels=[ChannelMetadata("a")])]
    for name in ("kept.diskqueue.000000.dat", "kept:a.diskqueue.meta.dat", "kept:late.diskqueue.000003.dat",
                 "new.diskqueue.meta.dat", "new:c.diskqueue.deferred.dat", "gone.diskqueue.000000.dat.bad",
                 "tmp#ephemeral.diskqueue.000000.dat", "bad!name.diskqueue.000000.dat", "notes.txt",
                 "history.retention.000002.dat", "kept.retention.000001.dat"):
        (tmp_path / name).write_bytes(b"")
    topics = metadata.with_queues_on_disk(tmp_path, recorded)
    assert [(topic.name, [channel.name for channel in topic.channels]) for topic in topics] == [
        ("kept", ["a", "late"]), ("history", []), ("new", ["c"])]


def test_a_topics_own_retention_is_kept_beside_nsqs_fields(tmp_path: Path) -> None:
    topics = [TopicMetadata("t", retention=RetentionSettings(3600.0, 10_000)),
              TopicMetadata("u", retention=RetentionSettings(time=0.0)), TopicMetadata("v")]
    metadata.save(tmp_path, topics)
    saved = json.loads((tmp_path / "nsqd.dat").read_text())["topics"]
    assert [(topic.get("retention_time"), topic.get("retention_bytes")) for topic in saved] == [
        ("1h0m0s", 10_000), ("0s", None), (None, None)]
    assert metadata.load(tmp_path) == topics


def test_a_topics_own_ttl_is_kept_beside_nsqs_fields(tmp_path: Path) -> None:
    topics = [TopicMetadata("t", ttl=90.0), TopicMetadata("u", ttl=0.0), TopicMetadata("v")]
    metadata.save(tmp_path, topics)
    saved = json.loads((tmp_path / "nsqd.dat").read_text())["topics"]
    assert [topic.get("ttl") for topic in saved] == ["1m30s", "0s", None]
    assert metadata.load(tmp_path) == topics


def test_a_channels_own_attempts_limit_is_kept_beside_nsqs_fields(tmp_path: Path) -> None:
    topics = [TopicMetadata("t", channels=[ChannelMetadata("a", max_attempts=5), ChannelMetadata("b")])]
    metadata.save(tmp_path, topics)
    channels = json.loads((tmp_path / "nsqd.dat").read_text())["topics"][0]["channels"]
    assert channels == [{"name": "a", "paused": False, "max_attempts": 5}, {"name": "b", "paused": False}]
    assert metadata.load(tmp_path) == topics


def test_a_rewind_under_way_is_kept_as_where_it_is(tmp_path: Path) -> None:
    position = RewindPosition(1_796_112_000_000_000_000, 3, 4096, 2, 128, 500, 1_796_112_001_000_000_000)
    topics = [TopicMetadata("t", channels=[ChannelMetadata("a", rewind=position), ChannelMetadata("b")])]
    metadata.save(tmp_path, topics)
    channels = json.loads((tmp_path / "nsqd.dat").read_text())["topics"][0]["channels"]
    assert channels[0]["rewind"] == [1_796_112_000_000_000_000, 3, 4096, 2, 128, 500, 1_796_112_001_000_000_000] and "rewind" not in channels[1]
    assert metadata.load(tmp_path) == topics
