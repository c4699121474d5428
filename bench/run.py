"""nsqd throughput benchmark: ``make bench`` or ``.venv/bin/python -m bench.run [--duration 10]``.

Starts an nsqd at NSQ's default flags (``--nsqd-args`` adds flags, for a tuned second line), its topic with the
channel in place as a topic with consumers has (``--without-channel`` adds a run without), and drives it from
separate processes with 200-byte messages, the loads NSQ's own bench_writer, bench_reader and ``wrk`` produce:
  (a) MPUB, batches of 200, over 2 connections, each waiting for its OK;
  (b) PUB, one message per request, over 2 connections, each waiting for its OK (round trip p50/p99);
  (b') MPUB of one message, the same way (what bench_writer --batch-size=1 sends);
  (d) HTTP POST /pub, one message per request, from 16 keep-alive connections (wrk -t1 -c16 when installed);
  (d') HTTP POST /mpub of one message, the same way;
  (c) one consumer with RDY 2500 that FINs every message the phases above left behind.
Prints msg/s and nsqd's CPU seconds per million messages for each, nsqd's idle RSS, and first the ceiling of the
load generators themselves against stand-in servers that do no work.

Then, where etcd is installed (Debian's etcd-server; ``--no-replication`` skips it), (b), (a) and (c) against the
first of three nsqd at ``--replication-factor=3`` (a one-member etcd beside them, every nsqd at its defaults
otherwise), the CPU summed over all three, and each figure's ratio to the unreplicated nsqd's of this sitting.
"""

from __future__ import annotations

import argparse
import compileall
import json
import multiprocessing
import os
import shlex
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

from bench import http_load, load, sinks
from bench.machine import machine_line
from harness.etcd import ETCD, start_etcd
from harness.processes import ROOT, NSQDProcess, start_nsqd, wait_for

TOPIC = "bench"
SIZE = 200
HTTP_CONNECTIONS = 16
# publishes a connection keeps unanswered in the replicated line for asynchronous producers
PUBLISH_WINDOW = 16

# messages, seconds, and the round trip's p50 and p99 in seconds (None where the generator does not time them)
Outcome = tuple[int, float, "tuple[float, float] | None"]


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
                     duration: float, command: bytes = b"", window: int = 1) -> Outcome:
    start_at = time.time() + 0.5
    futures = [pool.submit(load.publish, address, TOPIC, batch, SIZE, start_at, duration, command, 0.0, window)
               for _ in range(workers)]
    results = [future.result() for future in futures]
    return sum(count for count, _ in results), duration, _percentiles([trip for _, trips in results for trip in trips])


def http_publish(pool: ProcessPoolExecutor, address: tuple[str, int], path: str, duration: float) -> Outcome:
    result = http_load.run(pool, address, path, SIZE, HTTP_CONNECTIONS, duration)
    if result.errors:
        print(f"   !! {result.errors:,} requests failed")
    return result.requests, result.seconds, (result.p50, result.p99)


def measure(name: str, pid: int | list[int] | None, run: Callable[[], Outcome]) -> dict[str, Any]:
    """One phase; ``pid``: the nsqd whose CPU is counted (several: summed)."""
    pids = [] if pid is None else pid if isinstance(pid, list) else [pid]
    cpu_before = sum(map(cpu_seconds, pids))
    messages, seconds, round_trip = run()
    cpu = sum(map(cpu_seconds, pids)) - cpu_before
    row = {"name": name, "messages": messages, "rate": messages / seconds if seconds else 0.0,
           "cpu_per_million": cpu / messages * 1e6 if messages and pids else None}
    cpu_text = f"{row['cpu_per_million']:6.2f} nsqd CPU s / M msgs" if pids else ""
    print(f"{name:<46} {row['rate']:>12,.0f} msg/s  ({messages:,} msgs)  {cpu_text}", flush=True)
    if round_trip is not None:
        print(f"{'':<46} round trip p50 {round_trip[0] * 1e6:,.0f} us, p99 {round_trip[1] * 1e6:,.0f} us", flush=True)
    return row


def _percentiles(round_trips: list[float]) -> tuple[float, float] | None:
    if not round_trips:
        return None
    ordered = sorted(round_trips)
    return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per publishing phase")
    parser.add_argument("--nsqd-args", default="", help="extra nsqd flags (the headline uses none)")
    parser.add_argument("--skip-ceiling", action="store_true", help="do not measure the generators' ceilings")
    parser.add_argument("--compare-with", metavar="NSQD", action="append", default=[],
                        help="then the same phases against another nsqd (NSQ's own binary; a command line such as "
                             "'env GOMAXPROCS=1 .../nsqd' too), for the ratio; may be given more than once (Go's "
                             "nsqd at its defaults, the headline, then on one core)")
    parser.add_argument("--without-channel", action="store_true",
                        help="then the phases again with no channel while publishing (the topic keeps the backlog)")
    parser.add_argument("--no-replication", action="store_true",
                        help="skip the phases against three nsqd at replication factor 3")
    parser.add_argument("--disk", action="store_true",
                        help="also run (a) and (c) with --mem-queue-size=0 and a channel: every message through "
                             "the disk queue of the channel")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    # nsqd runs as an installed package does, from compiled bytecode (compiling at every start costs memory)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for package in ("shared", "services", "apps"):
        compileall.compile_dir(ROOT / package, quiet=1)
    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork"))
    pool.submit(time.sleep, 0).result()

    if not args.skip_ceiling:
        measure_ceilings(pool)
    else:
        warm_up(pool)
    try:
        for with_channel in (True, False) if args.without_channel else (True,):
            ours = run_nsqd(pool, args.nsqd_args.split(), args.duration, with_channel=with_channel)
            others = [(other, run_nsqd(pool, args.nsqd_args.split(), args.duration, shlex.split(other), with_channel))
                      for other in args.compare_with]
            for other, theirs in others:
                print(f"-- this nsqd against {other}: the rate's ratio, and the CPU per message's")
                for mine, their in zip(ours, theirs):
                    cpu = (mine["cpu_per_million"] / their["cpu_per_million"]
                           if mine["cpu_per_million"] and their["cpu_per_million"] else 0)
                    print(f"{mine['name']:<46} {mine['rate'] / their['rate'] if their['rate'] else 0:>12.2f}x "
                          f"the rate, {cpu:.2f}x the CPU")
        if not args.no_replication:
            run_replicated(pool, args.duration, ours)
        if args.disk:
            with tempfile.TemporaryDirectory() as data_path:
                run_disk_phases(pool, Path(data_path), args.duration, args.nsqd_args.split())
    finally:
        pool.shutdown()


def run_nsqd(pool: ProcessPoolExecutor, flags: list[str], duration: float, program: list[str] | None = None,
             with_channel: bool = True) -> list[dict[str, Any]]:
    """The phases against one nsqd. ``with_channel``: the topic's channel exists while publishing, as a topic with
    consumers has (every message is copied into it); else the topic keeps the backlog until (c) subscribes."""
    with tempfile.TemporaryDirectory() as data_path:
        nsqd = start_nsqd(*flags, data_path=Path(data_path), program=program)
        pid = nsqd.process.pid
        pids = nsqd.pids()  # with --workers, its workers' CPU counts too
        try:
            if with_channel:
                nsqd.http("POST", f"/topic/create?topic={TOPIC}")
                nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel=ch")
            time.sleep(1.0)
            settings = f"with {' '.join(flags)}" if flags else "at NSQ's default flags"
            topic = "the topic's channel in place" if with_channel else "no channel while publishing"
            print(f"-- {program[0] if program else 'nsqd'} {settings}, {topic} (pid {pid}): "
                  f"idle RSS {rss_mib(pid):.1f} MiB")
            rows = run_phases(pool, nsqd, pids, duration)
            print(f"-- nsqd RSS after the run {rss_mib(pid):.1f} MiB")
            return rows
        finally:
            nsqd.stop()


def run_replicated(pool: ProcessPoolExecutor, duration: float, unreplicated: list[dict[str, Any]]) -> None:
    """(b), (a) and (c) against the first of three nsqd at replication factor 3, the CPU of all three counted."""
    if not Path(ETCD).exists():
        print("-- replication: etcd is not installed (Debian's etcd-server), not measured")
        return
    etcd = start_etcd()
    nodes: list[NSQDProcess] = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for index in range(3):
                (Path(scratch) / str(index)).mkdir()
                nodes.append(start_nsqd(f"--etcd-address={etcd.addresses[0]}", "--replication-address=127.0.0.1:0",
                                        "--replication-factor=3", data_path=Path(scratch) / str(index)))
            for nsqd in nodes:
                wait_for(lambda: len(_replication(nsqd).get("in_sync_recorded", [])) == 2, 30,
                         "every nsqd mirrored on both others")
            origin, pids = nodes[0], [nsqd.process.pid for nsqd in nodes]
            origin.http("POST", f"/topic/create?topic={TOPIC}")
            origin.http("POST", f"/channel/create?topic={TOPIC}&channel=ch")
            print("-- three nsqd at --replication-factor=3, publishing to the first, the topic's channel in place "
                  "(CPU: all three)")
            rows = [measure("(b) PUB, replicated", pids, lambda: parallel_publish(pool, origin.tcp_address, 1, 2,
                                                                                  duration)),
                    measure(f"(b) PUB, {PUBLISH_WINDOW} in flight a conn, replicated", pids,
                            lambda: parallel_publish(pool, origin.tcp_address, 1, 2, duration,
                                                     window=PUBLISH_WINDOW)),
                    measure("(a) MPUB x200, replicated", pids,
                            lambda: parallel_publish(pool, origin.tcp_address, 200, 2, duration))]
            backlog = _backlog(origin)
            rows.append(measure("(c) consume backlog, FIN each, replicated", pids, lambda: (*pool.submit(
                load.consume, origin.tcp_address, TOPIC, "ch", 2500, backlog, 600).result(), None)))
    finally:
        for nsqd in nodes:
            nsqd.stop()
        etcd.stop()
    print("-- replicated against the unreplicated nsqd above (each request awaiting its OK): rate, CPU per message")
    plain = {row["name"].split(",")[0]: row for row in unreplicated}
    for row in rows:
        if "in flight" in row["name"]:
            continue  # no such unreplicated row: NSQ answers a connection's publishes one by one anyway
        other = plain[row["name"].split(",")[0]]
        print(f"{row['name']:<46} {row['rate'] / other['rate']:>12.2f}x  "
              f"{row['cpu_per_million'] / other['cpu_per_million']:6.2f}x")


def _replication(nsqd: NSQDProcess) -> dict[str, Any]:
    return dict(json.loads(nsqd.http("GET", "/stats?format=json&topic=-")[2]).get("replication") or {})


def warm_up(pool: ProcessPoolExecutor) -> None:
    """Two seconds of PUBs from both generator processes to a do-nothing server, so that the first nsqd measured
    does not meet cold generators: a busy-polling nsqd spins while it waits for the next request, so a slower
    generator shows as more nsqd CPU per message (the same nsqd measured twice without this came out 1-2 µs worse
    per PUB the first time, in two sittings of two)."""
    sink, listener = sinks.publish_sink()
    parallel_publish(pool, sink, 1, 2, 2)
    listener.close()


def measure_ceilings(pool: ProcessPoolExecutor) -> None:
    print("-- load generators against do-nothing servers (their ceiling)")
    sink, listener = sinks.publish_sink()
    measure("(a) MPUB x200 generator, 2 conns", None, lambda: parallel_publish(pool, sink, 200, 2, 3))
    measure("(b) PUB generator, 2 conns", None, lambda: parallel_publish(pool, sink, 1, 2, 3))
    listener.close()
    source, listener = sinks.message_source()
    measure("(c) consumer, RDY 2500", None,
            lambda: (*pool.submit(load.consume, source, TOPIC, "ch", 2500, 2_000_000, 10).result(), None))
    listener.close()
    http_sink, process = sinks.http_sink()
    generator = f"wrk -t1 -c{HTTP_CONNECTIONS}" if http_load.wrk_path() else "in-repo, no wrk installed"
    measure(f"(d) HTTP generator ({generator})", None, lambda: http_publish(pool, http_sink, "/pub?topic=t", 3))
    process.terminate()
    process.join()


def run_phases(pool: ProcessPoolExecutor, nsqd: NSQDProcess, pid: int | list[int],
               duration: float) -> list[dict[str, Any]]:
    address, http = nsqd.tcp_address, ("127.0.0.1", nsqd.http_port)
    rows = [
        measure("(b) PUB, 200 B, 2 conns, each awaiting its OK", pid,
                lambda: parallel_publish(pool, address, 1, 2, duration)),
        measure("(b') MPUB of 1, 200 B, 2 conns, awaiting OK", pid,
                lambda: parallel_publish(pool, address, 1, 2, duration, b"MPUB")),
        measure(f"(d) HTTP /pub, 200 B, {HTTP_CONNECTIONS} keep-alive conns", pid,
                lambda: http_publish(pool, http, f"/pub?topic={TOPIC}", duration)),
        measure(f"(d') HTTP /mpub of 1, 200 B, {HTTP_CONNECTIONS} conns", pid,
                lambda: http_publish(pool, http, f"/mpub?topic={TOPIC}", duration)),
        measure("(a) MPUB x200, 200 B, 2 conns", pid, lambda: parallel_publish(pool, address, 200, 2, duration)),
    ]
    backlog = _backlog(nsqd)
    published = sum(row["messages"] for row in rows)
    print(f"{'':<46} nsqd holds {backlog:,} messages; {published:,} were acknowledged", flush=True)
    rows.append(measure("(c) consume backlog, RDY 2500, FIN each", pid,
                        lambda: (*pool.submit(load.consume, address, TOPIC, "ch", 2500, backlog, 600).result(), None)))
    return rows


def _backlog(nsqd: NSQDProcess) -> int:
    """What (c) will consume: the topic's depth and its channel's."""
    document = json.loads(nsqd.http("GET", f"/stats?format=json&topic={TOPIC}")[2])
    return sum(topic["depth"] + sum(channel["depth"] for channel in topic["channels"] if channel["channel_name"] == "ch")
               for topic in document["topics"])


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
                       lambda: (*pool.submit(load.consume, nsqd.tcp_address, TOPIC, "ch", 2500, written["messages"],
                                             600).result(), None))
        print(f"{'':<46} {read['rate'] * record / 1e6:>12,.1f} MB/s read")
    finally:
        nsqd.stop()


if __name__ == "__main__":
    main()
