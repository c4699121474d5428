"""How soon after nsqd listens lookupd lists it: ``.venv/bin/python -m bench.registration [--rounds 10]``.

Starts an nsqlookupd, then an nsqd that knows it, again and again; times from nsqd's "HTTP: listening" log line (its
last listener up) to the first answer of lookupd's ``/nodes`` that lists it, asked in a tight loop (each ask takes
about a millisecond, the resolution of the figure). ``--compare-with`` times another nsqd binary (NSQ's own) the
same way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from bench.machine import machine_line
from harness.processes import NSQDProcess, start_lookupd


def one_round(lookupd: NSQDProcess, program: list[str]) -> float:
    with tempfile.TemporaryDirectory() as data_path:
        nsqd = subprocess.Popen([*program, "--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0",
                                 f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}", f"--data-path={data_path}"],
                                stderr=subprocess.PIPE, text=True)
        try:
            assert nsqd.stderr is not None
            for line in nsqd.stderr:
                if "HTTP: listening" in line:
                    break
            listening = time.perf_counter()
            while not json.loads(lookupd.http("GET", "/nodes")[2])["producers"]:
                pass
            return time.perf_counter() - listening
        finally:
            nsqd.terminate()
            nsqd.wait()
            while json.loads(lookupd.http("GET", "/nodes")[2])["producers"]:  # gone before the next round
                time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--compare-with", metavar="NSQD", help="also time another nsqd binary (NSQ's own)")
    args = parser.parse_args()
    print(machine_line(), flush=True)
    programs = {"this nsqd": [sys.executable, "-m", "services.nsqd"]}
    if args.compare_with:
        programs[args.compare_with] = [args.compare_with]
    lookupd = start_lookupd()
    try:
        for name, program in programs.items():
            times = sorted(one_round(lookupd, program) * 1000 for _ in range(args.rounds))
            print(f"{name}: listening to listed by lookupd, median {statistics.median(times):.1f} ms, "
                  f"max {times[-1]:.1f} ms ({args.rounds} rounds)", flush=True)
    finally:
        lookupd.stop()


if __name__ == "__main__":
    main()
