"""lookupd's answers to consumers and producers: ``.venv/bin/python -m bench.lookupd [--duration 5]``.

Starts an nsqlookupd at NSQ's default flags and registers ``--producers`` nsqd with it over its TCP protocol, each
with ``--topics`` topics and a channel in each (``bench`` the first), as running nsqd do: each nsqd's commands one
at a time, all nsqd at once, as after lookupd restarted. That registration load is printed as commands a second
and lookupd's CPU microseconds per command (the Python generator may be the limit of the first figure, not of the
second). Then it asks ``GET /lookup?topic=bench`` from 16 keep-alive connections with ``wrk -t1 -c16`` (Debian's
package), the question every consumer and producer that finds nsqd through lookupd asks: req/s, lookupd's CPU
microseconds per request (from ``/proc/<pid>/stat``) and wrk's p50/p99. First come the machine line and wrk's own
ceiling against a do-nothing HTTP server (``bench/sinks.py``). ``--compare-with=/path/to/nsqlookupd`` runs the
same against another lookupd that takes NSQ's flags (NSQ's own; ``env GOMAXPROCS=1`` in front of it for one core)
and prints the ratio of /lookup rates.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import struct
import sys
import time

from bench import http_load
from bench.machine import machine_line
from bench.run import cpu_seconds
from bench.sinks import http_sink
from harness.processes import NSQDProcess, start_lookupd
from shared.protocol.lookup_v1 import MAGIC_V1

TOPIC, CHANNEL = "bench", "ch"
CONNECTIONS = 16
_SIZE = struct.Struct(">i")


async def register(lookupd: NSQDProcess, index: int, topics: int) -> asyncio.StreamWriter:
    """An nsqd as lookupd sees one: identified, then its topics and a channel in each registered, each command
    waiting for its answer as nsqd's do. Kept open: lookupd forgets what a connection registered once it
    closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", lookupd.tcp_port)
    identity = json.dumps({"broadcast_address": f"nsqd-{index}.example", "hostname": f"nsqd-{index}",
                           "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}).encode()

    async def command(data: bytes) -> bytes:
        writer.write(data)
        (size,) = _SIZE.unpack(await reader.readexactly(4))
        return await reader.readexactly(size)

    await command(MAGIC_V1 + b"IDENTIFY\n" + _SIZE.pack(len(identity)) + identity)
    for name in [TOPIC, *(f"{TOPIC}-{number}" for number in range(1, topics))]:
        for line in (f"REGISTER {name}\n", f"REGISTER {name} {CHANNEL}\n"):
            assert await command(line.encode()) == b"OK", "lookupd refused a registration"
    return writer


async def register_all(lookupd: NSQDProcess, producers: int, topics: int) -> list[asyncio.StreamWriter]:
    """``producers`` nsqd registering at once, as after lookupd restarted."""
    return list(await asyncio.gather(*(register(lookupd, index, topics) for index in range(producers))))


def measure(wrk: str, name: str, program: list[str] | None, producers: int, topics: int, duration: float) -> float:
    lookupd = start_lookupd(program=program)
    try:
        pid = lookupd.process.pid
        before, started = cpu_seconds(pid), time.perf_counter()
        loop = asyncio.new_event_loop()
        registered = loop.run_until_complete(register_all(lookupd, producers, topics))
        seconds, cpu = time.perf_counter() - started, cpu_seconds(pid) - before
        commands = producers * (1 + 2 * topics)
        print(f"{name:40s} registration: {commands / seconds:9,.0f} commands/s  "
              f"{cpu / commands * 1e6:6.1f} lookupd CPU µs/command", flush=True)
        answer = json.loads(lookupd.http("GET", f"/lookup?topic={TOPIC}")[2])
        assert len(answer["producers"]) == producers and answer["channels"] == [CHANNEL], answer
        before = cpu_seconds(pid)
        load = http_load.run_wrk(wrk, ("127.0.0.1", lookupd.http_port), f"/lookup?topic={TOPIC}", CONNECTIONS,
                                 duration)
        cpu = cpu_seconds(pid) - before
        assert not load.errors, f"{load.errors} requests failed"
        rate = load.requests / load.seconds
        print(f"{name:40s} {rate:9,.0f} req/s  {cpu / load.requests * 1e6:6.1f} lookupd CPU µs/req  "
              f"p50 {load.p50 * 1e6:,.0f} us, p99 {load.p99 * 1e6:,.0f} us", flush=True)
        for writer in registered:
            writer.close()
        loop.close()
        return rate
    finally:
        lookupd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of load per lookupd")
    parser.add_argument("--producers", type=int, default=1, help="nsqd registered with the topic")
    parser.add_argument("--topics", type=int, default=1, help="topics each nsqd registers, a channel in each")
    parser.add_argument("--compare-with", metavar="NSQLOOKUPD", default="",
                        help="another lookupd taking NSQ's flags (a command line: 'env GOMAXPROCS=1 nsqlookupd')")
    args = parser.parse_args()
    wrk = http_load.wrk_path()
    if wrk is None:
        sys.exit("needs wrk (Debian's package)")
    print(machine_line(), flush=True)
    address, sink = http_sink()
    try:
        ceiling = http_load.run_wrk(wrk, address, "/", CONNECTIONS, args.duration)
        print(f"{'wrk -t1 -c16 against a do-nothing server':40s} {ceiling.requests / ceiling.seconds:9,.0f} req/s",
              flush=True)
    finally:
        sink.terminate()
    print(f"-- {args.producers} nsqd with {args.topics} topics each; GET /lookup?topic={TOPIC}, wrk -t1 -c{CONNECTIONS}",
          flush=True)
    ours = measure(wrk, "this nsqlookupd", None, args.producers, args.topics, args.duration)
    if args.compare_with:
        theirs = measure(wrk, args.compare_with, shlex.split(args.compare_with), args.producers, args.topics,
                         args.duration)
        print(f"this nsqlookupd against {args.compare_with}: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
