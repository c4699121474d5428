"""kill -9 at the worst moments, the long run: ``.venv/bin/python -m bench.crash_points [--rounds 20]``.

Each round is harness.crash_points' (the scenario tests/functional/test_crash_points.py runs 4 times): nsqd at
``--mem-queue-size=0`` with segments rolling every 7 messages, producers creating a topic every 5 messages (each
rewrites nsqd.dat) and publishing (PUB and DPUB) to a topic whose consumer finishes, requeues and holds messages,
killed with SIGKILL at a random moment; then restarted and drained. Prints the rounds run, the messages
acknowledged, lost (must be 0), delivered again (finished or requeued ones read again: at-least-once), still
deferred (published or requeued with a minute's delay) and the restart's seconds. Exits 1 if anything was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from pathlib import Path

from harness.crash_points import RoundResult, crash_round


async def run(rounds: int, seed: int) -> list[RoundResult]:
    rng = random.Random(seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="crash-points-") as scratch:
        for number in range(1, rounds + 1):
            data_path = Path(scratch) / f"round{number}"
            data_path.mkdir()
            result = await crash_round(data_path, rng)
            results.append(result)
            print(f"round {number}: {result.acknowledged} acknowledged, {result.lost} lost, "
                  f"{result.delivered_again} delivered again, {result.still_deferred} still deferred, "
                  f"restarted in {result.restart_seconds:.2f} s",
                  flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=19)
    args = parser.parse_args()
    results = asyncio.run(run(args.rounds, args.seed))
    lost = sum(result.lost for result in results)
    restarts = sorted(result.restart_seconds for result in results)
    print(f"rounds run: {len(results)}")
    print(f"messages acknowledged: {sum(result.acknowledged for result in results)}")
    print(f"lost: {lost}")
    print(f"delivered again: {sum(result.delivered_again for result in results)}")
    print(f"still deferred (published or requeued with a minute's delay): "
          f"{sum(result.still_deferred for result in results)}")
    print(f"restart: {restarts[0]:.2f}-{restarts[-1]:.2f} s (process start to listening)")
    sys.exit(1 if lost else 0)


if __name__ == "__main__":
    main()
