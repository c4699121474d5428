"""The pipeline's consuming side as users run it: ``.venv/bin/python -m bench.pipeline_source [--job parquet]``.

Starts nsqlookupd and ``--nsqd`` nsqd (1) at NSQ's default flags, registered with the lookupd, publishes
``--messages`` 200-byte JSON events (``{"type": ..., "n": ..., "pad": ...}``) to a topic, spread over the nsqd, in
MPUBs of 1000, so that all but the first 10,000 on each wait on disk (``--mem-queue-size``), then starts one of these, with its own defaults, on ``local[*]``
as a separate process and watches nsqd's channel until every event is FIN'd (written and committed):

- ``parquet``: ``nsq_to_parquet --topic=... --lookupd-http-address=... --output-dir=... --checkpoint-dir=...``;
- ``counts``: ``nsq_event_counts --topic=... --output-topic=... --lookupd-http-address=... --checkpoint-dir=...``;
- ``source``: a user's own query, the README's: ``spark.readStream.format("nsq")`` with only topic, channel and
  lookupd, into ``writeStream.format("parquet")`` with only a path and a checkpoint (Spark's default trigger).

Prints msg/s over the whole run (the job's start included) and in steady state (from 10 % of the events finished
to the last), the CPU the job's processes and nsqd spent, and the job's own progress lines. ``--compare-rate``
then runs the same archive job (``nsq_to_parquet``'s query, session and defaults) on as many rows from Spark's
own ``rate-micro-batch`` source (``bench.rate_archive``), so that the ratio says what reading from nsqd costs
it. ``--job-args`` adds
flags to the job (tuned settings: a second line, never the headline). The load generator here is the backlog
itself: its fill rate is printed first, and nsqd hands a plain consumer that backlog at hundreds of thousands of
messages per second (``bench.run`` phase c), far above what is measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.run import SIZE, cpu_seconds
from harness.processes import ROOT, NSQDProcess, finished, start_lookupd, start_nsqd
from nsqclient import Producer

TOPIC = "events"
CHANNELS = {"parquet": "nsq_to_parquet", "counts": "nsq_event_counts", "source": "spark"}
TYPES = ("click", "view", "purchase", "signup")

# the README's example of a user's own streaming query, nothing tuned
USER_QUERY = """
import sys
from services.pipeline.session import spark_session
lookupd, output, checkpoint = sys.argv[1:]
spark = spark_session("local[*]", "my-job")
events = (spark.readStream.format("nsq").option("topic", "events").option("channel", "spark")
          .option("lookupd_http_address", lookupd).load())
query = events.writeStream.format("parquet").option("path", output).option("checkpointLocation", checkpoint).start()
query.awaitTermination()
"""


def event(n: int) -> bytes:
    """One JSON event of exactly ``SIZE`` bytes."""
    head = json.dumps({"type": TYPES[n % len(TYPES)], "n": n, "pad": ""})
    return head.replace('"pad": ""', '"pad": "' + "x" * (SIZE - len(head)) + '"').encode()


async def fill(address: str, numbers: range) -> None:
    async with Producer(address) as producer:
        for start in range(numbers.start, numbers.stop, 1000):
            await producer.multi_publish(TOPIC, [event(n) for n in range(start, min(start + 1000, numbers.stop))])


def job_command(job: str, lookupd: str, workdir: Path, extra: list[str]) -> list[str]:
    bin_dir = Path(sys.executable).parent
    checkpoint = f"--checkpoint-dir={workdir / 'checkpoint'}"
    if job == "parquet":
        return [str(bin_dir / "nsq_to_parquet"), f"--topic={TOPIC}", f"--lookupd-http-address={lookupd}",
                f"--output-dir={workdir / 'archive'}", checkpoint, *extra]
    if job == "counts":
        return [str(bin_dir / "nsq_event_counts"), f"--topic={TOPIC}", "--output-topic=event_counts",
                f"--lookupd-http-address={lookupd}", checkpoint, *extra]
    return [sys.executable, "-c", USER_QUERY, lookupd, str(workdir / "archive"), str(workdir / "checkpoint")]


def process_tree_cpu(root: int) -> float:
    """CPU seconds of ``root`` and every process under it (the JVM, Spark's Python workers), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
    tree, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, ppid in parents.items() if ppid == parent]
        tree.update(children)
        frontier += children
    total = 0.0
    for pid in tree:
        try:
            total += cpu_seconds(pid)
        except OSError:
            pass
    return total


def watch(nodes: list[NSQDProcess], channel: str, messages: int, job: subprocess.Popen[bytes],
          timeout: float) -> float:
    """Waits until every event is FIN'd; prints the rates and CPU, returns the steady-state rate."""
    started = time.perf_counter()
    nsqd_cpu = sum(cpu_seconds(nsqd.process.pid) for nsqd in nodes)
    steady_from: tuple[float, int] | None = None
    done = 0
    while done < messages:
        if job.poll() is not None:
            sys.exit(f"the job ended ({job.returncode}) with {done:,} of {messages:,} finished")
        if time.perf_counter() - started > timeout:
            print(f"gave up after {timeout:g}s: {done:,} of {messages:,} finished")
            break
        done = sum(finished(nsqd.channel_stats(TOPIC, channel)) for nsqd in nodes)
        if steady_from is None and done >= messages // 10:
            steady_from = (time.perf_counter(), done)
        time.sleep(0.25)  # the watching takes a little of the same two cores
    end = time.perf_counter()
    job_cpu = process_tree_cpu(job.pid)  # the JVM and Spark's Python workers live as long as the job
    nsqd_cpu = sum(cpu_seconds(nsqd.process.pid) for nsqd in nodes) - nsqd_cpu
    print(f"{done:,} FIN'd in {end - started:.1f}s: {done / (end - started):,.0f} msg/s (the job's start included)")
    steady = 0.0
    if steady_from is not None and end > steady_from[0]:
        steady = (done - steady_from[1]) / (end - steady_from[0])
        print(f"steady state (10 % finished to the last): {steady:,.0f} msg/s")
    print(f"CPU per million messages: the job {job_cpu / max(done, 1) * 1e6:.1f} s, "
          f"nsqd {nsqd_cpu / max(done, 1) * 1e6:.1f} s")
    return steady


def rate_fed(messages: int, workdir: Path, extra: list[str], env: dict[str, str]) -> float:
    """``bench.rate_archive``: the same job and settings fed by Spark's own source; its steady-state rows/s."""
    command = [sys.executable, "-m", "bench.rate_archive", "--rows", str(messages),
               f"--output-dir={workdir / 'rate-archive'}", f"--checkpoint-dir={workdir / 'rate-checkpoint'}", *extra]
    print("$", shlex.join(command[:3]), "(nsq_to_parquet's query and defaults on Spark's rate-micro-batch source)",
          flush=True)
    result = subprocess.run(command, cwd=workdir, env=env, stdout=subprocess.PIPE, text=True, check=True)
    line = result.stdout.strip().splitlines()[-1]  # rows <n> seconds <s> steady <rows/s> batches <n>
    fields = dict(zip(line.split()[::2], line.split()[1::2]))
    rows, seconds, steady = int(fields["rows"]), float(fields["seconds"]), float(fields["steady"])
    print(f"{rows:,} rows written in {seconds:.1f}s: {rows / seconds:,.0f} rows/s (its query's start included)")
    print(f"steady state (10 % written to the last): {steady:,.0f} rows/s, in {fields['batches']} micro-batches")
    return steady


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--job", default="parquet", choices=tuple(CHANNELS))
    parser.add_argument("--messages", type=int, default=300_000)
    parser.add_argument("--nsqd", type=int, default=1, help="how many nsqd the events are spread over")
    parser.add_argument("--job-args", default="", help="extra flags for the job (tuned settings)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for every event")
    parser.add_argument("--compare-rate", action="store_true",
                        help="then the same archive job fed by Spark's own rate source (--job parquet)")
    args = parser.parse_args()
    if args.compare_rate and args.job != "parquet":
        parser.error("--compare-rate is for --job parquet (the archive job)")

    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as directory:
        workdir = Path(directory)
        lookupd = start_lookupd()
        nodes: list[NSQDProcess] = []
        try:
            for index in range(args.nsqd):
                (workdir / f"nsqd{index}").mkdir()
                nodes.append(start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                                        data_path=workdir / f"nsqd{index}"))
            started = time.perf_counter()
            for index, nsqd in enumerate(nodes):
                share = range(args.messages * index // args.nsqd, args.messages * (index + 1) // args.nsqd)
                asyncio.run(fill(f"127.0.0.1:{nsqd.tcp_port}", share))
            print(f"filled {args.messages:,} events of {SIZE} B over {args.nsqd} nsqd in "
                  f"{time.perf_counter() - started:.1f}s (NSQ's default flags: all but 10,000 each on disk)",
                  flush=True)
            command = job_command(args.job, f"127.0.0.1:{lookupd.http_port}", workdir, shlex.split(args.job_args))
            print("$", shlex.join(command[:2] if args.job == "source" else command), flush=True)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
            job = subprocess.Popen(command, cwd=workdir, env=env, start_new_session=True)
            try:
                fed_by_nsq = watch(nodes, CHANNELS[args.job], args.messages, job, args.timeout)
            finally:
                job.send_signal(signal.SIGTERM)  # as Ctrl-C or docker stop would: the job stops its JVM itself
                try:
                    job.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(job.pid, signal.SIGKILL)
                    job.wait()
            if args.compare_rate:
                fed_by_rate = rate_fed(args.messages, workdir, shlex.split(args.job_args), env)
                if fed_by_rate:
                    print(f"the archive fed by nsqd, against the same job fed by Spark's rate source (steady "
                          f"state): {fed_by_nsq / fed_by_rate:.2f}x", flush=True)
        finally:
            for nsqd in nodes:
                nsqd.stop()
            lookupd.stop()


if __name__ == "__main__":
    main()
