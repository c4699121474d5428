"""Publishing through a faulty network, for as long as asked: ``.venv/bin/python -m bench.faulty_network
[--seconds 120]``.

Runs the scenario of ``harness.faulty_network`` (producers behind a proxy that delays, drops bytes, goes half-open
and cuts one side, in turns, while a direct client publishes beside them) against an nsqd at its defaults but for
``NSQD_FLAGS``, round after round for about ``--seconds``, then drains the topic and prints the publishes
attempted, acknowledged, failed (errors and timeouts, by phase), lost, duplicated and "maybe" (failed yet taken).
The test runs one short round of the same. Exits 1 if an acknowledged message was lost, a publish hung, nsqd took
a body or a topic nobody published, a publisher did not recover, or nsqd died.

Every message is kept until the end to be compared (about 300 bytes each, in this process): ``--pause`` (seconds
between a publisher's publishes) keeps the volume in hand.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from harness import faulty_network
from harness.processes import start_nsqd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="how long to go through the faults")
    parser.add_argument("--phase-seconds", type=float, default=3.0, help="how long each fault lasts")
    parser.add_argument("--publishers", type=int, default=8)
    parser.add_argument("--pause", type=float, default=0.002, help="seconds between a publisher's publishes")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    round_seconds = len(faulty_network.PHASES) * (args.phase_seconds + faulty_network.RECOVERY)
    rounds = max(1, round(args.seconds / round_seconds))
    nsqd = start_nsqd(*faulty_network.NSQD_FLAGS)
    started = time.monotonic()
    try:
        figures = asyncio.run(faulty_network.run(nsqd, rounds, args.phase_seconds, args.publishers, args.pause,
                                                 args.seed))
        alive = nsqd.process.poll() is None
    finally:
        nsqd.stop()
    client_errors = sum(" - E_" in line for line in nsqd.log_lines)
    print(f"{rounds} rounds of {len(faulty_network.PHASES)} faults, {args.publishers} publishers, "
          f"{time.monotonic() - started:.0f} s in all")
    print("\n".join(figures.lines()))
    print(f"nsqd: {'running' if alive else 'DEAD'} at the end, logged {client_errors} client errors")
    failed = (figures.lost or figures.hangs or figures.unknown or figures.stray_topics or figures.unrecovered
              or not alive)
    raise SystemExit(1 if failed else 0)


if __name__ == "__main__":
    main()
