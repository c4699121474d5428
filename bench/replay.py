"""Retention and rewinds: ``.venv/bin/python -m bench.replay [--duration 10] [--messages 1000000]``.

1. What retention costs a publish: (b) PUB one message per request and (a) MPUB x200, each over 2 connections
   awaiting their OKs, 200-byte messages, against nsqd at its defaults with its topic's channel in place, once with
   retention off (NSQ's behaviour) and once with ``--retention-time=24h``, alternating, ``--rounds`` times: nsqd's
   CPU seconds per million messages, and the ratio on/off.
2. What a rewind costs: ``--messages`` messages published (MPUB x200); a rewind while all of them are still pending
   (what its scan of the channel costs: nothing is put back); then consumed (RDY 2500, FIN each) as ``make bench``'s
   (c) consumes a backlog; then ``/channel/rewind`` (timed) of those messages, and the same messages consumed again:
   the rate of both together beside the first consumption's; ``--rounds`` times, each with a fresh backlog, and the
   median ratio.
3. Disk bytes per retained 200-byte message.

First, as ``make bench`` does, the load generators' own ceiling against servers that do no work.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench import load
from bench.machine import machine_line
from bench.run import SIZE, TOPIC, cpu_seconds, measure, measure_ceilings, parallel_publish
from harness.processes import NSQDProcess, start_nsqd, wait_for

RETAINING = "--retention-time=24h"


def prepared_nsqd(data_path: Path, *flags: str) -> NSQDProcess:
    nsqd = start_nsqd(*flags, data_path=data_path)
    for path in (f"/topic/create?topic={TOPIC}", f"/channel/create?topic={TOPIC}&channel=ch"):
        assert nsqd.http("POST", path)[0] == 200
    return nsqd


def drain(pool: ProcessPoolExecutor, nsqd: NSQDProcess) -> None:
    backlog = json.loads(nsqd.http("GET", f"/stats?format=json&topic={TOPIC}")[2])["topics"][0]["channels"][0]["depth"]
    if backlog:
        pool.submit(load.consume, nsqd.tcp_address, TOPIC, "ch", 2500, backlog, 600).result()


def publishing_cost(pool: ProcessPoolExecutor, duration: float, rounds: int) -> None:
    figures: dict[tuple[str, bool], list[float]] = {}
    for _ in range(rounds):
        for retaining in (False, True):
            with TemporaryDirectory() as scratch:
                nsqd = prepared_nsqd(Path(scratch), *([RETAINING] if retaining else []))
                try:
                    label = "retention on " if retaining else "retention off"
                    for name, batch in (("(b) PUB", 1), ("(a) MPUB x200", 200)):
                        row = measure(f"{name}, {label}", nsqd.process.pid,
                                      lambda: parallel_publish(pool, nsqd.tcp_address, batch, 2, duration))
                        figures.setdefault((name, retaining), []).append(row["cpu_per_million"])
                        drain(pool, nsqd)
                finally:
                    nsqd.stop()
    for name in ("(b) PUB", "(a) MPUB x200"):
        off, on = statistics.median(figures[(name, False)]), statistics.median(figures[(name, True)])
        print(f"{name}: median nsqd CPU s / M msgs, off {off:.2f}, on {on:.2f}: {on / off:.2f}x", flush=True)


def rewind_cost(pool: ProcessPoolExecutor, messages: int, rounds: int) -> None:
    with TemporaryDirectory() as scratch:
        nsqd = prepared_nsqd(Path(scratch), RETAINING)
        try:
            nsqd_pid = nsqd.process.pid
            publish(nsqd, messages)
            started = time.perf_counter()
            status, _, answer = nsqd.http("POST", f"/channel/rewind?topic={TOPIC}&channel=ch&since=earliest")
            print(f"rewind with all {messages:,} still pending in the channel: {time.perf_counter() - started:.2f} s "
                  f"(the scan of what it has; answered {answer.decode()})", flush=True)
            ratios = []
            for round_ in range(rounds):
                since = "earliest"
                if round_:  # a fresh backlog, and a rewind of it alone
                    since = datetime.now(timezone.utc).isoformat(timespec="microseconds").replace("+00:00", "Z")
                    publish(nsqd, messages)
                first = consume_row(pool, nsqd, "(c) consume the backlog, RDY 2500, FIN each", messages)
                cpu_before, started = cpu_seconds(nsqd_pid), time.perf_counter()
                status, _, answer = nsqd.http("POST", f"/channel/rewind?topic={TOPIC}&channel=ch&since={since}")
                seconds, cpu = time.perf_counter() - started, cpu_seconds(nsqd_pid) - cpu_before
                rewound = json.loads(answer)["rewound"]
                print(f"rewind of {rewound:,} messages: {seconds:.2f} s, nsqd CPU {cpu:.2f} s", flush=True)
                again = consume_row(pool, nsqd, "(c) consume what the rewind put back", rewound)
                total = seconds + again["messages"] / again["rate"]
                ratios.append(again["messages"] / total / first["rate"])
                print(f"rewind and consume: {again['messages'] / total:,.0f} msg/s, {ratios[-1]:.2f}x consuming "
                      f"the backlog", flush=True)
            print(f"rewind and consume: median {statistics.median(ratios):.2f}x consuming a backlog "
                  f"({', '.join(f'{ratio:.2f}' for ratio in ratios)})", flush=True)
            stats: dict[str, Any] = json.loads(nsqd.http("GET", f"/stats?format=json&topic={TOPIC}")[2])["topics"][0]
            print(f"disk: {stats['retained_bytes'] / stats['retained_count']:.1f} bytes per retained "
                  f"{SIZE}-byte message ({stats['retained_count']:,} retained)", flush=True)
        finally:
            nsqd.stop()


def publish(nsqd: NSQDProcess, messages: int) -> None:
    bodies = b"\n".join([b"x" * SIZE] * 200)
    for _ in range(messages // 200):
        assert nsqd.http("POST", f"/mpub?topic={TOPIC}", bodies)[0] == 200


def consume_row(pool: ProcessPoolExecutor, nsqd: NSQDProcess, name: str, count: int) -> dict[str, Any]:
    row = measure(name, nsqd.process.pid,
                  lambda: (*pool.submit(load.consume, nsqd.tcp_address, TOPIC, "ch", 2500, count, 600).result(), None))
    # the consumer is gone once nsqd has seen it go: until then it has room, and what is published next would be
    # sent to it and wait in flight for its timeout
    wait_for(lambda: nsqd.channel_stats(TOPIC, "ch").get("client_count") == 0, 10, "the consumer gone")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per publishing phase")
    parser.add_argument("--rounds", type=int, default=3, help="alternating off/on rounds of publishing, and rounds of rewinding")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages published, consumed, rewound")
    parser.add_argument("--skip-ceiling", action="store_true", help="do not measure the generators' ceilings")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork"))
    try:
        if not args.skip_ceiling:
            measure_ceilings(pool)
        publishing_cost(pool, args.duration, args.rounds)
        rewind_cost(pool, args.messages, args.rounds)
    finally:
        pool.shutdown()


if __name__ == "__main__":
    main()
