"""A full disk, the long run: ``.venv/bin/python -m bench.full_disk [--rounds 10] [--cycles 5]`` (root, to mount
a tmpfs).

Each round is harness.full_disk's (tests/functional/test_full_disk.py runs a short one): a fresh nsqd on a
``--disk-mb`` tmpfs with segments of 1 MB; producers publishing all along with PUB and MPUB over TCP and /pub and
/mpub over HTTP; ``--cycles`` times the disk fills until every route is refused and /ping answers NOK, stays full
``--full-for`` seconds, then a consumer takes 1000 to 2500 messages (drawn from ``--seed``) while the producers
keep trying; at the end everything is drained, every route must publish once more, and what was received is
compared with what was acknowledged. Odd rounds run at ``--mem-queue-size=0`` (every message on disk, a drain frees
a segment), even ones at nsqd's default (10000 in memory before the disk; a drain makes room in memory first).

Prints per round and in total the messages acknowledged, the publishes refused by route and error, the messages
received, lost, duplicated, corrupted and delivered from a refused publish, the seconds from the consumer starting
to the first publish accepted again and to /ping answering OK, and whether nsqd recovered without a restart. Exits
1 unless nothing was lost, duplicated, corrupted or delivered from a refused publish, and nsqd recovered every
time, still running.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from harness import full_disk
from harness.full_disk import RoundResult, full_disk_round, tmpfs


async def run(args: argparse.Namespace, scratch: Path) -> list[RoundResult]:
    rng = random.Random(args.seed)
    results = []
    for number in range(1, args.rounds + 1):
        mem_queue_size = 0 if number % 2 else None
        # more than a segment (about 1000 messages), so that at --mem-queue-size=0 one is freed
        takes = [rng.randint(1000, 2500) for _ in range(args.cycles)]
        with tmpfs(scratch / f"round{number}", args.disk_mb) as disk:
            result = await full_disk_round(disk, mem_queue_size, takes, args.full_for)
        results.append(result)
        mode = "--mem-queue-size=0" if mem_queue_size == 0 else "default --mem-queue-size"
        print(f"round {number} ({mode}): {describe(result)}", flush=True)
    return results


def describe(result: RoundResult) -> str:
    return (f"{result.acknowledged} acknowledged, {sum(result.refusals.values())} publishes refused "
            f"({refusals(result.refusals)}), "
            f"{result.received} received, {result.lost} lost, {result.duplicated} duplicated, "
            f"{result.corrupted} corrupted, {result.refused_yet_delivered} from refused publishes; publish OK again "
            f"after {seconds(result.publish_recovered)}, /ping OK after {seconds(result.ping_recovered)}"
            f"{'' if result.recovered_at_end else '; NOT recovered at the end'}"
            f"{'' if result.nsqd_running else '; nsqd EXITED'}")


def refusals(counts: Counter[str]) -> str:
    return ", ".join(f"{error}: {count}" for error, count in sorted(counts.items()))


def seconds(values: Iterable[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return "-"
    return f"{ordered[0]:.2f}/{ordered[len(ordered) // 2]:.2f}/{ordered[-1]:.2f} s"


def recovery(results: list[RoundResult], figure: str) -> str:
    """A recovery figure over every round, then apart for the rounds at --mem-queue-size=0 (the odd ones) and at the
    default."""
    def over(rounds: list[RoundResult]) -> str:
        return seconds(value for result in rounds for value in getattr(result, figure))

    return f"{over(results)} (--mem-queue-size=0 {over(results[::2])}, default {over(results[1::2])})"


def print_totals(results: list[RoundResult]) -> bool:
    """Prints the totals; whether the run passed."""
    refused: Counter[str] = Counter()
    for result in results:
        refused.update(result.refusals)
    failures = {name: sum(getattr(result, name) for result in results)
                for name in ("lost", "duplicated", "corrupted", "refused_yet_delivered")}
    unrecovered = sum(not result.recovered_at_end for result in results)
    exited = sum(not result.nsqd_running for result in results)
    print(f"rounds run: {len(results)} ({(len(results) + 1) // 2} at --mem-queue-size=0, {len(results) // 2} at "
          "the default)")
    print(f"messages acknowledged: {sum(result.acknowledged for result in results)}")
    print(f"publishes refused: {sum(refused.values())} ({refusals(refused)})")
    print(f"publishes unanswered: {sum(result.unanswered for result in results)} messages")
    print(f"received: {sum(result.received for result in results)}")
    print(f"lost: {failures['lost']}")
    print(f"duplicated: {failures['duplicated']}")
    print(f"corrupted: {failures['corrupted']}")
    print(f"delivered from refused publishes: {failures['refused_yet_delivered']}")
    print(f"publish OK again after the consumer started (min/median/max): {recovery(results, 'publish_recovered')}")
    print(f"/ping OK again after the consumer started (min/median/max): {recovery(results, 'ping_recovered')}")
    print(f"recovered without a restart: {len(results) - unrecovered} of {len(results)} rounds; nsqd exited: {exited}")
    return not any(failures.values()) and not unrecovered and not exited


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--cycles", type=int, default=5, help="fills and partial drains per round")
    parser.add_argument("--full-for", type=float, default=0.5, help="seconds the disk stays full each time")
    parser.add_argument("--disk-mb", type=int, default=full_disk.DISK_MB)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    reason = full_disk.unavailable()
    if reason:
        raise SystemExit(reason)
    with tempfile.TemporaryDirectory(prefix="bench-full-disk-") as scratch:
        results = asyncio.run(run(args, Path(scratch)))
    sys.exit(0 if print_totals(results) else 1)


if __name__ == "__main__":
    main()
