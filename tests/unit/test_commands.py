"""CommandParser and split_mpub: bytes in, commands out, the way h11 tests its parser.

Every input of the tables is fed whole, then one byte at a time, then followed by the start of another command,
and must give the same commands each way. Limits are small (messages 100 bytes, bodies 1000) so boundaries are
cheap to reach.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable

import pytest
from hypothesis import given, settings, strategies as st

from nsqclient.protocol.frames import encode_command, encode_mpub
from shared.protocol.commands import FIN_RUN, MAX_LINE_LENGTH, Command, CommandParser, split_mpub
from shared.protocol.errors import FatalClientError

MAX_MSG = 100
MAX_BODY = 1000
# NSQ's bound on an MPUB's count: 4 bytes of count, then at least 5 bytes a message
MAX_MPUB_COUNT = (MAX_BODY - 4) // 5

MSG_ID = b"0123456789abcdef"

Shape = tuple[bytes, list[bytes], bytes, list[bytes] | None, tuple[str, str] | None]


def size(n: int) -> bytes:
    return struct.pack(">i", n)


def shape(command: Command) -> Shape:
    """A command as plain values: FatalClientError instances do not compare equal, their code and text do."""
    error = None if command.error is None else (command.error.code, command.error.description)
    return command.name, command.args, command.body, command.messages, error


def cmd(name: bytes, *args: bytes, body: bytes = b"", messages: list[bytes] | None = None) -> Shape:
    return name, list(args), body, messages, None


def err(name: bytes, args: list[bytes], code: str, description: str) -> Shape:
    return name, args, b"", None, (code, description)


def parser() -> CommandParser:
    return CommandParser(max_msg_size=MAX_MSG, max_body_size=MAX_BODY)


def parsed(p: CommandParser, chunk: bytes) -> list[Command]:
    """What ``chunk`` completes, the bytes held after each IDENTIFY released as plain V2 (no upgrade)."""
    commands = p.feed(chunk)
    while released := p.release_held():
        commands += released
    return commands


def feed(chunks: Iterable[bytes], p: CommandParser | None = None) -> list[Shape]:
    """The commands as shapes, a run of FINs (FIN_RUN) counted as the FIN commands it stands for."""
    p = p or parser()
    shapes: list[Shape] = []
    for chunk in chunks:
        for command in parsed(p, chunk):
            if command.name == FIN_RUN:
                shapes += [cmd(b"FIN", msg_id) for msg_id in command.args]
            else:
                shapes.append(shape(command))
    return shapes


def whole(data: bytes) -> list[Shape]:
    return feed([data])


def bytewise(data: bytes) -> list[Shape]:
    return feed(data[i:i + 1] for i in range(len(data)))


def mpub_body(*messages: bytes, count: int | None = None) -> bytes:
    """``[count]([size][message])*``: the part of an MPUB after its body size."""
    count = len(messages) if count is None else count
    return size(count) + b"".join(size(len(m)) + m for m in messages)


def mpub(topic: bytes, *messages: bytes, declared: int | None = None, count: int | None = None) -> bytes:
    body = mpub_body(*messages, count=count)
    return b"MPUB " + topic + b"\n" + size(len(body) if declared is None else declared) + body


# commands sent right after an input, cut at (first bytes, rest): the input's commands must come out unchanged
# with the first bytes, and the trailer itself once the rest arrives
TRAILERS: list[tuple[bytes, bytes, Shape]] = [
    (b"N", b"OP\n", cmd(b"NOP")),
    (b"NOP", b"\n", cmd(b"NOP")),
    (b"PUB t\n", size(5) + b"hello", cmd(b"PUB", b"t", body=b"hello")),
    (b"PUB t\n\x00\x00", b"\x00\x05hello", cmd(b"PUB", b"t", body=b"hello")),
    (b"PUB t\n" + size(5) + b"hel", b"lo", cmd(b"PUB", b"t", body=b"hello")),
    (b"IDENTIFY\n" + size(2) + b"{", b"}", cmd(b"IDENTIFY", body=b"{}")),
    (b"MPUB t\n" + size(14) + size(2) + size(1) + b"a", size(1) + b"b", cmd(b"MPUB", b"t", messages=[b"a", b"b"])),
    (b"MPUB t\n" + size(14), size(2) + size(1) + b"a" + size(1) + b"b", cmd(b"MPUB", b"t", messages=[b"a", b"b"])),
    (b"DPUB t 10\n", size(1) + b"x", cmd(b"DPUB", b"t", b"10", body=b"x")),
]

VALID: list[tuple[bytes, list[Shape]]] = [
    # line commands
    (b"NOP\n", [cmd(b"NOP")]),
    (b"NOP\r\n", [cmd(b"NOP")]),
    (b"CLS\n", [cmd(b"CLS")]),
    (b"SUB topic channel\n", [cmd(b"SUB", b"topic", b"channel")]),
    (b"SUB topic channel#ephemeral\r\n", [cmd(b"SUB", b"topic", b"channel#ephemeral")]),
    (b"RDY 100\n", [cmd(b"RDY", b"100")]),
    (b"RDY\n", [cmd(b"RDY")]),
    (b"FIN " + MSG_ID + b"\n", [cmd(b"FIN", MSG_ID)]),
    (b"FIN " + MSG_ID + b"\r\n", [cmd(b"FIN", MSG_ID)]),
    (b"FIN 0123456789abcde\n", [cmd(b"FIN", b"0123456789abcde")]),
    (b"FIN 01234567 89abcdef\n", [cmd(b"FIN", b"01234567", b"89abcdef")]),
    (b"FIN " + MSG_ID + b" x\n", [cmd(b"FIN", MSG_ID, b"x")]),
    (b"REQ " + MSG_ID + b" 1000\n", [cmd(b"REQ", MSG_ID, b"1000")]),
    (b"REQ " + MSG_ID + b" 0\r\n", [cmd(b"REQ", MSG_ID, b"0")]),
    (b"TOUCH " + MSG_ID + b"\n", [cmd(b"TOUCH", MSG_ID)]),
    # parameters are split on single spaces, as Go's bytes.Split does
    (b"SUB  topic channel\n", [cmd(b"SUB", b"", b"topic", b"channel")]),
    (b"NOP \n", [cmd(b"NOP", b"")]),
    # only one \r is stripped, and only at the end
    (b"NOP\r\r\n", [cmd(b"NOP\r")]),
    (b"SUB t\rc\n", [cmd(b"SUB", b"t\rc")]),
    # unknown commands and empty lines are line commands; the handler rejects them with E_INVALID
    (b"FOO bar baz\n", [cmd(b"FOO", b"bar", b"baz")]),
    (b"nop\n", [cmd(b"nop")]),
    (b"\n", [cmd(b"")]),
    (b"\r\n", [cmd(b"")]),
    # a line of exactly 16 KiB including its \n fits NSQ's read buffer
    (b"X" * (MAX_LINE_LENGTH - 1) + b"\n", [cmd(b"X" * (MAX_LINE_LENGTH - 1))]),
    (b"X" * (MAX_LINE_LENGTH - 2) + b"\r\n", [cmd(b"X" * (MAX_LINE_LENGTH - 2))]),
    # body commands
    (b"IDENTIFY\n" + size(2) + b"{}", [cmd(b"IDENTIFY", body=b"{}")]),
    (b"IDENTIFY\r\n" + size(2) + b"{}", [cmd(b"IDENTIFY", body=b"{}")]),
    (b"IDENTIFY extra\n" + size(2) + b"{}", [cmd(b"IDENTIFY", b"extra", body=b"{}")]),
    (b"IDENTIFY\n" + size(MAX_BODY) + b"x" * MAX_BODY, [cmd(b"IDENTIFY", body=b"x" * MAX_BODY)]),
    (b"AUTH\n" + size(6) + b"secret", [cmd(b"AUTH", body=b"secret")]),
    (b"AUTH\r\n" + size(1) + b"s", [cmd(b"AUTH", body=b"s")]),
    (b"PUB topic\n" + size(5) + b"hello", [cmd(b"PUB", b"topic", body=b"hello")]),
    (b"PUB topic\r\n" + size(5) + b"hello", [cmd(b"PUB", b"topic", body=b"hello")]),
    (b"PUB topic\n" + size(1) + b"\n", [cmd(b"PUB", b"topic", body=b"\n")]),
    # a body is bytes, newlines and all; it is never split into lines
    (b"PUB t\n" + size(9) + b"NOP\nCLS\n\x00", [cmd(b"PUB", b"t", body=b"NOP\nCLS\n\x00")]),
    (b"PUB t\n" + size(MAX_MSG) + b"m" * MAX_MSG, [cmd(b"PUB", b"t", body=b"m" * MAX_MSG)]),
    (b"DPUB topic 1000\n" + size(3) + b"abc", [cmd(b"DPUB", b"topic", b"1000", body=b"abc")]),
    (b"DPUB topic 0\r\n" + size(1) + b"x", [cmd(b"DPUB", b"topic", b"0", body=b"x")]),
    (mpub(b"topic", b"a", b"bc", b"def"), [cmd(b"MPUB", b"topic", messages=[b"a", b"bc", b"def"])]),
    (mpub(b"topic", b"one"), [cmd(b"MPUB", b"topic", messages=[b"one"])]),
    (mpub(b"t", b"m" * MAX_MSG), [cmd(b"MPUB", b"t", messages=[b"m" * MAX_MSG])]),
    (mpub(b"t", *[b"x"] * MAX_MPUB_COUNT), [cmd(b"MPUB", b"t", messages=[b"x"] * MAX_MPUB_COUNT)]),
    (b"MPUB t\r\n" + size(9) + mpub_body(b"x"), [cmd(b"MPUB", b"t", messages=[b"x"])]),
    # NSQ reads MPUB's messages from the stream: a declared size that disagrees with them changes nothing
    (mpub(b"t", b"ab", b"c", declared=MAX_BODY), [cmd(b"MPUB", b"t", messages=[b"ab", b"c"])]),
    (mpub(b"t", b"ab", b"c", declared=1), [cmd(b"MPUB", b"t", messages=[b"ab", b"c"])]),
    # wrong arity: the handler rejects these before NSQ would read a body, so none is read
    (b"AUTH x\n", [cmd(b"AUTH", b"x")]),
    (b"PUB\n", [cmd(b"PUB")]),
    (b"DPUB topic\n", [cmd(b"DPUB", b"topic")]),
    (b"MPUB\n", [cmd(b"MPUB")]),
    # several commands at once
    (b"NOP\nRDY 1\nFIN " + MSG_ID + b"\n", [cmd(b"NOP"), cmd(b"RDY", b"1"), cmd(b"FIN", MSG_ID)]),
    (b"AUTH x\nNOP\n", [cmd(b"AUTH", b"x"), cmd(b"NOP")]),
    (b"PUB\n" + b"NOP\n", [cmd(b"PUB"), cmd(b"NOP")]),
    (b"IDENTIFY\n" + size(2) + b"{}" + b"SUB t c\n" + b"RDY 10\n",
     [cmd(b"IDENTIFY", body=b"{}"), cmd(b"SUB", b"t", b"c"), cmd(b"RDY", b"10")]),
    (b"PUB a\n" + size(1) + b"1" + b"DPUB b 5\n" + size(1) + b"2" + mpub(b"c", b"3", b"4") + b"NOP\n",
     [cmd(b"PUB", b"a", body=b"1"), cmd(b"DPUB", b"b", b"5", body=b"2"),
      cmd(b"MPUB", b"c", messages=[b"3", b"4"]), cmd(b"NOP")]),
    (mpub(b"t", b"x", declared=MAX_BODY) + b"NOP\n" + mpub(b"u", b"y", declared=4),
     [cmd(b"MPUB", b"t", messages=[b"x"]), cmd(b"NOP"), cmd(b"MPUB", b"u", messages=[b"y"])]),
]

# inputs ending in an error command: it is the last command to come out
ERRORS: list[tuple[bytes, list[Shape]]] = [
    (b"IDENTIFY\n" + size(MAX_BODY + 1),
     [err(b"IDENTIFY", [], "E_BAD_BODY", f"IDENTIFY body too big {MAX_BODY + 1} > {MAX_BODY}")]),
    (b"IDENTIFY\n" + size(0), [err(b"IDENTIFY", [], "E_BAD_BODY", "IDENTIFY invalid body size 0")]),
    (b"IDENTIFY\n" + size(-1), [err(b"IDENTIFY", [], "E_BAD_BODY", "IDENTIFY invalid body size -1")]),
    (b"AUTH\n" + size(MAX_BODY + 1),
     [err(b"AUTH", [], "E_BAD_BODY", f"AUTH body too big {MAX_BODY + 1} > {MAX_BODY}")]),
    (b"AUTH\n" + size(0), [err(b"AUTH", [], "E_BAD_BODY", "AUTH invalid body size 0")]),
    (b"AUTH\r\n" + size(-7), [err(b"AUTH", [], "E_BAD_BODY", "AUTH invalid body size -7")]),
    (b"PUB t\n" + size(0), [err(b"PUB", [b"t"], "E_BAD_MESSAGE", "PUB invalid message body size 0")]),
    (b"PUB t\n" + size(-1), [err(b"PUB", [b"t"], "E_BAD_MESSAGE", "PUB invalid message body size -1")]),
    (b"PUB t\n" + size(MAX_MSG + 1),
     [err(b"PUB", [b"t"], "E_BAD_MESSAGE", f"PUB message too big {MAX_MSG + 1} > {MAX_MSG}")]),
    (b"DPUB t 10\n" + size(0), [err(b"DPUB", [b"t", b"10"], "E_BAD_MESSAGE", "DPUB invalid message body size 0")]),
    (b"DPUB t 10\n" + size(-2),
     [err(b"DPUB", [b"t", b"10"], "E_BAD_MESSAGE", "DPUB invalid message body size -2")]),
    (b"DPUB t 10\n" + size(MAX_MSG + 1),
     [err(b"DPUB", [b"t", b"10"], "E_BAD_MESSAGE", f"DPUB message too big {MAX_MSG + 1} > {MAX_MSG}")]),
    (b"MPUB t\n" + size(0), [err(b"MPUB", [b"t"], "E_BAD_BODY", "MPUB invalid body size 0")]),
    (b"MPUB t\n" + size(-1), [err(b"MPUB", [b"t"], "E_BAD_BODY", "MPUB invalid body size -1")]),
    (b"MPUB t\n" + size(MAX_BODY + 1),
     [err(b"MPUB", [b"t"], "E_BAD_BODY", f"MPUB body too big {MAX_BODY + 1} > {MAX_BODY}")]),
    (b"MPUB t\n" + size(8) + size(0), [err(b"MPUB", [b"t"], "E_BAD_BODY", "MPUB invalid message count 0")]),
    (b"MPUB t\n" + size(8) + size(-3), [err(b"MPUB", [b"t"], "E_BAD_BODY", "MPUB invalid message count -3")]),
    (b"MPUB t\n" + size(8) + size(MAX_MPUB_COUNT + 1),
     [err(b"MPUB", [b"t"], "E_BAD_BODY", f"MPUB invalid message count {MAX_MPUB_COUNT + 1}")]),
    (b"MPUB t\n" + size(20) + size(2) + size(0),
     [err(b"MPUB", [b"t"], "E_BAD_MESSAGE", "MPUB invalid message(0) body size 0")]),
    (b"MPUB t\n" + size(20) + size(2) + size(1) + b"a" + size(-1),
     [err(b"MPUB", [b"t"], "E_BAD_MESSAGE", "MPUB invalid message(1) body size -1")]),
    (b"MPUB t\n" + size(20) + size(3) + size(1) + b"a" + size(1) + b"b" + size(MAX_MSG + 1),
     [err(b"MPUB", [b"t"], "E_BAD_MESSAGE", f"MPUB message too big {MAX_MSG + 1} > {MAX_MSG}")]),
    # a line that does not fit NSQ's 16 KiB read buffer
    (b"X" * MAX_LINE_LENGTH,
     [err(b"", [], "E_INVALID", f"command line exceeds {MAX_LINE_LENGTH} bytes")]),
    (b"X" * (MAX_LINE_LENGTH - 1) + b"\r",
     [err(b"", [], "E_INVALID", f"command line exceeds {MAX_LINE_LENGTH} bytes")]),
    # commands before the error still come out
    (b"NOP\nPUB t\n" + size(1) + b"x" + b"PUB t\n" + size(0),
     [cmd(b"NOP"), cmd(b"PUB", b"t", body=b"x"),
      err(b"PUB", [b"t"], "E_BAD_MESSAGE", "PUB invalid message body size 0")]),
    (b"NOP\n" + b"Y" * MAX_LINE_LENGTH,
     [cmd(b"NOP"), err(b"", [], "E_INVALID", f"command line exceeds {MAX_LINE_LENGTH} bytes")]),
]


def ids(table: list[tuple[bytes, list[Shape]]]) -> list[str]:
    return [repr(data[:40]) for data, _ in table]


@pytest.mark.parametrize(("data", "expected"), VALID, ids=ids(VALID))
def test_valid_whole(data: bytes, expected: list[Shape]) -> None:
    assert whole(data) == expected


@pytest.mark.parametrize(("data", "expected"), VALID, ids=ids(VALID))
def test_valid_byte_at_a_time(data: bytes, expected: list[Shape]) -> None:
    assert bytewise(data) == expected


@pytest.mark.parametrize(("first", "rest", "trailer"), TRAILERS, ids=[repr(t[0]) for t in TRAILERS])
@pytest.mark.parametrize(("data", "expected"), VALID, ids=ids(VALID))
def test_valid_with_trailing_partial_command(data: bytes, expected: list[Shape], first: bytes, rest: bytes,
                                             trailer: Shape) -> None:
    p = parser()
    assert feed([data + first], p) == expected
    # the trailer waits until it is complete
    assert p.feed(b"") == []
    assert feed([rest], p) == [trailer]


@pytest.mark.parametrize(("data", "expected"), ERRORS, ids=ids(ERRORS))
def test_error_whole(data: bytes, expected: list[Shape]) -> None:
    assert whole(data) == expected


@pytest.mark.parametrize(("data", "expected"), ERRORS, ids=ids(ERRORS))
def test_error_byte_at_a_time(data: bytes, expected: list[Shape]) -> None:
    assert bytewise(data) == expected


@pytest.mark.parametrize(("data", "expected"), ERRORS, ids=ids(ERRORS))
def test_error_comes_out_on_the_last_byte_that_shows_it(data: bytes, expected: list[Shape]) -> None:
    p = parser()
    for i in range(len(data) - 1):
        p.feed(data[i:i + 1])
    assert [shape(c) for c in p.feed(data[-1:])][-1] == expected[-1]


@pytest.mark.parametrize(("data", "expected"), ERRORS, ids=ids(ERRORS))
def test_parser_stops_after_an_error(data: bytes, expected: list[Shape]) -> None:
    p = parser()
    # what follows the error in the same read is not parsed, nor is anything fed later
    assert feed([data + b"NOP\n" * 3], p) == expected
    assert p.feed(b"NOP\n") == []
    assert p.feed(b"PUB t\n" + size(1) + b"x") == []


@pytest.mark.parametrize(("data", "expected"), ERRORS, ids=ids(ERRORS))
def test_error_is_a_fatal_client_error(data: bytes, expected: list[Shape]) -> None:
    error = parser().feed(data)[-1].error
    assert isinstance(error, FatalClientError)
    assert error.frame_text == f"{error.code} {error.description}".encode()


@pytest.mark.parametrize(("prefix", "code"), [
    (b"IDENTIFY\n" + size(2**31 - 1), "E_BAD_BODY"),
    (b"AUTH\n" + size(2**31 - 1), "E_BAD_BODY"),
    (b"PUB t\n" + size(2**31 - 1), "E_BAD_MESSAGE"),
    (b"DPUB t 1\n" + size(2**31 - 1), "E_BAD_MESSAGE"),
    (b"MPUB t\n" + size(2**31 - 1), "E_BAD_BODY"),
    (b"MPUB t\n" + size(MAX_BODY) + size(2**31 - 1), "E_BAD_BODY"),
    # the first message's size is out of bounds although the declared body has not arrived
    (b"MPUB t\n" + size(MAX_BODY) + size(2) + size(2**31 - 1), "E_BAD_MESSAGE"),
    (b"MPUB t\n" + size(MAX_BODY) + size(2) + size(1) + b"a" + size(MAX_MSG + 1), "E_BAD_MESSAGE"),
])
def test_limits_are_enforced_before_the_body_is_buffered(prefix: bytes, code: str) -> None:
    # no body follows: the size alone decides
    p = parser()
    assert p.feed(prefix[:-1]) == []
    (command,) = p.feed(prefix[-1:])
    assert command.error is not None and command.error.code == code


def test_line_limit_is_enforced_before_a_newline_arrives() -> None:
    p = parser()
    assert p.feed(b"X" * (MAX_LINE_LENGTH - 1)) == []
    (command,) = p.feed(b"X")
    assert command.error is not None
    assert (command.error.code, command.error.description) == \
        ("E_INVALID", f"command line exceeds {MAX_LINE_LENGTH} bytes")


def test_line_limit_applies_to_each_line_not_the_buffer() -> None:
    lines = b"".join(b"SUB " + b"t" * 1000 + b" c\n" for _ in range(40))
    assert len(lines) > 2 * MAX_LINE_LENGTH
    assert len(whole(lines)) == 40


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 333])
def test_mpub_split_across_many_feeds(chunk: int) -> None:
    messages = [bytes([65 + i % 26]) * (1 + i % MAX_MSG) for i in range(150)]
    data = encode_mpub(b"topic", messages) + b"NOP\n"
    p = CommandParser(max_msg_size=MAX_MSG, max_body_size=100_000)
    out: list[Command] = []
    for i in range(0, len(data), chunk):
        got = p.feed(data[i:i + chunk])
        # nothing comes out before the last message is complete
        assert got == [] or i + chunk >= len(data) - 4
        out += got
    assert [c.name for c in out] == [b"MPUB", b"NOP"]
    assert out[0].messages == messages
    assert all(type(m) is bytes for m in out[0].messages)


def test_mpub_with_declared_size_too_large_completes_when_its_messages_have_arrived() -> None:
    # a client that waits for the answer must get it: NSQ answers once it has read the messages
    p = parser()
    assert feed([mpub(b"t", b"ab", b"c", declared=MAX_BODY)], p) == [cmd(b"MPUB", b"t", messages=[b"ab", b"c"])]
    assert feed([b"NOP\n"], p) == [cmd(b"NOP")]


def test_mpub_with_declared_size_too_small_reads_every_message() -> None:
    data = mpub(b"t", b"x" * 50, b"y" * 50, declared=4)
    assert whole(data + b"NOP\n") == [cmd(b"MPUB", b"t", messages=[b"x" * 50, b"y" * 50]), cmd(b"NOP")]


def test_mpub_declared_size_is_checked_against_the_maximum_even_if_the_messages_are_small() -> None:
    data = mpub(b"t", b"a", declared=MAX_BODY + 1)
    assert whole(data) == [err(b"MPUB", [b"t"], "E_BAD_BODY", f"MPUB body too big {MAX_BODY + 1} > {MAX_BODY}")]


def test_mpub_bad_message_after_good_ones_rejects_the_whole_mpub() -> None:
    data = b"MPUB t\n" + size(MAX_BODY) + size(3) + size(1) + b"a" + size(1) + b"b" + size(0)
    for got in (whole(data), bytewise(data), feed([data[:15], data[15:]])):
        assert got == [err(b"MPUB", [b"t"], "E_BAD_MESSAGE", "MPUB invalid message(2) body size 0")]


def test_partial_mpub_across_feeds_then_error() -> None:
    p = parser()
    data = b"MPUB t\n" + size(MAX_BODY) + size(3) + size(1) + b"a"
    assert p.feed(data) == []
    assert p.feed(size(2) + b"b") == []
    assert feed([b"b" + size(MAX_MSG + 1)], p) == \
        [err(b"MPUB", [b"t"], "E_BAD_MESSAGE", f"MPUB message too big {MAX_MSG + 1} > {MAX_MSG}")]
    assert p.feed(b"NOP\n") == []


def test_commands_keep_coming_after_a_partial_feed_ends_on_a_message_boundary() -> None:
    p = parser()
    head = b"MPUB t\n" + size(20) + size(2) + size(1) + b"a"
    assert p.feed(head) == []
    assert feed([size(1) + b"b" + b"NOP\n"], p) == [cmd(b"MPUB", b"t", messages=[b"a", b"b"]), cmd(b"NOP")]


IDENTIFY = encode_command(b"IDENTIFY", body=b"{}")


def test_bytes_after_an_identify_are_held_however_they_arrive_until_taken() -> None:
    after = b"\xff\x06\x00\x00sNaPpY NOP\n"  # what a client sends once it compresses
    p = parser()
    assert [shape(c) for c in p.feed(IDENTIFY + after[:5])] == [cmd(b"IDENTIFY", body=b"{}")]
    for i in range(5, len(after)):
        assert p.feed(after[i:i + 1]) == []
    assert p.take_held() == after
    assert p.take_held() == b"" and p.release_held() == []
    assert feed([b"NOP\n"], p) == [cmd(b"NOP")]


def test_bytes_held_after_an_identify_that_upgraded_nothing_are_parsed_as_they_are() -> None:
    p = parser()
    assert [shape(c) for c in p.feed(IDENTIFY + b"NOP\nPU")] == [cmd(b"IDENTIFY", body=b"{}")]
    assert [shape(c) for c in p.release_held()] == [cmd(b"NOP")]
    assert feed([b"B t\n" + size(1) + b"x"], p) == [cmd(b"PUB", b"t", body=b"x")]
    assert p.take_held() == b""


def test_feeding_nothing_gives_nothing() -> None:
    p = parser()
    assert p.feed(b"") == []
    assert p.feed(b"NO") == []
    assert p.feed(b"") == []
    assert feed([b"P\n"], p) == [cmd(b"NOP")]


def test_body_is_bytes_even_when_assembled_from_pieces() -> None:
    p = parser()
    p.feed(b"PUB t\n" + size(4) + b"ab")
    (command,) = p.feed(b"cd")
    assert type(command.body) is bytes and command.body == b"abcd"


def test_limits_come_from_the_constructor() -> None:
    p = CommandParser(max_msg_size=3, max_body_size=10)
    assert feed([b"PUB t\n" + size(3) + b"abc" + b"PUB t\n" + size(4)], p) == [
        cmd(b"PUB", b"t", body=b"abc"), err(b"PUB", [b"t"], "E_BAD_MESSAGE", "PUB message too big 4 > 3")]
    assert whole(b"IDENTIFY\n" + size(1000) + b"x" * 1000) == [cmd(b"IDENTIFY", body=b"x" * 1000)]
    p = CommandParser(max_msg_size=3, max_body_size=10)
    assert feed([b"IDENTIFY\n" + size(11)], p) == [
        err(b"IDENTIFY", [], "E_BAD_BODY", "IDENTIFY body too big 11 > 10")]


def test_many_commands_in_one_read() -> None:
    data = b"".join(b"FIN %016d\n" % i for i in range(1000))
    got = whole(data)
    assert len(got) == 1000
    assert got[999] == cmd(b"FIN", b"%016d" % 999)


def test_a_run_of_fins_is_one_command() -> None:
    data = b"NOP\n" + b"".join(b"FIN %016d\n" % i for i in range(3)) + b"RDY 5\n" + b"FIN %016d\n" % 3
    commands = parser().feed(data)
    assert [(c.name, len(c.args)) for c in commands] == [(b"NOP", 0), (FIN_RUN, 3), (b"RDY", 1), (FIN_RUN, 1)]
    assert commands[1].args == [b"%016d" % i for i in range(3)]


@pytest.mark.parametrize("odd_line", [b"FIN 01234567 9abcdef\n", b"FIN 0123456789abcde\r\n"[:-2] + b"\r\n",
                                      b"FIN 0123456789\nNOP\n"])
def test_a_fin_run_stops_short_of_lines_that_are_not_plain_fins(odd_line: bytes) -> None:
    data = b"FIN %016d\n" % 1 + odd_line
    assert whole(data) == bytewise(data)


# -- arbitrary streams, arbitrary reads ---------------------------------------------------------------------

_topic = st.binary(min_size=1, max_size=8).map(lambda b: bytes(c if c not in b" \r\n" else 95 for c in b))
_body = st.binary(min_size=1, max_size=MAX_MSG)


@st.composite
def _command(draw: Any) -> tuple[bytes, Shape]:
    kind = draw(st.sampled_from(["line", "pub", "dpub", "mpub", "identify"]))
    topic = draw(_topic)
    if kind == "line":
        name = draw(st.sampled_from([b"NOP", b"RDY", b"FIN", b"CLS", b"SUB", b"XYZ"]))
        args = draw(st.lists(_topic, max_size=3))
        crlf = draw(st.booleans())
        return b" ".join([name, *args]) + (b"\r\n" if crlf else b"\n"), cmd(name, *args)
    if kind in ("pub", "identify"):
        body = draw(_body)
        if kind == "pub":
            return encode_command(b"PUB", topic, body=body), cmd(b"PUB", topic, body=body)
        return encode_command(b"IDENTIFY", body=body), cmd(b"IDENTIFY", body=body)
    if kind == "dpub":
        body = draw(_body)
        return encode_command(b"DPUB", topic, b"10", body=body), cmd(b"DPUB", topic, b"10", body=body)
    messages = draw(st.lists(_body, min_size=1, max_size=8))
    return encode_mpub(topic, messages), cmd(b"MPUB", topic, messages=messages)


@settings(max_examples=200, deadline=None)
@given(commands=st.lists(_command(), min_size=1, max_size=10), cuts=st.lists(st.integers(0, 2000), max_size=20))
def test_any_stream_cut_anywhere_gives_the_same_commands(commands: list[tuple[bytes, Shape]],
                                                          cuts: list[int]) -> None:
    data = b"".join(encoded for encoded, _ in commands)
    expected = [command for _, command in commands]
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    chunks = [data[a:b] for a, b in zip(points, points[1:])]
    assert feed(chunks, CommandParser(max_msg_size=MAX_MSG, max_body_size=100_000)) == expected


# -- split_mpub --------------------------------------------------------------------------------------------

def test_split_mpub_returns_messages_and_end() -> None:
    body = mpub_body(b"a", b"bc")
    assert split_mpub(body, 0, MAX_MSG, MAX_BODY) == ([b"a", b"bc"], len(body))
    # from an offset, with bytes after the messages
    assert split_mpub(b"xyz" + body + b"rest", 3, MAX_MSG, MAX_BODY) == ([b"a", b"bc"], 3 + len(body))


def test_split_mpub_says_how_long_the_data_must_get() -> None:
    body = mpub_body(b"a", b"bc")
    # count, size of message 0, message 0, size of message 1, message 1
    needed = {0: 4, 3: 4, 4: 8, 7: 8, 8: 9, 9: 13, 12: 13, 13: 15, 14: 15}
    for length, need in needed.items():
        assert split_mpub(body[:length], 0, MAX_MSG, MAX_BODY) == (None, need)


@pytest.mark.parametrize(("body", "code", "description"), [
    (size(0), "E_BAD_BODY", "MPUB invalid message count 0"),
    (size(-1), "E_BAD_BODY", "MPUB invalid message count -1"),
    (size(MAX_MPUB_COUNT + 1), "E_BAD_BODY", f"MPUB invalid message count {MAX_MPUB_COUNT + 1}"),
    (size(1) + size(0), "E_BAD_MESSAGE", "MPUB invalid message(0) body size 0"),
    (size(2) + size(1) + b"a" + size(-5), "E_BAD_MESSAGE", "MPUB invalid message(1) body size -5"),
    (size(1) + size(MAX_MSG + 1), "E_BAD_MESSAGE", f"MPUB message too big {MAX_MSG + 1} > {MAX_MSG}"),
])
def test_split_mpub_errors(body: bytes, code: str, description: str) -> None:
    with pytest.raises(FatalClientError) as info:
        split_mpub(body, 0, MAX_MSG, MAX_BODY)
    assert (info.value.code, info.value.description) == (code, description)


def test_split_mpub_count_bound_follows_max_body_size() -> None:
    assert split_mpub(mpub_body(*[b"x"] * MAX_MPUB_COUNT), 0, MAX_MSG, MAX_BODY)[0] == [b"x"] * MAX_MPUB_COUNT
    with pytest.raises(FatalClientError):
        split_mpub(size(3), 0, MAX_MSG, max_body_size=18)
    assert split_mpub(mpub_body(b"a", b"b", b"c"), 0, MAX_MSG, max_body_size=19)[0] == [b"a", b"b", b"c"]
