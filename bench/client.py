"""The client library's own ceiling: ``.venv/bin/python -m bench.client [--messages 1000000]``.

Starts an nsqd, fills a topic, then consumes it through one ``Consumer`` with a no-op handler (``max_in_flight``
2500), publishes through one ``Producer`` with many publishes under way at once, and through one
``BlockingProducer`` from 1 and from 8 threads, each publishing one message at a time as a web app's views do.
Prints msg/s and the CPU seconds this process (the client) spent per million messages: the library must not be
what limits a Python consumer or publisher. The backlog is filled by MPUB over the raw protocol so that filling costs little.

``--transport tls+snappy`` (or ``tls``, ``snappy``, ``deflate``, ``tls+deflate``) measures the same over TLS and/or
compression, with a certificate made for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import ssl
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.run import SIZE, cpu_seconds
from harness.processes import start_nsqd
from nsqclient import BlockingProducer, Consumer, Message, Producer
from nsqclient.event_loop import install_uvloop

TOPIC = "bench_client"


def own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report(name: str, messages: int, seconds: float, cpu: float, nsqd_cpu: float) -> None:
    print(f"{name:<52} {messages / seconds:>10,.0f} msg/s  client {cpu / messages * 1e6:5.2f} CPU s / M msgs,"
          f" nsqd {nsqd_cpu / messages * 1e6:5.2f}", flush=True)


async def fill(address: str, messages: int, transport: dict[str, Any]) -> None:
    body = b"x" * SIZE
    async with Producer(address, **transport) as producer:
        for start in range(0, messages, 200):
            await producer.multi_publish(TOPIC, [body] * min(200, messages - start))


async def consume(address: str, messages: int, max_in_flight: int, concurrency: int,
                  transport: dict[str, Any]) -> float:
    done = asyncio.Event()
    seen = 0

    async def handle(message: Message) -> None:
        nonlocal seen
        seen += 1
        if seen == messages:
            done.set()

    start = time.perf_counter()
    async with Consumer(TOPIC, "c%d" % concurrency, handle, nsqd_tcp_addresses=[address],
                        max_in_flight=max_in_flight, concurrency=concurrency, connect_timeout=5, **transport):
        await done.wait()
        return time.perf_counter() - start


async def publish(address: str, messages: int, window: int, transport: dict[str, Any]) -> float:
    body = b"y" * SIZE
    start = time.perf_counter()
    async with Producer(address, **transport) as producer:
        for first in range(0, messages, window):
            await asyncio.gather(*(producer.publish(TOPIC + "_pub", body)
                                   for _ in range(min(window, messages - first))))
    return time.perf_counter() - start


async def run(args: argparse.Namespace, address: str, nsqd_pid: int, transport: dict[str, Any]) -> None:
    await fill(address, args.messages, transport)
    for concurrency in (1, 8):
        cpu, nsqd_cpu = own_cpu(), cpu_seconds(nsqd_pid)
        seconds = await consume(address, args.messages, args.max_in_flight, concurrency, transport)
        report(f"Consumer, no-op handler, max_in_flight {args.max_in_flight}, concurrency {concurrency}",
               args.messages, seconds, own_cpu() - cpu, cpu_seconds(nsqd_pid) - nsqd_cpu)
    cpu, nsqd_cpu = own_cpu(), cpu_seconds(nsqd_pid)
    seconds = await publish(address, args.messages // 5, 1000, transport)
    report("Producer.publish, 1000 under way at once", args.messages // 5, seconds, own_cpu() - cpu,
           cpu_seconds(nsqd_pid) - nsqd_cpu)


def publish_blocking(address: str, messages: int, threads: int, transport: dict[str, Any]) -> float:
    """Seconds for ``threads`` threads to publish ``messages`` (a multiple of ``threads``) through one producer;
    the first failure of any of them is raised."""
    body = b"z" * SIZE
    failures: list[BaseException] = []
    with BlockingProducer(address, **transport) as producer:
        producer.connect()

        def publish_many() -> None:
            try:
                for _ in range(messages // threads):
                    producer.publish(TOPIC + "_blocking", body)
            except BaseException as error:  # raised below, in the benchmark's thread
                failures.append(error)

        workers = [threading.Thread(target=publish_many) for _ in range(threads)]
        start = time.perf_counter()
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        seconds = time.perf_counter() - start
    if failures:
        raise failures[0]
    return seconds


def run_blocking(args: argparse.Namespace, address: str, nsqd_pid: int, transport: dict[str, Any]) -> None:
    for threads in (1, 8):
        messages = args.messages // 10 // threads * threads
        cpu, nsqd_cpu = own_cpu(), cpu_seconds(nsqd_pid)
        seconds = publish_blocking(address, messages, threads, transport)
        report(f"BlockingProducer.publish, {threads} thread{'s' if threads > 1 else ''}", messages, seconds,
               own_cpu() - cpu, cpu_seconds(nsqd_pid) - nsqd_cpu)


def transport_settings(name: str, directory: Path) -> tuple[list[str], dict[str, Any]]:
    """nsqd's flags and the clients' options for ``name``."""
    flags: list[str] = []
    options: dict[str, Any] = {feature: True for feature in ("snappy", "deflate") if feature in name}
    if "tls" in name:
        import trustme

        authority = trustme.CA()
        certificate = authority.issue_cert("127.0.0.1")
        certificate.cert_chain_pems[0].write_to_path(str(directory / "cert.pem"))
        certificate.private_key_pem.write_to_path(str(directory / "key.pem"))
        authority.cert_pem.write_to_path(str(directory / "ca.pem"))
        flags = [f"--tls-cert={directory / 'cert.pem'}", f"--tls-key={directory / 'key.pem'}", "--https-address="]
        options["tls"] = ssl.create_default_context(cafile=str(directory / "ca.pem"))
    return flags, options


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages consumed per run")
    parser.add_argument("--max-in-flight", type=int, default=2500)
    parser.add_argument("--transport", default="plain", choices=("plain", "tls", "snappy", "deflate", "tls+snappy",
                                                                  "tls+deflate"))
    args = parser.parse_args()
    install_uvloop()
    with tempfile.TemporaryDirectory() as data_path:
        flags, transport = transport_settings(args.transport, Path(data_path))
        nsqd = start_nsqd(f"--mem-queue-size={args.messages * 2}", *flags, data_path=Path(data_path))
        try:
            nsqd.http("POST", f"/topic/create?topic={TOPIC}")
            for concurrency in (1, 8):  # before filling, so that both channels get a copy of the backlog
                nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel=c{concurrency}")
            asyncio.run(run(args, f"127.0.0.1:{nsqd.tcp_port}", nsqd.process.pid, transport))
            run_blocking(args, f"127.0.0.1:{nsqd.tcp_port}", nsqd.process.pid, transport)
        finally:
            nsqd.stop()


if __name__ == "__main__":
    main()
