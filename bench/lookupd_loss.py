"""Losing lookupd, the long run: ``.venv/bin/python -m bench.lookupd_loss [--rounds 10] [--nsqds 3] [--seed 1]``.

Two lookupds and ``--nsqds`` nsqds registered with both (harness.lookupd_loss, the scenario
tests/functional/test_lookupd_loss.py runs once), with traffic all along: a producer per nsqd publishing to it,
two producers that ask lookupd's ``/lookup`` for the topic's nsqds before every message, consumers found through
both lookupds (polling every 0.5 s) on two channels. Each round kills every lookupd with SIGKILL at once for
2-20 s (so that nsqd's reconnection delay, 1 s doubling up to 12 s, is met at every step) while a consumer on a
new channel starts, starts them again on their ports and starts another consumer; replaces the second lookupd by
a new one on other ports through ``PUT /config/nsqlookupd_tcp_addresses`` on every nsqd; then kills one lookupd
alone (the first and the second in turn) for 2-6 s, with a consumer starting meanwhile. The consumers of all along
keep the lookupd addresses they started with (after the first replacement only the first answers them); the
producers that discover and the consumers started later use the current ones.

At the end the producers stop and every consumer gets what it is owed (each message acknowledged after it was
subscribed on every nsqd). Prints the rounds run, the messages acknowledged, the copies received, lost (must be
0) and duplicated, and min/median/max of: the seconds a restarted lookupd took to know the whole cluster (every
nsqd with every topic and channel) and a replacement (both must stay within one ping interval, 15 s), a consumer
started during the outage to be subscribed on every nsqd after the restart and one started after it, and how long
the producers that discover through lookupd could not publish (with every lookupd down; with one, never). Exits 1
if anything was lost or one of those limits was passed.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.lookupd_loss import (
    CHANNELS,
    OneDown,
    Outage,
    Traffic,
    cluster,
    every_lookupd_down,
    one_lookupd_down,
    replace_lookupd,
)
from harness.partitions import Tally, summary
from services.nsqd.lookup_peer import PING_INTERVAL


@dataclass
class Figures:
    outages: list[Outage] = field(default_factory=list)
    replaced: list[float] = field(default_factory=list)
    one_down: list[OneDown] = field(default_factory=list)
    tallies: list[Tally] = field(default_factory=list)
    acknowledged: int = 0
    after_a_lookup: int = 0  # of those acknowledged, by the producers that discover through lookupd
    failed: int = 0

    @property
    def restarted(self) -> list[float]:
        return [*(s for outage in self.outages for s in outage.knew_after), *(one.knew_after for one in self.one_down)]

    def failures(self) -> list[str]:
        """What must not happen, that did."""
        found = []
        if sum(tally.lost for tally in self.tallies):
            found.append("messages lost")
        if max(self.restarted + self.replaced, default=0) > PING_INTERVAL:
            found.append("a lookupd knew the whole cluster later than one ping interval")
        if any(any(one.unable) for one in self.one_down):
            found.append("producers could not publish while one lookupd was down")
        if self.failed:
            found.append("publishes to nsqd failed")
        return found


async def run(rounds: int, nsqds: int, seed: int, scratch: Path) -> Figures:
    rng = random.Random(seed)
    figures = Figures()
    with cluster(scratch, nsqds) as nodes:
        traffic = Traffic(nodes)
        await traffic.start()
        try:
            for number in range(1, rounds + 1):
                outage = await every_lookupd_down(nodes, traffic, f"r{number}", rng.uniform(2, 20))
                replaced = await replace_lookupd(nodes, slot=1)
                one = await one_lookupd_down(nodes, traffic, f"r{number}", number % 2, rng.uniform(2, 6))
                await traffic.settle_round_readers()
                figures.outages.append(outage)
                figures.replaced.append(replaced)
                figures.one_down.append(one)
                print(f"round {number}: every lookupd down {outage.seconds:.1f} s, knew the whole cluster "
                      f"{' and '.join(f'{s:.2f}' for s in outage.knew_after)} s after their restart; a consumer "
                      f"started meanwhile on every nsqd {outage.found_after:.2f} s after it, one started then in "
                      f"{outage.found_within:.2f} s; producers discovering through lookupd could not publish for "
                      f"{' and '.join(f'{s:.1f}' for s in outage.unable)} s. Replaced: {replaced:.2f} s. "
                      f"lookupd {number % 2} down alone {one.seconds:.1f} s, knew again {one.knew_after:.2f} s "
                      f"after its restart, a consumer started meanwhile on every nsqd in {one.found_within:.2f} s, "
                      f"producers unable for {max(one.unable):.1f} s", flush=True)
        finally:
            figures.tallies = await traffic.stop()
            figures.acknowledged, figures.failed = len(traffic.published), traffic.failed
            figures.after_a_lookup = sum(publisher.acknowledged for publisher in traffic.discovering)
    return figures


def report(figures: Figures) -> None:
    tallies, outages, one_down = figures.tallies, figures.outages, figures.one_down
    print(f"rounds run: {len(outages)}")
    print(f"messages acknowledged: {figures.acknowledged} ({figures.after_a_lookup} by the producers that discover "
          f"through lookupd; publishes failed: {figures.failed})")
    print(f"copies received: {sum(len(tally.received) for tally in tallies)} on {len(tallies)} channels "
          f"({', '.join(CHANNELS)} all along, the others each round's)")
    print(f"lost: {sum(tally.lost for tally in tallies)}")
    print(f"duplicated: {sum(tally.duplicated for tally in tallies)}")
    print(f"every lookupd down for: {summary(outage.seconds for outage in outages)}")
    print(f"a lookupd restarted knew the whole cluster after: {summary(figures.restarted, 2)} "
          f"(ping interval {PING_INTERVAL:g} s)")
    print(f"a replacement knew the whole cluster after: {summary(figures.replaced, 2)}")
    print(f"a consumer started while every lookupd was down, on every nsqd after the restart: "
          f"{summary((outage.found_after for outage in outages), 2)}")
    print(f"a consumer started after the restart, on every nsqd: "
          f"{summary((outage.found_within for outage in outages), 2)}")
    print(f"a consumer started while one lookupd was down, on every nsqd: "
          f"{summary((one.found_within for one in one_down), 2)}")
    print(f"producers discovering through lookupd could not publish, every lookupd down: "
          f"{summary(s for outage in outages for s in outage.unable)}")
    print(f"producers discovering through lookupd could not publish, one lookupd down: "
          f"{summary(s for one in one_down for s in one.unable)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--nsqds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("nsq.client").setLevel(logging.CRITICAL)  # every poll of a lookupd down logs an error
    with tempfile.TemporaryDirectory(prefix="bench-lookupd-loss-") as scratch:
        figures = asyncio.run(run(args.rounds, args.nsqds, args.seed, Path(scratch)))
    report(figures)
    failures = figures.failures()
    if failures:
        print(f"FAILED: {'; '.join(failures)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
