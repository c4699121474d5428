"""Hostile input for the sans-I/O parsers: valid streams, mutations of them, and the properties any input keeps.

The fast property tests (tests/unit/test_fuzz_parsers.py, driven by hypothesis) and the long run (bench/fuzz.py,
driven by a seeded ``random.Random``) both call ``check_v2`` and ``check_lookup``, so they check the same things
and an input either one reports can be replayed by passing it to the same function. Every input, valid or not,
must:

- raise nothing from ``feed`` (an error is a command carrying a ``ProtocolError``), and give nothing after it;
- give the same commands whatever the chunks it is fed in;
- give at most one command per newline, plus one error;
- keep buffered only the command it has not finished, its body within the limit: a size prefix over the limit
  is rejected as soon as it arrives, never waited on;
- finish each ``feed`` within ``cpu_limit`` seconds of CPU (a SIGVTALRM timer, which leaves pytest-timeout's
  SIGALRM alone).
"""

from __future__ import annotations

import json
import random
import signal
import struct
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Protocol, TypeVar

from nsqclient.protocol.frames import encode_command, encode_mpub
from shared.protocol.commands import FIN_RUN, MAX_LINE_LENGTH, Command, CommandParser
from shared.protocol.errors import ProtocolError
from shared.protocol.lookup_v1 import MAX_IDENTIFY_BODY, LookupCommandParser

# small limits so that random sizes reach them often
MAX_MSG = 64
MAX_BODY = 512

# int32 size prefixes around every bound the parsers check; 0xffffffff is "4 GiB", which is -1 as an int32
SIZES = (0, 1, 2, 3, 4, 5, 8, MAX_MSG - 1, MAX_MSG, MAX_MSG + 1, MAX_BODY - 1, MAX_BODY, MAX_BODY + 1,
         (MAX_BODY - 4) // 5, (MAX_BODY - 4) // 5 + 1, MAX_LINE_LENGTH, MAX_IDENTIFY_BODY,
         MAX_IDENTIFY_BODY + 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32 - 2)
_PACK = struct.Struct(">I").pack

Shape = tuple[bytes, list[bytes], bytes, "list[bytes] | None", "tuple[str, str] | None"]


class Parser(Protocol):
    def feed(self, data: bytes) -> list[Command]: ...


P = TypeVar("P", bound=Parser)


class Violation(AssertionError):
    """A property broken by an input; ``str()`` says which."""


class Timeout(Violation):
    """One ``feed`` used more CPU than allowed: a hang or super-linear work."""


def size(n: int) -> bytes:
    """``n`` as a 4-byte big-endian size prefix, wrapped to 32 bits as a client could send it."""
    return _PACK(n % 2**32)


# -- valid streams -----------------------------------------------------------------------------------------

_NAME = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"


def _name(rng: random.Random) -> bytes:
    return "".join(rng.choice(_NAME) for _ in range(rng.randint(1, 12))).encode()


def _body(rng: random.Random, limit: int) -> bytes:
    length = rng.choice((1, limit, rng.randint(1, limit), rng.randint(1, 8)))
    return rng.randbytes(length)


def _unknown(rng: random.Random) -> bytes:
    """A command name no parser gives a body to."""
    name = _name(rng).upper()
    return name if name not in (b"IDENTIFY", b"AUTH", b"PUB", b"DPUB", b"MPUB") else b"NOP"


def _eol(rng: random.Random) -> bytes:
    return b"\r\n" if rng.random() < 0.2 else b"\n"


def _v2_command(rng: random.Random) -> tuple[bytes, Shape]:
    kind = rng.randrange(9)
    topic, msg_id = _name(rng), rng.randbytes(8).hex().encode()
    if kind == 0:
        line = rng.choice([[b"NOP"], [b"CLS"], [b"RDY", b"%d" % rng.randint(0, 3000)], [b"FIN", msg_id],
                           [b"REQ", msg_id, b"%d" % rng.randint(0, 10**6)], [b"TOUCH", msg_id],
                           [b"SUB", topic, _name(rng)], [_unknown(rng)]])
        return b" ".join(line) + _eol(rng), (line[0], line[1:], b"", None, None)
    if kind in (1, 2):
        body = _body(rng, MAX_MSG)
        return encode_command(b"PUB", topic, body=body), (b"PUB", [topic], body, None, None)
    if kind == 3:
        body, ms = _body(rng, MAX_MSG), b"%d" % rng.randint(0, 3_600_000)
        return encode_command(b"DPUB", topic, ms, body=body), (b"DPUB", [topic, ms], body, None, None)
    if kind in (4, 5):
        messages = [_body(rng, MAX_MSG) for _ in range(rng.randint(1, 6))]
        return encode_mpub(topic, messages), (b"MPUB", [topic], b"", messages, None)
    if kind == 6:
        body = json.dumps({"client_id": topic.decode(), "heartbeat_interval": 1000}).encode()[:MAX_BODY]
        return encode_command(b"IDENTIFY", body=body), (b"IDENTIFY", [], body, None, None)
    if kind == 7:
        body = _body(rng, MAX_BODY)
        return encode_command(b"AUTH", body=body), (b"AUTH", [], body, None, None)
    return b"FIN " + msg_id + b"\n", (b"FIN", [msg_id], b"", None, None)


def valid_v2(rng: random.Random, count: int) -> tuple[bytes, list[Shape]]:
    """``count`` well-formed V2 commands and the shapes they parse to."""
    pairs = [_v2_command(rng) for _ in range(count)]
    return b"".join(data for data, _ in pairs), [shape for _, shape in pairs]


_PADS = (b"", b" ", b"  ", b"\t", b"\r")


def _lookup_command(rng: random.Random) -> tuple[bytes, Shape]:
    kind = rng.randrange(4)
    if kind == 0:
        body = json.dumps({"broadcast_address": "127.0.0.1", "tcp_port": rng.randint(1, 65535),
                           "http_port": rng.randint(1, 65535), "version": "1.3.0",
                           "hostname": _name(rng).decode()}).encode()
        return b"IDENTIFY\n" + size(len(body)) + body, (b"IDENTIFY", [], body, None, None)
    args = [_name(rng) for _ in range(rng.randint(0, 2))]
    name = rng.choice((b"PING", b"REGISTER", b"UNREGISTER", _unknown(rng)))
    line = b" ".join([name, *args])
    # lookupd trims whitespace around a line
    before, after = rng.choice(_PADS), rng.choice(_PADS)
    return before + line + after + b"\n", (name, args, b"", None, None)


def valid_lookup(rng: random.Random, count: int) -> tuple[bytes, list[Shape]]:
    """``count`` well-formed lookupd V1 commands and the shapes they parse to."""
    pairs = [_lookup_command(rng) for _ in range(count)]
    return b"".join(data for data, _ in pairs), [shape for _, shape in pairs]


# limits above the 16 KiB line limit, for bodies that are longer than any line may be
LARGE_MSG = 2**15
LARGE_BODY = 2**16


def large_v2(rng: random.Random) -> bytes:
    """Commands whose bodies, newlines and all, are longer than a command line may be (for LARGE_* limits)."""
    parts = []
    for _ in range(rng.randint(1, 3)):
        body = rng.randbytes(rng.randint(MAX_LINE_LENGTH - 64, LARGE_MSG))
        kind = rng.randrange(3)
        if kind == 0:
            parts.append(encode_command(b"PUB", b"t", body=body))
        elif kind == 1:
            parts.append(encode_command(b"IDENTIFY", body=body + body[:rng.randint(0, LARGE_BODY - len(body))]))
        else:
            cut = rng.randint(1, len(body) - 1)
            parts.append(encode_mpub(b"t", [body[:cut], body[cut:]]))
    return b"".join(parts)


# -- mutations and random streams ----------------------------------------------------------------------------

# one mutation: (kind, position, argument); positions and arguments are reduced modulo what fits, so any
# triple of integers is a valid mutation of any input (which lets hypothesis shrink them freely)
Mutation = tuple[int, int, int]
MUTATION_KINDS = 7


def mutate(data: bytes, mutations: Sequence[Mutation]) -> bytes:
    for kind, position, argument in mutations:
        at = position % (len(data) + 1)
        if kind == 0 and data:  # flip one bit
            at %= len(data)
            data = data[:at] + bytes([data[at] ^ (1 << argument % 8)]) + data[at + 1:]
        elif kind == 1:  # truncate
            data = data[:at]
        elif kind == 2:  # duplicate a slice
            data = data[:at] + data[at:at + 1 + argument % 64] + data[at:]
        elif kind == 3:  # remove a slice
            data = data[:at] + data[at + 1 + argument % 16:]
        elif kind == 4:  # insert a size prefix from the interesting ones
            data = data[:at] + size(SIZES[argument % len(SIZES)]) + data[at:]
        elif kind == 5:  # overwrite 4 bytes with one (over a real size prefix, some of the time)
            data = data[:at] + size(SIZES[argument % len(SIZES)]) + data[at + 4:]
        elif kind == 6:  # insert a protocol token
            data = data[:at] + TOKENS[argument % len(TOKENS)] + data[at:]
    return data


TOKENS = (b"\n", b"\r\n", b" ", b"\r", b"\x00", b"PUB t\n", b"DPUB t 1\n", b"MPUB t\n", b"IDENTIFY\n",
          b"AUTH\n", b"FIN 0123456789abcdef\n", b"NOP\n", b"PING\n", b"REGISTER t c\n", b"SUB t c\n",
          b"X" * 1000)


def random_mutations(rng: random.Random, count: int) -> list[Mutation]:
    return [(rng.randrange(MUTATION_KINDS), rng.randrange(2**16), rng.randrange(2**16)) for _ in range(count)]


def token_soup(rng: random.Random, count: int) -> bytes:
    """Protocol tokens, size prefixes and random bytes run together: reaches deeper than uniform noise."""
    parts = []
    for _ in range(count):
        pick = rng.random()
        if pick < 0.5:
            parts.append(rng.choice(TOKENS[:-1]))
        elif pick < 0.8:
            parts.append(size(rng.choice(SIZES)))
        else:
            parts.append(rng.randbytes(rng.randint(1, 32)))
    return b"".join(parts)


def long_line(rng: random.Random) -> bytes:
    """A line around the 16 KiB limit, maybe ended, maybe followed by a command."""
    length = MAX_LINE_LENGTH + rng.randint(-3, 2)
    return b"SUB " + b"x" * (length - 4) + rng.choice((b"", b"\n", b"\r\n", b"\nNOP\n"))


def chunks(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``data`` cut at ``cuts`` (reduced modulo its length): the reads a server could see."""
    points = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    return [data[a:b] for a, b in zip(points, points[1:])]


# -- the properties ------------------------------------------------------------------------------------------

def shapes(commands: list[Command]) -> list[Shape]:
    """Commands as plain values; a run of FINs counts as the FIN commands it stands for."""
    out: list[Shape] = []
    for command in commands:
        if command.name == FIN_RUN:
            out += [(b"FIN", [msg_id], b"", None, None) for msg_id in command.args]
        else:
            error = None if command.error is None else (command.error.code, command.error.description)
            out.append((command.name, command.args, command.body, command.messages, error))
    return out


def v2_buffer(parser: CommandParser) -> tuple[int, int]:
    """Bytes the V2 parser holds and the most it may hold: the unfinished command's line, its size fields and a
    body within the limit (or, inside an MPUB, one message and its size)."""
    pending = b"".join(parser._pending)
    if parser._partial_mpub is not None:
        return len(pending), 4 + parser.max_msg_size
    newline = pending.find(b"\n")
    if newline < 0:
        return len(pending), MAX_LINE_LENGTH - 1
    return len(pending), newline + 1 + 4 + max(parser.max_body_size, parser.max_msg_size, 4)


def lookup_buffer(parser: LookupCommandParser) -> tuple[int, int]:
    pending = parser._pending
    newline = pending.find(b"\n")
    if newline < 0:
        return len(pending), MAX_LINE_LENGTH - 1
    return len(pending), newline + 1 + 4 + MAX_IDENTIFY_BODY


@contextmanager
def cpu_limit(seconds: float) -> Iterator[None]:
    """Raises ``Timeout`` in the block once it has used ``seconds`` of CPU."""
    def expire(signum: int, frame: FrameType | None) -> None:
        raise Timeout(f"feed used more than {seconds}s of CPU")

    previous = signal.signal(signal.SIGVTALRM, expire)
    signal.setitimer(signal.ITIMER_VIRTUAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_VIRTUAL, 0)
        signal.signal(signal.SIGVTALRM, previous)


def _feed_all(parser: Parser, pieces: list[bytes], buffer: Callable[[], tuple[int, int]]) -> list[Command]:
    commands: list[Command] = []
    stopped = False
    for piece in pieces:
        try:
            got = parser.feed(piece)
        except ProtocolError:
            # allowed by the contract, though these parsers return errors as commands
            return commands
        except Timeout:
            raise
        except Exception as exc:
            raise Violation(f"feed raised {exc!r}") from exc
        if stopped and got:
            raise Violation(f"commands after an error: {shapes(got)[:3]}")
        for index, command in enumerate(got):
            if command.error is not None:
                if not isinstance(command.error, ProtocolError):
                    raise Violation(f"error of type {type(command.error).__name__}")
                if index != len(got) - 1:
                    raise Violation("commands after an error in the same feed")
                stopped = True
        commands += got
        held, allowed = buffer()
        if held > allowed:
            raise Violation(f"buffers {held} bytes, more than the {allowed} one unfinished command may take")
    return commands


def check_parser(data: bytes, cuts: Sequence[int], new: Callable[[], P], buffer: Callable[[P], tuple[int, int]],
                 cpu_seconds: float) -> list[Shape]:
    """Every property, for ``data`` fed to a parser from ``new`` whole and cut at ``cuts``; ``buffer`` tells what
    a parser holds and the most it may hold."""
    with cpu_limit(cpu_seconds):
        whole_parser, cut_parser = new(), new()
        whole = shapes(_feed_all(whole_parser, [data], lambda: buffer(whole_parser)))
        cut = shapes(_feed_all(cut_parser, chunks(data, cuts), lambda: buffer(cut_parser)))
    if whole != cut:
        first = next((i for i, (a, b) in enumerate(zip(whole, cut)) if a != b), min(len(whole), len(cut)))
        raise Violation(f"chunked feeding differs from whole at command {first}: "
                        f"{whole[first:first + 1]!r:.200} != {cut[first:first + 1]!r:.200}")
    lines = data.count(b"\n")
    if len(whole) > lines + 1:
        raise Violation(f"{len(whole)} commands from {lines} lines")
    return whole


class PlainV2:
    """``CommandParser`` as a connection that never upgrades uses it: what follows an IDENTIFY is parsed as it is."""

    def __init__(self, max_msg_size: int, max_body_size: int) -> None:
        self.parser = CommandParser(max_msg_size, max_body_size)

    def feed(self, data: bytes) -> list[Command]:
        commands = self.parser.feed(data)
        while released := self.parser.release_held():
            commands += released
        return commands


def check_v2(data: bytes, cuts: Sequence[int] = (), cpu_seconds: float = 5.0,
             max_msg_size: int = MAX_MSG, max_body_size: int = MAX_BODY) -> list[Shape]:
    """Every property, for ``data`` fed to ``CommandParser`` whole and cut at ``cuts``; the commands it gave."""
    return check_parser(data, cuts, lambda: PlainV2(max_msg_size, max_body_size),
                        lambda plain: v2_buffer(plain.parser), cpu_seconds)


def check_lookup(data: bytes, cuts: Sequence[int] = (), cpu_seconds: float = 5.0) -> list[Shape]:
    """Every property, for ``data`` fed to ``LookupCommandParser`` whole and cut at ``cuts``."""
    return check_parser(data, cuts, LookupCommandParser, lookup_buffer, cpu_seconds)
