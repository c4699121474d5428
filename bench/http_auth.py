"""What ``--http-auth-required`` costs HTTP publishing: ``.venv/bin/python -m bench.http_auth [--duration 10]``.

HTTP ``POST /pub`` of 200 bytes over ``bench.run``'s keep-alive connections (wrk when installed), against nsqd at its
defaults with its topic's channel in place, once as NSQ serves it (no auth server asked) and once with
``--auth-http-address`` (``nsq_auth_server``) and ``--http-auth-required``, every request carrying
``Authorization: Bearer``: the answers are cached, so the auth server is asked once per TTL. Alternating,
``--rounds`` times: the rate and nsqd's CPU per request of each, and the median ratio. First, the generator's own
ceiling against a server that does no work.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import http_load, sinks
from bench.machine import machine_line
from bench.run import HTTP_CONNECTIONS, SIZE, TOPIC, measure
from harness.processes import NSQDProcess, start_auth_server, start_nsqd

SECRET = "bench-publisher"
RULES = {"ttl": 3600, "secrets": {SECRET: {"identity": "bench", "authorizations": [
    {"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe", "admin"]}]}}}


def publishing(pool: ProcessPoolExecutor, nsqd: NSQDProcess, label: str, duration: float,
               headers: tuple[str, ...]) -> dict[str, float]:
    address = ("127.0.0.1", nsqd.http_port)
    for path in (f"/topic/create?topic={TOPIC}", f"/channel/create?topic={TOPIC}&channel=ch"):
        assert nsqd.http("POST", path, headers=dict(header.split(": ", 1) for header in headers))[0] == 200

    def run() -> tuple[int, float, tuple[float, float]]:
        result = http_load.run(pool, address, f"/pub?topic={TOPIC}", SIZE, HTTP_CONNECTIONS, duration, headers)
        if result.errors:
            print(f"   !! {result.errors:,} requests failed")
        return result.requests, result.seconds, (result.p50, result.p99)

    return measure(f"HTTP /pub, {label}", nsqd.process.pid, run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds without and with auth")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    pool = ProcessPoolExecutor(max_workers=2, mp_context=multiprocessing.get_context("fork"))
    generator = f"wrk -t1 -c{HTTP_CONNECTIONS}" if http_load.wrk_path() else "in-repo generator, no wrk installed"
    with tempfile.TemporaryDirectory() as scratch:
        http_sink, process = sinks.http_sink()
        measure(f"HTTP generator's ceiling ({generator})", None,
                lambda: (lambda r: (r.requests, r.seconds, (r.p50, r.p99)))(
                    http_load.run(pool, http_sink, "/pub?topic=t", SIZE, HTTP_CONNECTIONS, 3)))
        process.terminate()
        process.join()
        rules = Path(scratch) / "rules.json"
        rules.write_text(json.dumps(RULES))
        auth_server = start_auth_server(rules)
        rates: dict[bool, list[float]] = {False: [], True: []}
        cpu: dict[bool, list[float]] = {False: [], True: []}
        try:
            for round_ in range(args.rounds):
                for guarded in (False, True):
                    flags = (f"--auth-http-address=127.0.0.1:{auth_server.http_port}", "--http-auth-required") \
                        if guarded else ()
                    data_path = Path(scratch) / f"nsqd-{round_}-{guarded}"
                    data_path.mkdir()
                    nsqd = start_nsqd(*flags, data_path=data_path)
                    try:
                        headers = (f"Authorization: Bearer {SECRET}",) if guarded else ()
                        row = publishing(pool, nsqd, "--http-auth-required" if guarded else "open, as NSQ",
                                         args.duration, headers)
                        rates[guarded].append(row["rate"])
                        cpu[guarded].append(row["cpu_per_million"])
                    finally:
                        nsqd.stop()
        finally:
            auth_server.stop()
            pool.shutdown()
    ratios = [on / off for off, on in zip(rates[False], rates[True])]
    print(f"HTTP /pub with --http-auth-required: median {statistics.median(ratios):.2f}x the rate without "
          f"({', '.join(f'{ratio:.2f}' for ratio in ratios)}); nsqd CPU s / M requests, median "
          f"{statistics.median(cpu[False]):.2f} without, {statistics.median(cpu[True]):.2f} with", flush=True)


if __name__ == "__main__":
    main()
