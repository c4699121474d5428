"""What ``--workers`` costs and buys: the relay's cost per message, and the rate from 1 to N workers.

``.venv/bin/python -m bench.workers [--workers 1,2] [--duration 5] [--rounds 2] [--bench-writer PATH]``

For each worker count, an nsqd at NSQ's defaults otherwise (its topic's channel in place) takes, in turn:
PUB one message per request over 2 connections each awaiting its OK (no batching: each event-loop turn carries one
or two requests), MPUB x200 over 2 connections, and with ``--bench-writer`` (NSQ's own ``bench_writer``, built
from source) PUB one message per request over 16 and 64 connections (``GOMAXPROCS`` = connections, as bench_writer
opens one per core), where each turn carries many. Printed per load: msg/s, the CPU of the whole nsqd (every
process) and of the process that holds the queues, in microseconds per message, and the difference to
``--workers=1``: what the relay costs per message. Rounds alternate the worker counts; the median is printed.
The generator shares the machine's cores with nsqd: the machine line says how many there are.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import load
from bench.machine import machine_line
from bench.run import SIZE, TOPIC, cpu_seconds
from harness.processes import NSQDProcess, start_nsqd

# load name -> (kind, connections, batch)
LOADS = {"PUB, 2 conns": ("python", 2, 1), "MPUB x200, 2 conns": ("python", 2, 200),
         "PUB, 16 conns (bench_writer)": ("go", 16, 1), "PUB, 64 conns (bench_writer)": ("go", 64, 1)}


def run_load(pool: ProcessPoolExecutor, nsqd: NSQDProcess, load_name: str, duration: float,
             bench_writer: str | None) -> tuple[float, float, float] | None:
    """msg/s, then the CPU microseconds per message of every process of nsqd, and of its queues' process."""
    kind, connections, batch = LOADS[load_name]
    if kind == "go" and not bench_writer:
        return None
    pids = nsqd.pids()
    before = [cpu_seconds(pid) for pid in pids]
    if kind == "python":
        start_at = time.time() + 0.5
        futures = [pool.submit(load.publish, nsqd.tcp_address, TOPIC, batch, SIZE, start_at, duration)
                   for _ in range(connections)]
        messages = sum(future.result()[0] for future in futures)
        seconds = duration
    else:
        assert bench_writer is not None
        output = subprocess.run(
            [bench_writer, f"--nsqd-tcp-address={nsqd.tcp_address_text}", f"--topic={TOPIC}", f"--size={SIZE}",
             f"--batch-size={batch}", f"--runfor={duration}s"],
            env={**os.environ, "GOMAXPROCS": str(connections)}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, check=True).stdout
        match = re.search(r"duration: ([\d.]+)s - [\d.]+mb/s - ([\d.]+)ops/s", output)
        assert match, output
        seconds = float(match.group(1))
        messages = int(float(match.group(2)) * seconds)  # bench_writer counts messages, not requests
    spent = [cpu_seconds(pid) - was for pid, was in zip(pids, before)]
    return messages / seconds, sum(spent) / messages * 1e6, spent[0] / messages * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default=f"1,{os.cpu_count() or 1}", help="worker counts to compare")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--bench-writer", help="NSQ's bench_writer, for the loads of many connections")
    args = parser.parse_args()
    counts = sorted({int(each) for each in args.workers.split(",")})
    print(machine_line(), flush=True)
    results: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    with ProcessPoolExecutor(max_workers=2) as pool:
        for round_number in range(args.rounds):
            for workers in counts if round_number % 2 == 0 else reversed(counts):
                with tempfile.TemporaryDirectory() as data_path:
                    nsqd = start_nsqd(f"--workers={workers}", data_path=Path(data_path))
                    try:
                        nsqd.http("POST", f"/topic/create?topic={TOPIC}")
                        nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel=ch")
                        time.sleep(1.0)
                        for name in LOADS:
                            # the backlog the last load left would make the next one a disk-bound load
                            nsqd.http("POST", f"/channel/empty?topic={TOPIC}&channel=ch")
                            if (row := run_load(pool, nsqd, name, args.duration, args.bench_writer)) is not None:
                                results.setdefault((name, workers), []).append(row)
                                print(f"  round {round_number + 1}, --workers={workers}, {name}: {row[0]:,.0f} msg/s, "
                                      f"{row[1]:.2f} us/msg in all, {row[2]:.2f} in the queues' process", flush=True)
                    finally:
                        nsqd.stop()
    print(f"\nmedians of {args.rounds} rounds ({args.duration:g} s each):")
    for name in LOADS:
        base = results.get((name, counts[0]))
        for workers in counts:
            rows = results.get((name, workers))
            if not rows or not base:
                continue
            rate, total, owner = (statistics.median(row[i] for row in rows) for i in range(3))
            base_rate, base_total = (statistics.median(row[i] for row in base) for i in range(2))
            print(f"{name:<30} --workers={workers}: {rate:>9,.0f} msg/s ({rate / base_rate:.2f}x), CPU {total:6.2f} "
                  f"us/msg in all ({total - base_total:+.2f}), {owner:6.2f} in the queues' process")


if __name__ == "__main__":
    main()
