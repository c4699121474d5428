"""Partitions, the long run: ``.venv/bin/python -m bench.partitions [--rounds 4] [--hold SECONDS]`` (root, for
the network namespaces).

nsqd and lookupd each in a network namespace of their own (harness.partitions, the scenario
tests/functional/test_partitions.py runs once), a producer publishing and a consumer consuming all along from the
root namespace. Every round cuts nsqd from lookupd until lookupd drops it, creates a topic and a channel meanwhile,
heals and waits for nsqd to be registered again with all of it; odd rounds heal as soon as lookupd dropped the node,
even ones when nsqd has just begun its longest wait between reconnections (the worst moment to heal); with
``--hold``, none before that many seconds after the cut (past ~100 s nsqd's kernel has given up resending what it
had for lookupd: only TCP keep-alive then tells lookupd the old connection is dead). Then a
consumer is cut off from nsqd in the middle of a batch and another takes its messages. Prints the rounds run, the
messages acknowledged, lost (must be 0) and delivered twice, and the seconds lookupd took to drop the node, nsqd to
be registered again after the heal, lookupd to close the connection of before the cut, and nsqd to drop the
consumer cut off.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from harness import netns
from harness.partitions import Round, Tally, Traffic, cluster, cut_consumer_mid_batch, partition_round, summary
from services.nsqd.lookup_peer import PING_INTERVAL


async def run(rounds: int, hold: float, scratch: Path) -> Tally:
    done: list[Round] = []
    batches = Tally()
    dead_after: list[float] = []
    with cluster(scratch) as nodes:
        traffic = Traffic(nodes)
        await traffic.start()
        try:
            for number in range(1, rounds + 1):
                figures = await partition_round(nodes, traffic, number, heal_at_longest_wait=number % 2 == 0,
                                                hold=hold)
                batch = await cut_consumer_mid_batch(nodes, f"batch{number}", messages=200, rdy=50, fin=20)
                batches.add(batch.tally)
                dead_after.append(batch.dead_after)
                done.append(figures)
                print(f"round {number}: lookupd dropped nsqd after {figures.dropped_after:.1f} s, registered again "
                      f"{figures.registered_after:.1f} s after the heal"
                      f"{' (healed at the longest wait)' if number % 2 == 0 else ''}, the old connection closed "
                      f"after {figures.stale_closed_after:.1f} s; consumer cut off holding "
                      f"{batch.held}: {batch.tally.duplicated} delivered twice, dropped after "
                      f"{batch.dead_after:.1f} s", flush=True)
        finally:
            await traffic.stop()
    total = Tally()
    total.add(traffic.tally)
    total.add(batches)
    print(f"rounds run: {len(done)}")
    print(f"messages acknowledged: {len(total.acknowledged)} ({len(traffic.tally.acknowledged)} published all along, "
          f"{len(batches.acknowledged)} in the batches)")
    print(f"lost: {total.lost}")
    print(f"delivered twice: {total.duplicated}")
    print(f"lookupd dropped the node after the cut: {summary(r.dropped_after for r in done)}")
    print(f"registered again after the heal: {summary(r.registered_after for r in done)} "
          f"(ping interval {PING_INTERVAL:g} s)")
    print(f"lookupd closed the connection of before the cut, after the heal: "
          f"{summary(r.stale_closed_after for r in done)}")
    print(f"nsqd dropped the consumer cut off: {summary(dead_after)}")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--hold", type=float, default=0.0, help="seconds at least between a cut and its heal")
    args = parser.parse_args()
    reason = netns.unavailable()
    if reason:
        raise SystemExit(reason)
    with tempfile.TemporaryDirectory(prefix="bench-partitions-") as scratch:
        total = asyncio.run(run(args.rounds, args.hold, Path(scratch)))
    sys.exit(1 if total.lost else 0)


if __name__ == "__main__":
    main()
