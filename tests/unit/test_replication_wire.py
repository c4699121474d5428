"""The replication link's frames: each survives encoding, arrives whole however the bytes are cut, and bytes that
are not a frame are refused."""

from __future__ import annotations

import pytest

from services.nsqd.replication.wire import (Ack, Distribute, DropChannel, DropTopic, Finish, Frame, FrameReader, Hello,
                                            Messages, Publish, Refuse, Requeue, Snapshot, SnapshotEnd, WireError,
                                            encode)

TWO = Messages.of([(b"0123456789abcdef", b"{}", 1_700_000_000_000_000_000, 0), (b"fedcba9876543210", b"a", 1, 3)])
FRAMES: list[Frame] = [
    Hello("10.0.0.1:4150", 7, 1),
    Publish(1, "orders", ("archive", "billing"), 0, TWO),
    Publish(2, "orders", (), 1500, Messages.of([(b"0123456789abcdeg", b"x" * 70_000, 2, 0)])),
    Publish(2, "orders", ("archive",), 0, TWO, (3_600_000_000_000, 1_000_000)),  # the topic retains it
    Publish(2, "orders", (), 0, TWO, (3_600_000_000_000, 0), history=True),  # to retain only
    Distribute(3, "orders", ("archive",)),
    Requeue(3, "orders", "archive", b"0123456789abcdef", 4, 1_700_000_000_000_000_000),
    Finish(4, "orders", "archive", (b"0123456789abcdef", b"fedcba9876543210")),
    DropChannel(5, "orders", "billing#ephemeral"),
    DropTopic(6, "orders", True),
    DropTopic(7, "orders", False),
    Ack(2**40),
    Snapshot(41, Publish(41, "orders", ("archive",), 2500, Messages.of([(b"0123456789abcdef", b"held", 3, 0)]))),
    Snapshot(41, Publish(41, "orders", (), 0, Messages.of([]))),
    SnapshotEnd(41),
    Refuse("E_STALE_EPOCH epoch 6 is older than 7"),
]


def test_every_frame_comes_back_as_it_was_sent() -> None:
    reader = FrameReader()
    assert reader.feed(b"".join(map(encode, FRAMES))) == FRAMES


def test_frames_cut_anywhere_arrive_whole_and_in_order() -> None:
    data = b"".join(map(encode, FRAMES))
    for step in (1, 3, 7, 1000):
        reader = FrameReader()
        received = []
        for start in range(0, len(data), step):
            received += reader.feed(data[start:start + step])
        assert received == FRAMES


def test_messages_read_back_as_nsqd_queues_them() -> None:
    assert list(TWO) == [(b"0123456789abcdef", b"{}", 1_700_000_000_000_000_000, 0), (b"fedcba9876543210", b"a", 1, 3)]
    assert len(TWO) == 2 and TWO == Messages.of(list(TWO)) and TWO != Messages.of(list(TWO)[:1])


@pytest.mark.parametrize("data, error", [
    (b"\x00\x00\x00\x00\x01", "frame of 0 bytes"),
    (b"\x7f\x00\x00\x00\x01", "frame of"),
    (b"\x00\x00\x00\x01\x63", "unknown frame type 99"),
    (b"\x00\x00\x00\x03\x02\x00\x00", "ends inside a field"),
    (b"\x00\x00\x00\x0a\x02" + b"\x00" * 9, "left over"),
    (b"\x00\x00\x00\x03\x01{}", "HELLO"),
    (encode(DropChannel(1, "t", "c")).replace(b"\x01t", b"\x01\xff"), "ASCII"),
    (encode(Publish(1, "t", (), 0, Messages(TWO.data, 3))), "ends inside a field"),
    (encode(Publish(1, "t", (), 0, Messages(TWO.data + b"xy", 2))), "2 bytes left over"),
    (encode(Publish(1, "t", (), 0, Messages(TWO.data[:-1], 2))), "ends inside a field"),
])
def test_bytes_that_are_not_a_frame_are_refused(data: bytes, error: str) -> None:
    with pytest.raises(WireError, match=error):
        FrameReader().feed(data)


def test_a_frame_too_large_is_refused_from_its_header_even_when_the_header_comes_in_pieces() -> None:
    reader = FrameReader(max_frame=1024)
    assert reader.feed(encode(Ack(1))[:2]) == []
    assert reader.feed(encode(Ack(1))[2:] + b"\x00\x00") == [Ack(1)]
    with pytest.raises(WireError, match="frame of 4096 bytes"):
        reader.feed(b"\x10\x00\x00")


def test_a_publish_keeps_its_ids_together_ahead_of_the_messages() -> None:
    frame = FrameReader().feed(encode(Publish(1, "t", ("c",), 0, TWO)))[0]
    assert isinstance(frame, Publish)
    assert frame.messages.ids() == b"0123456789abcdeffedcba9876543210" == TWO.ids()
    assert list(frame.messages) == list(TWO)


def test_a_snapshot_part_carries_the_snapshots_number_whatever_its_publish_says() -> None:
    part = Publish(0, "orders", (), 0, Messages.of([(b"0123456789abcdef", b"held", 3, 0)]))
    assert FrameReader().feed(encode(Snapshot(41, part))) == [Snapshot(41, Publish(41, "orders", (), 0, part.messages))]
