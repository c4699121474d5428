"""Frames and commands as bytes: byte-exact layouts, round trips, and the frame decoder fed any way."""

from __future__ import annotations

import struct

import pytest

from nsqclient.protocol.frames import (
    CLOSE_WAIT,
    FRAME_TYPE_ERROR,
    FRAME_TYPE_MESSAGE,
    FRAME_TYPE_RESPONSE,
    HEARTBEAT,
    MAGIC_V2,
    MESSAGE_HEADER_LENGTH,
    MSG_ID_LENGTH,
    OK,
    Frame,
    FrameDecoder,
    Message,
    decode_message,
    encode_command,
    encode_frame,
    encode_message_frame,
    encode_mpub,
)
from shared.protocol.commands import FIN_RUN, CommandParser

MSG_ID = b"0a1b2c3d4e5f6789"
TIMESTAMP = 1_700_000_000_123_456_789


def test_constants_are_nsqs() -> None:
    assert MAGIC_V2 == b"  V2"
    assert (FRAME_TYPE_RESPONSE, FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE) == (0, 1, 2)
    assert (OK, CLOSE_WAIT, HEARTBEAT) == (b"OK", b"CLOSE_WAIT", b"_heartbeat_")
    assert MSG_ID_LENGTH == 16
    assert MESSAGE_HEADER_LENGTH == 26


@pytest.mark.parametrize(("frame_type", "data", "expected"), [
    (FRAME_TYPE_RESPONSE, b"OK", b"\x00\x00\x00\x06\x00\x00\x00\x00OK"),
    (FRAME_TYPE_RESPONSE, b"_heartbeat_", b"\x00\x00\x00\x0f\x00\x00\x00\x00_heartbeat_"),
    (FRAME_TYPE_ERROR, b"E_INVALID invalid command X",
     b"\x00\x00\x00\x1f\x00\x00\x00\x01E_INVALID invalid command X"),
    (FRAME_TYPE_RESPONSE, b"", b"\x00\x00\x00\x04\x00\x00\x00\x00"),
    (FRAME_TYPE_MESSAGE, b"m" * 300, b"\x00\x00\x01\x30\x00\x00\x00\x02" + b"m" * 300),
])
def test_encode_frame_layout(frame_type: int, data: bytes, expected: bytes) -> None:
    assert encode_frame(frame_type, data) == expected


def test_encode_message_frame_layout() -> None:
    frame = encode_message_frame(MSG_ID, b"hello", TIMESTAMP, 3)
    expected = (
        struct.pack(">i", 4 + 8 + 2 + 16 + 5)   # size: frame type, timestamp, attempts, ID, body
        + b"\x00\x00\x00\x02"                     # frame type: message
        + struct.pack(">q", TIMESTAMP)           # nanoseconds, big-endian
        + b"\x00\x03"                             # attempts
        + MSG_ID
        + b"hello"
    )
    assert frame == expected
    assert frame[:4] == b"\x00\x00\x00\x23"


def test_encode_message_frame_max_attempts_and_empty_body() -> None:
    frame = encode_message_frame(MSG_ID, b"", 0, 65535)
    assert frame == b"\x00\x00\x00\x1e\x00\x00\x00\x02" + b"\x00" * 8 + b"\xff\xff" + MSG_ID


def test_decode_message_round_trip() -> None:
    frame = encode_message_frame(MSG_ID, b"body \x00\xff", TIMESTAMP, 65535)
    (decoded,) = FrameDecoder().feed(frame)
    assert decoded.frame_type == FRAME_TYPE_MESSAGE
    message = decode_message(decoded.data)
    assert message == Message(MSG_ID, b"body \x00\xff", TIMESTAMP, 65535)
    assert type(message.id) is bytes and type(message.body) is bytes


def test_decode_message_minimum_length() -> None:
    data = struct.pack(">qH", TIMESTAMP, 1) + MSG_ID
    assert decode_message(data) == Message(MSG_ID, b"", TIMESTAMP, 1)
    with pytest.raises(ValueError, match="message too short: 25 < 26"):
        decode_message(data[:-1])
    with pytest.raises(ValueError):
        decode_message(b"")


def test_decode_message_accepts_a_bytearray() -> None:
    data = bytearray(struct.pack(">qH", 5, 2) + MSG_ID + b"x")
    message = decode_message(bytes(data))
    assert message == decode_message(data)
    assert type(decode_message(data).body) is bytes


def test_decode_message_negative_timestamp_is_signed() -> None:
    data = struct.pack(">qH", -1, 0) + MSG_ID
    assert decode_message(data).timestamp == -1


FRAMES = [
    Frame(FRAME_TYPE_RESPONSE, OK),
    Frame(FRAME_TYPE_RESPONSE, b""),
    Frame(FRAME_TYPE_ERROR, b"E_BAD_TOPIC PUB topic name \"a b\" is not valid"),
    Frame(FRAME_TYPE_MESSAGE, struct.pack(">qH", TIMESTAMP, 1) + MSG_ID + b"payload"),
    Frame(FRAME_TYPE_RESPONSE, HEARTBEAT),
    Frame(FRAME_TYPE_MESSAGE, struct.pack(">qH", 0, 9) + MSG_ID + b"x" * 70_000),
]
STREAM = b"".join(encode_frame(frame.frame_type, frame.data) for frame in FRAMES)


def test_frame_decoder_whole() -> None:
    assert FrameDecoder().feed(STREAM) == FRAMES


def test_frame_decoder_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    frames: list[Frame] = []
    for i in range(len(STREAM)):
        got = decoder.feed(STREAM[i:i + 1])
        # a frame comes out on its last byte, not before
        assert len(got) <= 1
        frames += got
    assert frames == FRAMES


@pytest.mark.parametrize("chunk", [2, 7, 8, 9, 4096])
def test_frame_decoder_any_chunks(chunk: int) -> None:
    decoder = FrameDecoder()
    frames = [frame for i in range(0, len(STREAM), chunk) for frame in decoder.feed(STREAM[i:i + chunk])]
    assert frames == FRAMES


def test_frame_decoder_keeps_a_partial_frame() -> None:
    decoder = FrameDecoder()
    ok = encode_frame(FRAME_TYPE_RESPONSE, OK)
    assert decoder.feed(ok + ok[:5]) == [Frame(FRAME_TYPE_RESPONSE, OK)]
    assert decoder.feed(b"") == []
    assert decoder.feed(ok[5:]) == [Frame(FRAME_TYPE_RESPONSE, OK)]
    assert decoder.feed(b"") == []


def test_frame_data_is_bytes() -> None:
    (frame,) = FrameDecoder().feed(bytearray(encode_frame(FRAME_TYPE_RESPONSE, OK)))
    assert type(frame.data) is bytes


@pytest.mark.parametrize(("args", "body", "expected"), [
    ((b"NOP",), None, b"NOP\n"),
    ((b"SUB", b"topic", b"channel"), None, b"SUB topic channel\n"),
    ((b"RDY", b"2500"), None, b"RDY 2500\n"),
    ((b"PUB", b"topic"), b"hello", b"PUB topic\n\x00\x00\x00\x05hello"),
    ((b"DPUB", b"topic", b"1000"), b"x", b"DPUB topic 1000\n\x00\x00\x00\x01x"),
    ((b"IDENTIFY",), b"{}", b"IDENTIFY\n\x00\x00\x00\x02{}"),
    ((b"AUTH",), b"", b"AUTH\n\x00\x00\x00\x00"),
])
def test_encode_command_layout(args: tuple[bytes, ...], body: bytes | None, expected: bytes) -> None:
    assert encode_command(*args, body=body) == expected


def test_encode_mpub_layout() -> None:
    expected = (
        b"MPUB topic\n"
        + b"\x00\x00\x00\x0f"      # body size: count + (4 + 1) + (4 + 2)
        + b"\x00\x00\x00\x02"      # count
        + b"\x00\x00\x00\x01" + b"a"
        + b"\x00\x00\x00\x02" + b"bc"
    )
    assert encode_mpub(b"topic", [b"a", b"bc"]) == expected


def test_encode_mpub_takes_any_iterable() -> None:
    assert encode_mpub(b"t", (body for body in [b"a", b"bc"])) == encode_mpub(b"t", [b"a", b"bc"])


def test_encoded_commands_parse_back() -> None:
    data = (encode_command(b"IDENTIFY", body=b'{"client_id":"x"}') + encode_command(b"SUB", b"t", b"c")
            + encode_command(b"RDY", b"10") + encode_command(b"PUB", b"t", body=b"p")
            + encode_command(b"DPUB", b"t", b"5", body=b"d") + encode_mpub(b"t", [b"m1", b"m2"])
            + encode_command(b"FIN", MSG_ID) + encode_command(b"CLS"))
    parser = CommandParser(max_msg_size=100, max_body_size=1000)
    commands = parser.feed(data) + parser.release_held()  # what follows the IDENTIFY is plain V2
    assert [(c.name, c.args, c.body, c.messages) for c in commands] == [
        (b"IDENTIFY", [], b'{"client_id":"x"}', None),
        (b"SUB", [b"t", b"c"], b"", None),
        (b"RDY", [b"10"], b"", None),
        (b"PUB", [b"t"], b"p", None),
        (b"DPUB", [b"t", b"5"], b"d", None),
        (b"MPUB", [b"t"], b"", [b"m1", b"m2"]),
        (FIN_RUN, [MSG_ID], b"", None),  # FINs come out as runs
        (b"CLS", [], b"", None),
    ]
    assert all(c.error is None for c in commands)


@pytest.mark.parametrize("size", [-4, -1, 0, 3])
def test_a_frame_size_no_frame_can_have_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match=f"invalid frame size {size}"):
        FrameDecoder().feed(struct.pack(">ii", size, FRAME_TYPE_RESPONSE) + b"OK")
