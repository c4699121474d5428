"""The frames between nsqd and its connection workers, cut out of bytes as they arrive."""

from __future__ import annotations

import pytest

from services.nsqd import relay_frames as frames
from services.nsqd.relay_frames import FrameError, FrameReader


def test_frames_come_out_whole_however_the_bytes_are_cut() -> None:
    sent = [(frames.OPENED, 7, b"127.0.0.1:5000"), (frames.RECEIVED, 7, b"PUB t\n" + b"\0\0\0\x01x"),
            (frames.DRAINED, 7, b""), (frames.RECEIVED, 1 << 31, b"x" * 70_000), (frames.CLOSED, 7, b"")]
    stream = b"".join(frames.frame(*each) for each in sent)
    for cut in (1, 2, 5, 8, 9, 10, 13, 4096, len(stream)):
        reader = FrameReader()
        received = []
        for start in range(0, len(stream), cut):
            received += reader.feed(stream[start:start + cut])
        assert received == sent, cut


def test_a_partial_frame_waits_for_the_rest() -> None:
    reader = FrameReader()
    whole = frames.frame(frames.SEND, 3, b"OK")
    assert reader.feed(whole[:-1]) == []
    assert reader.feed(whole[-1:] + whole[:4]) == [(frames.SEND, 3, b"OK")]
    assert reader.feed(whole[4:]) == [(frames.SEND, 3, b"OK")]


def test_a_length_beyond_the_bound_is_refused() -> None:
    reader = FrameReader(max_payload=10)
    with pytest.raises(FrameError):
        reader.feed(frames.frame(frames.RECEIVED, 1, b"x" * 11))


def test_payload_helpers_round_trip() -> None:
    assert frames.read_count(frames.count_payload(5 << 33)) == 5 << 33
    assert frames.read_timeout(frames.timeout_payload(2.5)) == 2.5
    assert frames.read_timeout(frames.timeout_payload(-1)) == 0
