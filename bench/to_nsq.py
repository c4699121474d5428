"""``to_nsq``'s throughput: ``.venv/bin/python -m bench.to_nsq [--messages 1000000] [--nsqd 1]``.

Writes ``--messages`` 200-byte records, one a line, to a file, starts ``--nsqd`` nsqd at NSQ's default flags (past
``--mem-queue-size``'s 10,000 the topic goes to disk) and runs ``to_nsq`` with only its required flags and the
file as stdin, as a user pipes a file into it. Prints msg/s over the whole run (the interpreter's start included),
the CPU seconds per million messages of to_nsq and of the nsqd, and checks that each nsqd counts every record.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.run import SIZE, cpu_seconds
from harness.processes import ROOT, NSQDProcess, start_nsqd

TOPIC = "bench_to_nsq"


def write_records(path: Path, messages: int) -> None:
    with path.open("wb") as records:
        for first in range(0, messages, 10_000):
            records.write(b"".join(b"%0*d\n" % (SIZE, number) for number in range(first, min(first + 10_000,
                                                                                             messages))))


def message_count(nsqd: NSQDProcess) -> int:
    stats = json.loads(nsqd.http("GET", f"/stats?format=json&topic={TOPIC}")[2])
    return sum(topic["message_count"] for topic in stats["topics"] or [] if topic["topic_name"] == TOPIC)


def run_to_nsq(records: Path, nodes: list[NSQDProcess]) -> tuple[float, float]:
    """Wall and CPU seconds of one run of to_nsq."""
    command = [sys.executable, "-m", "apps.to_nsq", f"--topic={TOPIC}",
               *(f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}" for nsqd in nodes)]
    with records.open("rb") as stdin:
        start = time.perf_counter()
        process = subprocess.Popen(command, cwd=ROOT, stdin=stdin, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
        seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.stderr is not None
    errors = process.stderr.read().decode(errors="replace")
    process.stderr.close()
    if process.returncode != 0:
        raise SystemExit(f"to_nsq exited {process.returncode}:\n{errors}")
    return seconds, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--nsqd", type=int, default=1, help="how many nsqd to_nsq publishes every record to")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-to-nsq-") as scratch:
        records = Path(scratch) / "records"
        write_records(records, args.messages)
        nodes = []
        try:
            for number in range(args.nsqd):
                data_path = Path(scratch) / f"nsqd{number}"
                data_path.mkdir()
                nodes.append(start_nsqd(data_path=data_path))
            nsqd_cpu = [cpu_seconds(nsqd.process.pid) for nsqd in nodes]
            seconds, tool_cpu = run_to_nsq(records, nodes)
            nsqd_cpu = [cpu_seconds(nsqd.process.pid) - before for nsqd, before in zip(nodes, nsqd_cpu)]
            counts = [message_count(nsqd) for nsqd in nodes]
        finally:
            for nsqd in nodes:
                nsqd.stop()
    per_million = 1_000_000 / args.messages
    print(f"to_nsq: {args.messages / seconds:,.0f} msg/s to each of {args.nsqd} nsqd ({args.messages:,} records in "
          f"{seconds:.2f}s, start included); CPU s per million messages: to_nsq {tool_cpu * per_million:.1f}, "
          f"nsqd {sum(nsqd_cpu) / len(nodes) * per_million:.1f}")
    if counts != [args.messages] * args.nsqd:
        raise SystemExit(f"nsqd counted {counts} messages, not {args.messages}")


if __name__ == "__main__":
    main()
