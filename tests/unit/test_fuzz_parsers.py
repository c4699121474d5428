"""Both command parsers under random and mutated byte streams (the properties are in harness/hostile.py).

These runs are short, to stay in the normal suite; ``python -m bench.fuzz --seconds 600`` runs the same checks
for as long as it is given. test_commands.py and test_lookup_v1.py hold the exact tables; here no input has a
known answer except the valid streams, and what is checked is what must hold for every input.
"""

from __future__ import annotations

import random
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import hostile
from harness.hostile import MAX_BODY, MAX_MSG, MUTATION_KINDS, SIZES, TOKENS, Violation, check_lookup, check_v2, size
from shared.protocol.commands import MAX_LINE_LENGTH, CommandParser
from shared.protocol.lookup_v1 import MAX_IDENTIFY_BODY, LookupCommandParser

# reads a server could see: up to 40 cuts anywhere
cuts = st.lists(st.integers(0, 2**20), max_size=40)
mutations = st.lists(st.tuples(st.integers(0, MUTATION_KINDS - 1), st.integers(0, 2**16), st.integers(0, 2**16)),
                     max_size=4)
soup = st.lists(st.one_of(st.sampled_from(TOKENS[:-1]), st.sampled_from(SIZES).map(size),
                          st.binary(min_size=1, max_size=16)), max_size=40).map(b"".join)
# st.randoms feeds the same generators bench/fuzz.py uses, and still shrinks
rngs = st.randoms(use_true_random=False)

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- V2 -----------------------------------------------------------------------------------------------------

@FAST
@given(data=st.binary(max_size=2000), cuts=cuts)
def test_v2_random_bytes(data: bytes, cuts: list[int]) -> None:
    check_v2(data, cuts, cpu_seconds=2)


@FAST
@given(data=soup, cuts=cuts)
def test_v2_token_soup(data: bytes, cuts: list[int]) -> None:
    check_v2(data, cuts, cpu_seconds=2)


@FAST
@given(rng=rngs, count=st.integers(1, 12), mutations=mutations, cuts=cuts)
def test_v2_mutated_valid_stream(rng: random.Random, count: int, mutations: list[hostile.Mutation],
                                 cuts: list[int]) -> None:
    data, expected = hostile.valid_v2(rng, count)
    got = check_v2(hostile.mutate(data, mutations), cuts, cpu_seconds=2)
    if not mutations:
        assert got == expected  # a valid stream cut anywhere gives its commands


@settings(max_examples=20, deadline=None)
@given(rng=rngs, cuts=cuts)
def test_v2_line_at_the_length_limit(rng: random.Random, cuts: list[int]) -> None:
    check_v2(hostile.long_line(rng), cuts, cpu_seconds=2)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32), mutations=mutations, cuts=cuts)
def test_v2_bodies_longer_than_a_line(seed: int, mutations: list[hostile.Mutation], cuts: list[int]) -> None:
    # newlines inside a body never end a command, however far past 16 KiB they come; a plain seeded Random,
    # because st.randoms would record every one of those bytes as hypothesis data
    data = hostile.mutate(hostile.large_v2(random.Random(seed)), mutations)
    check_v2(data, cuts, cpu_seconds=2, max_msg_size=hostile.LARGE_MSG, max_body_size=hostile.LARGE_BODY)


BODY_PREFIXES = [b"PUB t\n", b"DPUB t 10\n", b"IDENTIFY\n", b"AUTH\n", b"MPUB t\n", b"MPUB t\n" + size(100),
                 b"MPUB t\n" + size(100) + size(2), b"MPUB t\n" + size(100) + size(2) + size(1) + b"a"]
# the largest size each prefix above accepts (for the MPUB count, the count bound); below 1 is refused too
LIMITS = [MAX_MSG, MAX_MSG, MAX_BODY, MAX_BODY, MAX_BODY, (MAX_BODY - 4) // 5, MAX_MSG, MAX_MSG]


@settings(max_examples=300, deadline=None)
@given(which=st.integers(0, len(BODY_PREFIXES) - 1),
       declared=st.one_of(st.sampled_from(SIZES), st.integers(0, 2**32 - 1)),
       trailer=st.integers(0, 4 * MAX_BODY), cuts=cuts)
def test_v2_size_prefix_out_of_bounds_is_rejected_before_the_body(which: int, declared: int, trailer: int,
                                                                    cuts: list[int]) -> None:
    prefix = BODY_PREFIXES[which] + size(declared)
    parser = CommandParser(MAX_MSG, MAX_BODY)
    got = parser.feed(prefix)
    as_int32 = struct.unpack(">i", size(declared))[0]
    if not 1 <= as_int32 <= LIMITS[which]:
        # rejected on the size alone: nothing of what follows is waited for or kept
        assert got and got[-1].error is not None and got[-1].error.code in ("E_BAD_BODY", "E_BAD_MESSAGE")
        assert parser.feed(b"x" * trailer) == [] and len(parser._pending) == 0
    check_v2(prefix + b"x" * trailer, cuts, cpu_seconds=2)


def test_v2_buffer_check_catches_a_parser_that_waits_on_a_size_over_its_limit() -> None:
    # the property must not be vacuous: a parser whose real limit is above the one checked is caught
    def lenient() -> CommandParser:
        return CommandParser(2**31 - 1, 2**31 - 1)

    def checked_against_the_real_limits(parser: CommandParser) -> tuple[int, int]:
        held, _ = hostile.v2_buffer(parser)
        return held, MAX_LINE_LENGTH + 8 + MAX_BODY

    data = b"PUB t\n" + size(2**31 - 1) + b"x" * (2 * MAX_LINE_LENGTH)
    with pytest.raises(Violation, match="buffers"):
        hostile.check_parser(data, [100, 20_000, 30_000], lenient, checked_against_the_real_limits, 2)


def test_v2_an_unfinished_mpub_holds_at_most_max_body_size() -> None:
    """NSQ never reconciles an MPUB's messages with its declared size; nsqd at least holds them to the limit."""
    parser = CommandParser(MAX_MSG, MAX_BODY)
    count = (MAX_BODY - 4) // 5
    held = 0
    for _ in range(count):
        commands = parser.feed(size(MAX_MSG) + b"m" * MAX_MSG) if held else parser.feed(
            b"MPUB t\n" + size(MAX_BODY) + size(count) + size(MAX_MSG) + b"m" * MAX_MSG)
        if parser._partial_mpub is not None:
            held = sum(len(message) for message in parser._partial_mpub.messages) + len(parser._pending)
            assert held <= MAX_BODY, f"{held} bytes held for an MPUB declared as {MAX_BODY}"
        if commands:
            [command] = commands
            assert command.error is not None and command.error.frame_text.startswith(b"E_BAD_BODY")
            break
    else:
        raise AssertionError("the MPUB was never refused")


# -- lookupd V1 ---------------------------------------------------------------------------------------------

@FAST
@given(data=st.binary(max_size=2000), cuts=cuts)
def test_lookup_random_bytes(data: bytes, cuts: list[int]) -> None:
    check_lookup(data, cuts, cpu_seconds=2)


@FAST
@given(data=soup, cuts=cuts)
def test_lookup_token_soup(data: bytes, cuts: list[int]) -> None:
    check_lookup(data, cuts, cpu_seconds=2)


@FAST
@given(rng=rngs, count=st.integers(1, 12), mutations=mutations, cuts=cuts)
def test_lookup_mutated_valid_stream(rng: random.Random, count: int, mutations: list[hostile.Mutation],
                                     cuts: list[int]) -> None:
    data, expected = hostile.valid_lookup(rng, count)
    got = check_lookup(hostile.mutate(data, mutations), cuts, cpu_seconds=2)
    if not mutations:
        assert got == expected


@settings(max_examples=50, deadline=None)
@given(declared=st.one_of(st.sampled_from(SIZES), st.integers(0, 2**32 - 1)), cuts=cuts)
def test_lookup_identify_size_out_of_bounds_is_rejected_before_the_body(declared: int, cuts: list[int]) -> None:
    parser = LookupCommandParser()
    got = parser.feed(b"IDENTIFY\n" + size(declared))
    if not 1 <= struct.unpack(">i", size(declared))[0] <= MAX_IDENTIFY_BODY:
        assert got and got[-1].error is not None and got[-1].error.code == "E_BAD_BODY"
        assert parser.feed(b"x" * 100_000) == [] and parser._pending == b""
    check_lookup(b"IDENTIFY\n" + size(declared) + b"x" * 3000, cuts, cpu_seconds=2)


def _feed_seconds(parser_type: type[LookupCommandParser] | type[CommandParser], body_size: int) -> float:
    """Least of three runs: CPU seconds to feed an IDENTIFY of ``body_size`` in 128-byte reads."""
    data = b"IDENTIFY\n" + size(body_size) + b"x" * body_size
    best = float("inf")
    for _ in range(3):
        parser = LookupCommandParser() if parser_type is LookupCommandParser else CommandParser(2**20, 2**20)
        started = time.process_time()
        for at in range(0, len(data), 128):
            parser.feed(data[at:at + 128])
        best = min(best, time.process_time() - started)
    return best


def test_v2_body_arriving_in_small_reads_costs_linear_time() -> None:
    # 8x the bytes must cost about 8x the time (measured: 10x); re-copying the buffer on every read costs 64x
    # (measured: 30-50x, the lookup parser's). The floor keeps timer noise on a tiny figure out of it.
    small, large = _feed_seconds(CommandParser, 2**17), _feed_seconds(CommandParser, 2**20)
    assert large < 20 * max(small, 0.002), (small, large)


def test_lookup_body_arriving_in_small_reads_costs_linear_time() -> None:
    small, large = _feed_seconds(LookupCommandParser, 2**17), _feed_seconds(LookupCommandParser, 2**20)
    assert large < 20 * max(small, 0.002), (small, large)
