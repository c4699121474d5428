"""nsqd throughput benchmark: ``make bench`` or ``.venv/bin/python -m bench.run [--duration 10]``.

Starts an nsqd and drives it from separate processes with 200-byte messages:
  (a) MPUB, batches of 200, over 2 connections;
  (b) PUB, one message per request, synchronous, over 2 connections;
  (c) one consumer with RDY 2500 that FINs every message of the backlog (a) left behind.
Prints msg/s and nsqd's CPU seconds per million messages for each, nsqd's idle RSS, and the ceiling of the
load generators themselves against stand-in servers that do no work.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

from bench import load, sinks
from tests.processes import NSQDProcess, start_nsqd

TOPIC = "bench"
SIZE = 200


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def parallel_publish(pool: ProcessPoolExecutor, address: tuple[str, int], batch: int, workers: int,
                     duration: float) -> tuple[int, float]:
    start_at = time.time() + 0.5
    futures = [pool.submit(load.publish, address, TOPIC, batch, SIZE, start_at, duration) for _ in range(workers)]
    return sum(future.result() for future in futures), duration


def measure(name: str, pid: int | None, run: Callable[[], tuple[int, float]]) -> dict[str, Any]:
    cpu_before = cpu_seconds(pid) if pid else 0.0
    messages, seconds = run()
    cpu = cpu_seconds(pid) - cpu_before if pid else 0.0
    row = {"name": name, "messages": messages, "rate": messages / seconds if seconds else 0.0,
           "cpu_per_million": cpu / messages * 1e6 if messages and pid else None}
    cpu_text = f"{row['cpu_per_million']:6.2f} nsqd CPU s / M msgs" if pid else ""
    print(f"{name:<46} {row['rate']:>12,.0f} msg/s  ({messages:,} msgs)  {cpu_text}", flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per publishing phase")
    parser.add_argument("--nsqd-args", default="", help="extra nsqd flags")
    parser.add_argument("--skip-ceiling", action="store_true", help="do not measure the generators' ceilings")
    parser.add_argument("--disk", action="store_true",
                        help="also run (a) and (c) with --mem-queue-size=0: every message through the disk queue")
    args = parser.parse_args()
    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork"))
    pool.submit(time.sleep, 0).result()

    if not args.skip_ceiling:
        print("-- load generators against do-nothing servers (their ceiling)")
        sink, listener = sinks.publish_sink()
        measure("(a) MPUB x200 generator, 2 conns", None, lambda: parallel_publish(pool, sink, 200, 2, 3))
        measure("(b) PUB generator, 2 conns", None, lambda: parallel_publish(pool, sink, 1, 2, 3))
        listener.close()
        source, listener = sinks.message_source()
        measure("(c) consumer, RDY 2500", None,
                lambda: pool.submit(load.consume, source, TOPIC, "ch", 2500, 2_000_000, 10).result())
        listener.close()

    try:
        with tempfile.TemporaryDirectory() as data_path:
            nsqd = start_nsqd("--mem-queue-size=100000000", *args.nsqd_args.split(), data_path=Path(data_path))
            pid = nsqd.process.pid
            try:
                time.sleep(1.0)
                print(f"-- nsqd (pid {pid}): idle RSS {rss_mib(pid):.1f} MiB")
                run_phases(pool, nsqd, pid, args.duration)
                print(f"-- nsqd RSS after the run {rss_mib(pid):.1f} MiB")
            finally:
                nsqd.stop()
        if args.disk:
            with tempfile.TemporaryDirectory() as data_path:
                run_disk_phases(pool, Path(data_path), args.duration, args.nsqd_args.split())
    finally:
        pool.shutdown()


def run_phases(pool: ProcessPoolExecutor, nsqd: NSQDProcess, pid: int, duration: float) -> None:
    address = nsqd.tcp_address
    published = measure("(a) MPUB x200, 200 B, 2 conns", pid, lambda: parallel_publish(pool, address, 200, 2,
                                                                                        duration))
    single = measure("(b) PUB, 200 B, 2 conns, synchronous", pid,
                     lambda: parallel_publish(pool, address, 1, 2, duration))
    backlog = published["messages"] + single["messages"]
    measure("(c) consume backlog, RDY 2500, FIN each", pid,
            lambda: pool.submit(load.consume, address, TOPIC, "ch", 2500, backlog, 600).result())


def run_disk_phases(pool: ProcessPoolExecutor, data_path: Path, duration: float, nsqd_args: list[str]) -> None:
    """(a) and (c) with every message through the disk queue. The channel exists before publishing, so messages
    go to its disk queue directly (a new channel would first copy the topic's whole backlog)."""
    nsqd = start_nsqd("--mem-queue-size=0", *nsqd_args, data_path=data_path)
    pid = nsqd.process.pid
    record = 4 + 26 + SIZE
    try:
        print(f"-- nsqd with --mem-queue-size=0 (pid {pid}), data in {data_path}")
        nsqd.http("POST", f"/topic/create?topic={TOPIC}")
        nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel=ch")
        probe_pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"))
        probing = probe_pool.submit(load.probe, nsqd.tcp_address, time.time() + 0.5, duration)
        written = measure("(a) MPUB x200 to disk, 2 conns", pid,
                          lambda: parallel_publish(pool, nsqd.tcp_address, 200, 2, duration))
        print(f"{'':<46} {written['rate'] * record / 1e6:>12,.1f} MB/s written")
        latencies = sorted(probing.result())
        probe_pool.shutdown()
        print(f"{'   another client, PUB every 10 ms meanwhile':<46} round trip p50 "
              f"{latencies[len(latencies) // 2] * 1e3:.1f} ms, p99 {latencies[int(len(latencies) * 0.99)] * 1e3:.1f} ms, "
              f"max {latencies[-1] * 1e3:.1f} ms")
        read = measure("(c) consume from disk, RDY 2500, FIN each", pid,
                       lambda: pool.submit(load.consume, nsqd.tcp_address, TOPIC, "ch", 2500, written["messages"],
                                           600).result())
        print(f"{'':<46} {read['rate'] * record / 1e6:>12,.1f} MB/s read")
    finally:
        nsqd.stop()


if __name__ == "__main__":
    main()
