"""PUB x1 at a slower pace: ``.venv/bin/python -m bench.paced [--pauses 0,30,60,100,150,300] [--compare-with=NSQD]``.

``make bench``'s (b) sends each PUB as soon as the previous OK arrives. A slower client, or the same client on a
slower core, leaves a gap between requests, and the gap decides how an nsqd waits for the next one: sleeping in
epoll costs a wake-up per request, spinning costs the spin. This runs (b) (2 connections, each awaiting its OK)
with each client spinning ``pause`` microseconds after every OK, and prints msg/s and nsqd's CPU microseconds per
message at each pause, against nsqd at NSQ's default flags with the topic's channel in place; ``--compare-with``
runs the same against another nsqd (NSQ's own, ``'env GOMAXPROCS=1 .../nsqd'``) and prints both ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import load
from bench.machine import machine_line
from bench.run import SIZE, TOPIC, cpu_seconds, warm_up
from harness.processes import start_nsqd

CONNECTIONS = 2


def paced_rows(pool: ProcessPoolExecutor, program: list[str] | None, pauses: list[int],
               duration: float) -> list[tuple[float, float]]:
    """(msg/s, nsqd CPU µs per message) at each pause."""
    rows = []
    with tempfile.TemporaryDirectory() as data_path:
        nsqd = start_nsqd(data_path=Path(data_path), program=program)
        try:
            nsqd.http("POST", f"/topic/create?topic={TOPIC}")
            nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel=ch")
            print(f"-- {program[-1] if program else 'nsqd'} at NSQ's default flags, the topic's channel in place")
            for pause in pauses:
                cpu_before = cpu_seconds(nsqd.process.pid)
                start_at = time.time() + 0.5
                futures = [pool.submit(load.publish, nsqd.tcp_address, TOPIC, 1, SIZE, start_at, duration, b"",
                                       pause / 1e6) for _ in range(CONNECTIONS)]
                messages = sum(future.result()[0] for future in futures)
                cpu = cpu_seconds(nsqd.process.pid) - cpu_before
                rows.append((messages / duration, cpu / messages * 1e6))
                print(f"pause {pause:>4} us {rows[-1][0]:>12,.0f} msg/s  {rows[-1][1]:6.1f} nsqd CPU us / msg",
                      flush=True)
        finally:
            nsqd.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pauses", default="0,30,60,100,150,300", help="microseconds, comma-separated")
    parser.add_argument("--duration", type=float, default=4.0, help="seconds per pause")
    parser.add_argument("--compare-with", metavar="NSQD", default="", help="another nsqd taking NSQ's flags")
    args = parser.parse_args()
    pauses = [int(pause) for pause in args.pauses.split(",")]
    print(machine_line(), flush=True)
    with ProcessPoolExecutor(CONNECTIONS) as pool:
        warm_up(pool)
        ours = paced_rows(pool, None, pauses, args.duration)
        if args.compare_with:
            theirs = paced_rows(pool, args.compare_with.split(), pauses, args.duration)
            print(f"-- this nsqd against {args.compare_with}: msg/s, and CPU per message (lower is better)")
            for pause, (my_rate, my_cpu), (their_rate, their_cpu) in zip(pauses, ours, theirs):
                print(f"pause {pause:>4} us {my_rate / their_rate:6.2f}x msg/s   {my_cpu / their_cpu:6.2f}x CPU / msg")


if __name__ == "__main__":
    main()
