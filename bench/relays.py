"""The relays' throughput: ``.venv/bin/python -m bench.relays [--messages 200000] [--tool nsq_to_nsq|nsq_to_http]``.

Fills a topic on an nsqd at NSQ's default flags with ``--messages`` 200-byte messages (past ``--mem-queue-size``'s
10,000 they are on disk), then starts the tool with nothing but its required flags, as users start it, and times
it until nsqd counts every message finished on the tool's channel. ``nsq_to_nsq`` publishes to a second nsqd at
its defaults; ``nsq_to_http`` POSTs to a do-nothing HTTP server (uvloop and httptools, ``bench.sinks``). Prints the
rate from the first message finished to the last, and the CPU seconds per million messages of the tool and of the
nsqd. Beside it, the ceilings: the do-nothing HTTP server under ``wrk -c100`` (the ``--n`` connections the tool
uses), and nsqd handing the same backlog to a plain consumer (``bench.load.consume``, RDY 2500).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from bench import http_load, load
from bench.run import SIZE, cpu_seconds
from bench.sinks import http_sink
from harness.processes import ROOT, NSQDProcess, ToolProcess, finished, start_nsqd

TOPIC = "relayed"
BATCH = 1000


def fill(nsqd: NSQDProcess, messages: int) -> None:
    body = b"\n".join(b"%0200d" % number for number in range(BATCH))
    for _ in range(messages // BATCH):
        assert nsqd.http("POST", f"/mpub?topic={TOPIC}", body)[0] == 200


def time_until_finished(nsqd: NSQDProcess, channel: str, messages: int, tool: ToolProcess) -> tuple[float, float]:
    """When the first and the last message were finished (polled every 50 ms)."""
    first = None
    while True:
        done = finished(nsqd.channel_stats(TOPIC, channel))
        now = time.monotonic()
        if done and first is None:
            first = now
        if done >= messages:
            assert first is not None
            return first, now
        if tool.process.poll() is not None:
            raise SystemExit(f"the tool ended:\n{tool.log}")
        time.sleep(0.05)


def run_tool(name: str, nsqd: NSQDProcess, messages: int, flags: list[str], scratch: Path) -> None:
    tool = ToolProcess(scratch / f"{name}.log", f"apps.{name}", f"--topic={TOPIC}",
                       f"--nsqd-tcp-address=127.0.0.1:{nsqd.tcp_port}", *flags)
    nsqd_pid = nsqd.process.pid
    nsqd_cpu = cpu_seconds(nsqd_pid)
    try:
        first, last = time_until_finished(nsqd, name, messages, tool)
        tool_cpu = cpu_seconds(tool.process.pid)
    finally:
        tool.stop()
    per_million = 1_000_000 / messages
    print(f"{name}: {messages / (last - first):,.0f} msg/s ({messages:,} messages in {last - first:.1f}s after the "
          f"first); CPU s per million messages: {name} {tool_cpu * per_million:.1f}, source nsqd "
          f"{(cpu_seconds(nsqd_pid) - nsqd_cpu) * per_million:.1f}")


def plain_consumer_ceiling(messages: int) -> None:
    nsqd = start_nsqd()
    try:
        fill(nsqd, messages)
        received, seconds = load.consume(nsqd.tcp_address, TOPIC, "ceiling", 2500, messages, 600)
        print(f"ceiling: nsqd hands the backlog to a plain consumer at {received / seconds:,.0f} msg/s")
    finally:
        nsqd.stop()


def http_ceiling(address: tuple[str, int]) -> None:
    if http_load.wrk_path() is None:
        print("ceiling: the do-nothing HTTP server not measured (no wrk installed)")
        return
    with ProcessPoolExecutor(1) as pool:
        result = http_load.run(pool, address, "/", SIZE, 100, 5)
    print(f"ceiling: the do-nothing HTTP server answers wrk -c100 at {result.requests / result.seconds:,.0f} req/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--tool", choices=("nsq_to_nsq", "nsq_to_http"), action="append")
    args = parser.parse_args()
    messages = args.messages // BATCH * BATCH
    sys.path.insert(0, str(ROOT))
    plain_consumer_ceiling(messages)
    with tempfile.TemporaryDirectory(prefix="bench-relays-") as scratch:
        for name in args.tool or ("nsq_to_nsq", "nsq_to_http"):
            source = start_nsqd()
            try:
                fill(source, messages)
                if name == "nsq_to_nsq":
                    destination = start_nsqd()
                    try:
                        run_tool(name, source, messages,
                                 [f"--destination-nsqd-tcp-address=127.0.0.1:{destination.tcp_port}"], Path(scratch))
                    finally:
                        destination.stop()
                else:
                    address, sink = http_sink()
                    try:
                        http_ceiling(address)
                        run_tool(name, source, messages, [f"--post=http://{address[0]}:{address[1]}/"],
                                 Path(scratch))
                    finally:
                        sink.terminate()
            finally:
                source.stop()


if __name__ == "__main__":
    main()
