from __future__ import annotations

import struct

import pytest

from shared.protocol.lookup_v1 import LookupCommandParser, encode_response

BODY = b'{"broadcast_address":"h","tcp_port":1,"http_port":2,"version":"1.3.0"}'
STREAM = b"PING\n  REGISTER t c \r\nIDENTIFY\n" + struct.pack(">i", len(BODY)) + BODY + b"UNREGISTER t\n"
EXPECTED = [(b"PING", [], b""), (b"REGISTER", [b"t", b"c"], b""), (b"IDENTIFY", [], BODY),
            (b"UNREGISTER", [b"t"], b"")]


def parse(chunks: list[bytes]) -> list[tuple[bytes, list[bytes], bytes]]:
    parser = LookupCommandParser()
    return [(c.name, c.args, c.body) for chunk in chunks for c in parser.feed(chunk)]


def test_whole_and_byte_at_a_time_agree() -> None:
    assert parse([STREAM]) == EXPECTED
    assert parse([STREAM[i:i + 1] for i in range(len(STREAM))]) == EXPECTED


@pytest.mark.parametrize("size", [0, -1, (1 << 20) + 1])
def test_identify_body_size_out_of_bounds_is_an_error_and_stops(size: int) -> None:
    parser = LookupCommandParser()
    commands = parser.feed(b"IDENTIFY\n" + struct.pack(">i", size) + b"PING\n")
    assert len(commands) == 1 and commands[0].error is not None
    assert (commands[0].error.code, commands[0].error.description) == ("E_BAD_BODY",
                                                                         f"IDENTIFY invalid body size {size}")
    assert parser.feed(b"PING\n") == []


def test_an_overlong_line_is_an_error() -> None:
    commands = LookupCommandParser().feed(b"x" * 20000)
    assert commands[0].error is not None and commands[0].error.code == "E_INVALID"


def test_responses_have_a_size_and_no_frame_type() -> None:
    assert encode_response(b"OK") == b"\x00\x00\x00\x02OK"
