"""Replication under faults, the long run: ``.venv/bin/python -m bench.replication [--rounds N] [--faults kill,...]
[--liveness SECONDS]`` (root, for the network namespaces; Debian's etcd-server).

Three nsqd at replication factor 3, a 3-member etcd and nsqlookupd (harness.replication_faults, the scenario
tests/functional/test_replication_faults.py runs once); producers publishing to every nsqd and a consumer finding
them through lookupd, all along. Each round applies every fault in turn, to the nsqd after the last one's victim.
Prints each fault's figures, then the totals; the last line is
``acknowledged A, lost L, duplicates D, unexpected U, failover p50 X s, max Y s``. Exits 1 if anything
acknowledged was lost or anything never published was delivered.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
from pathlib import Path

from harness import netns
from harness.etcd import ETCD
from harness.replication_faults import DESCRIBED, FAULTS, Ledger, Outcome, Traffic, inflict, replicated_cluster


async def run(rounds: int, faults: list[str], liveness: float, scratch: Path) -> tuple[Ledger, list[Outcome]]:
    outcomes: list[Outcome] = []
    with replicated_cluster(scratch, liveness) as cluster:
        await cluster.wait_whole()
        traffic = Traffic(cluster)
        await traffic.start()
        try:
            turn = 0
            for number in range(1, rounds + 1):
                for fault in faults:
                    victim = cluster.nodes[turn % len(cluster.nodes)]
                    turn += 1
                    outcome = await inflict(cluster, traffic, fault, victim)
                    outcomes.append(outcome)
                    print(f"round {number}, {fault} ({DESCRIBED[fault]}), {victim.name}: {_line(outcome)}",
                          flush=True)
        finally:
            await traffic.stop()
    return traffic.ledger, outcomes


def _line(outcome: Outcome) -> str:
    failover = "nothing outstanding" if outcome.failover is None else f"{outcome.failover:.1f} s"
    if outcome.fault == "etcd-member":
        failover = "-"
    return (f"failover {failover}, publishing to it interrupted for {outcome.interrupted:.1f} s, "
            f"{outcome.survivors_failed} publishes to the others failed (their longest wait for an OK "
            f"{outcome.survivors_slowest * 1000:.0f} ms), whole again after "
            f"{outcome.whole_after:.1f} s")


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)] if ordered else float("nan")


def report(ledger: Ledger, outcomes: list[Outcome]) -> None:
    failovers = [outcome.failover for outcome in outcomes if outcome.failover is not None]
    interrupted = [outcome.interrupted for outcome in outcomes if outcome.fault != "etcd-member"]
    survived = [outcome for outcome in outcomes if outcome.fault != "rolling-restart"]  # there, every nsqd goes
    print(f"faults: {len(outcomes)}; publishing to the nsqd hit interrupted for p50 "
          f"{_percentile(interrupted, 0.5):.1f} s, max {max(interrupted, default=float('nan')):.1f} s; publishes "
          f"to the others (rolling restarts aside) failed {sum(outcome.survivors_failed for outcome in survived)} "
          f"times, their longest wait for an OK {max(o.survivors_slowest for o in survived) * 1000:.0f} ms")
    print(f"acknowledged {len(ledger.acknowledged)}, lost {len(ledger.lost)}, duplicates {ledger.duplicates}, "
          f"unexpected {len(ledger.unexpected)}, failover p50 {_percentile(failovers, 0.5):.1f} s, "
          f"max {max(failovers, default=float('nan')):.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"of {', '.join(FAULTS)}")
    parser.add_argument("--liveness", type=float, default=10.0,
                        help="nsqd's --replication-liveness-timeout, seconds (its default: 10)")
    args = parser.parse_args()
    faults = args.faults.split(",")
    unknown = set(faults) - set(FAULTS)
    if unknown:
        parser.error(f"no fault {', '.join(sorted(unknown))}: of {', '.join(FAULTS)}")
    reason = netns.unavailable() or (None if Path(ETCD).exists() else "etcd is not installed (etcd-server)")
    if reason:
        raise SystemExit(reason)
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as scratch:
        ledger, outcomes = asyncio.run(run(args.rounds, faults, args.liveness, Path(scratch)))
    report(ledger, outcomes)
    sys.exit(1 if ledger.lost or ledger.unexpected else 0)


if __name__ == "__main__":
    main()
