"""lookupd's protocol V1 without I/O: commands parsed from bytes, responses, and the TLS negotiation's rules."""

from __future__ import annotations

import struct

import pytest

from shared.protocol.errors import FatalClientError
from shared.protocol.lookup_v1 import LookupCommandParser, encode_response, lookupd_agreed, lookupd_upgrades

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


def test_buffered_counts_what_is_not_a_whole_command_yet() -> None:
    parser = LookupCommandParser(b"  V1")
    assert [command.name for command in parser.feed(b"  V1PING\nREGI")] == [b"PING"]
    assert parser.buffered == 4
    parser.feed(b"STER t\n")
    assert parser.buffered == 0


@pytest.mark.parametrize("requested, offered, required, upgrades", [
    (False, False, False, False),  # NSQ's nsqd and lookupd: plain, as ever
    (False, True, False, False),  # NSQ's nsqd at a lookupd that offers TLS: plain
    (True, False, False, False),  # lookupd answers without tls_v1: nsqd will not go on
    (True, True, False, True),
    (True, True, True, True),
])
def test_lookupd_upgrades_when_asked_and_able(requested: bool, offered: bool, required: bool, upgrades: bool) -> None:
    assert lookupd_upgrades(requested, offered, required) is upgrades


def test_a_lookupd_requiring_tls_refuses_an_identify_that_does_not_ask_for_it() -> None:
    with pytest.raises(FatalClientError) as info:
        lookupd_upgrades(requested=False, offered=True, required=True)
    assert info.value.code == "E_INVALID"
    assert "cannot IDENTIFY without TLS" in info.value.description


@pytest.mark.parametrize("answer, agreed", [
    ({"tcp_port": 4160, "tls_v1": True}, True),
    ({"tcp_port": 4160}, False),  # NSQ's lookupd
    ({"tls_v1": False}, False),
    ({"tls_v1": "true"}, False),  # only JSON's true agrees
])
def test_nsqd_reads_agreement_only_from_a_true_tls_v1(answer: dict[str, object], agreed: bool) -> None:
    assert lookupd_agreed(answer) is agreed
