"""lookupd's answers to consumers and producers: ``.venv/bin/python -m bench.lookupd [--duration 5]``.

Starts an nsqlookupd at NSQ's default flags, registers ``--producers`` nsqd with it over its TCP protocol (each
with the topic ``bench`` and its channel, as running nsqd do), then asks ``GET /lookup?topic=bench`` from 16
keep-alive connections with ``wrk -t1 -c16`` (Debian's package), the question every consumer and producer
that finds nsqd through lookupd asks. Prints req/s, lookupd's CPU microseconds per request (from
``/proc/<pid>/stat``) and wrk's p50/p99, first the machine line and wrk's own ceiling against a do-nothing HTTP
server (``bench/sinks.py``). ``--compare-with=/path/to/nsqlookupd`` runs the same against another lookupd that
takes NSQ's flags (NSQ's own; ``env GOMAXPROCS=1`` in front of it for one core) and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import struct
import sys

from bench import http_load
from bench.machine import machine_line
from bench.run import cpu_seconds
from bench.sinks import http_sink
from harness.processes import NSQDProcess, start_lookupd
from shared.protocol.lookup_v1 import MAGIC_V1

TOPIC, CHANNEL = "bench", "ch"
CONNECTIONS = 16
_SIZE = struct.Struct(">i")


def register(lookupd: NSQDProcess, index: int) -> socket.socket:
    """An nsqd as lookupd sees one: identified, with the topic and its channel registered. Kept open: lookupd
    forgets what a connection registered once it closes."""
    sock = socket.create_connection(("127.0.0.1", lookupd.tcp_port))
    identity = json.dumps({"broadcast_address": f"nsqd-{index}.example", "hostname": f"nsqd-{index}",
                           "tcp_port": 4150, "http_port": 4151, "version": "1.3.0"}).encode()
    sock.sendall(MAGIC_V1 + b"IDENTIFY\n" + _SIZE.pack(len(identity)) + identity)
    _answer(sock)
    for command in (f"REGISTER {TOPIC}\n", f"REGISTER {TOPIC} {CHANNEL}\n"):
        sock.sendall(command.encode())
        assert _answer(sock) == b"OK", "lookupd refused a registration"
    return sock


def _answer(sock: socket.socket) -> bytes:
    (size,) = _SIZE.unpack(_read(sock, 4))
    return _read(sock, size)


def _read(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            raise ConnectionError("lookupd closed the connection")
        data += chunk
    return data


def measure(wrk: str, name: str, program: list[str] | None, producers: int, duration: float) -> float:
    lookupd = start_lookupd(program=program)
    try:
        registered = [register(lookupd, index) for index in range(producers)]
        answer = json.loads(lookupd.http("GET", f"/lookup?topic={TOPIC}")[2])
        assert len(answer["producers"]) == producers and answer["channels"] == [CHANNEL], answer
        pid = lookupd.process.pid
        before = cpu_seconds(pid)
        load = http_load.run_wrk(wrk, ("127.0.0.1", lookupd.http_port), f"/lookup?topic={TOPIC}", CONNECTIONS,
                                 duration)
        cpu = cpu_seconds(pid) - before
        assert not load.errors, f"{load.errors} requests failed"
        rate = load.requests / load.seconds
        print(f"{name:40s} {rate:9,.0f} req/s  {cpu / load.requests * 1e6:6.1f} lookupd CPU µs/req  "
              f"p50 {load.p50 * 1e6:,.0f} us, p99 {load.p99 * 1e6:,.0f} us", flush=True)
        for sock in registered:
            sock.close()
        return rate
    finally:
        lookupd.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of load per lookupd")
    parser.add_argument("--producers", type=int, default=1, help="nsqd registered with the topic")
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
    print(f"-- GET /lookup?topic={TOPIC}, {args.producers} nsqd registered, wrk -t1 -c{CONNECTIONS}", flush=True)
    ours = measure(wrk, "this nsqlookupd", None, args.producers, args.duration)
    if args.compare_with:
        theirs = measure(wrk, args.compare_with, shlex.split(args.compare_with), args.producers, args.duration)
        print(f"this nsqlookupd against {args.compare_with}: {ours / theirs:.2f}x")


if __name__ == "__main__":
    main()
