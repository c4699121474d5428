"""Long fuzz run of the protocol parsers: ``.venv/bin/python -m bench.fuzz --seconds 600``.

Feeds the V2 ``CommandParser`` and the lookupd V1 ``LookupCommandParser`` random, token-soup and mutated valid
streams, each whole and cut into random reads, and checks the properties of harness/hostile.py on every input
(the unit tests check the same ones, briefly). Input ``n`` of a run depends only on the seed and ``n``, so
``--seed S --replay N`` reproduces a failure exactly. Exits 1 on the first violation, printing the input in hex.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from harness import hostile
from harness.hostile import LARGE_BODY, LARGE_MSG, Violation, check_lookup, check_v2


@dataclass
class Case:
    """One input: the parser it is for, how it was made, its bytes and the reads it is cut into."""

    parser: str
    strategy: str
    data: bytes
    cuts: list[int]
    large_limits: bool = False

    def check(self, cpu_seconds: float) -> None:
        if self.parser == "lookup":
            check_lookup(self.data, self.cuts, cpu_seconds)
        elif self.large_limits:
            check_v2(self.data, self.cuts, cpu_seconds, max_msg_size=LARGE_MSG, max_body_size=LARGE_BODY)
        else:
            check_v2(self.data, self.cuts, cpu_seconds)


def _cuts(rng: random.Random, length: int) -> list[int]:
    if length <= 512 and rng.random() < 0.1:
        return list(range(length))  # one byte per read
    return [rng.randrange(length + 1) for _ in range(rng.randint(0, 40))]


def _mutated(rng: random.Random, parser: str) -> bytes:
    valid = hostile.valid_v2 if parser == "v2" else hostile.valid_lookup
    data, _ = valid(rng, rng.randint(1, 40))
    return hostile.mutate(data, hostile.random_mutations(rng, rng.randint(1, 6)))


_STRATEGIES: dict[str, Callable[[random.Random, str], bytes]] = {
    "random": lambda rng, parser: rng.randbytes(rng.randint(0, 4096)),
    "soup": lambda rng, parser: hostile.token_soup(rng, rng.randint(1, 80)),
    "mutated": _mutated,
    "long-line": lambda rng, parser: hostile.mutate(hostile.long_line(rng), hostile.random_mutations(rng, 2)),
    "large-body": lambda rng, parser: hostile.mutate(hostile.large_v2(rng), hostile.random_mutations(rng, 2)),
}
# mutations of valid streams reach the deepest states, so they get most of the time
_WEIGHTS = {"random": 2, "soup": 3, "mutated": 10, "long-line": 1, "large-body": 1}


def make_case(seed: int, index: int) -> Case:
    rng = random.Random(f"{seed}:{index}")
    parser = "v2" if index % 2 == 0 else "lookup"
    names = [name for name in _WEIGHTS if parser == "v2" or name != "large-body"]
    strategy = rng.choices(names, [_WEIGHTS[name] for name in names])[0]
    data = _STRATEGIES[strategy](rng, parser)
    return Case(parser, strategy, data, _cuts(rng, len(data)), strategy == "large-body")


@dataclass
class Tally:
    inputs: int = 0
    bytes: int = 0
    slowest: float = 0.0
    strategies: dict[str, int] = field(default_factory=dict)


def run(seed: int, seconds: float, cpu_seconds: float) -> int:
    print(f"seed {seed}, {seconds:.0f} s", flush=True)
    tallies = {"v2": Tally(), "lookup": Tally()}
    started = time.monotonic()
    index = 0
    while time.monotonic() - started < seconds:
        case = make_case(seed, index)
        before = time.process_time()
        try:
            case.check(cpu_seconds)
        except Violation as violation:
            _report(seed, index, case, violation)
            return 1
        tally = tallies[case.parser]
        tally.inputs += 1
        tally.bytes += len(case.data)
        tally.slowest = max(tally.slowest, time.process_time() - before)
        tally.strategies[case.strategy] = tally.strategies.get(case.strategy, 0) + 1
        index += 1
    _summary(tallies, time.monotonic() - started)
    return 0


def _report(seed: int, index: int, case: Case, violation: Violation) -> None:
    print(f"VIOLATION in input {index} ({case.parser}, {case.strategy}): {violation}")
    print(f"replay: python -m bench.fuzz --seed {seed} --replay {index}")
    print(f"cuts: {case.cuts}")
    print(f"input ({len(case.data)} bytes), hex:\n{case.data.hex()}", flush=True)


def _summary(tallies: dict[str, Tally], elapsed: float) -> None:
    total = sum(tally.inputs for tally in tallies.values())
    for name, tally in tallies.items():
        mix = ", ".join(f"{strategy} {count}" for strategy, count in sorted(tally.strategies.items()))
        print(f"{name:<7} {tally.inputs:>10,} inputs  {tally.inputs / elapsed:>8,.0f}/s  "
              f"{tally.bytes / 1e6:>8.1f} MB  slowest {tally.slowest * 1000:.1f} ms CPU  ({mix})")
    print(f"total   {total:>10,} inputs  {total / elapsed:>8,.0f}/s in {elapsed:.0f} s, no violation")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--replay", type=int, default=None, help="check only input N of --seed")
    parser.add_argument("--cpu-limit", type=float, default=5.0,
                        help="CPU seconds one input may take before it counts as a hang")
    args = parser.parse_args(argv)
    if args.replay is not None and args.seed is None:
        parser.error("--replay needs the --seed of the run")
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    if args.replay is None:
        return run(seed, args.seconds, args.cpu_limit)
    case = make_case(seed, args.replay)
    try:
        case.check(args.cpu_limit)
    except Violation as violation:
        _report(seed, args.replay, case, violation)
        return 1
    print(f"input {args.replay} of seed {seed} ({case.parser}, {case.strategy}, {len(case.data)} bytes): ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
