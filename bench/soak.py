"""Soak: ``.venv/bin/python -m bench.soak [--minutes 30] [--sample-every 10] [--rate 1000] [--seed 1]``.

One nsqlookupd and two nsqd (NSQ's default flags but for ``NSQD_FLAGS``) take mixed traffic for ``--minutes``:
PUB, MPUB and DPUB over TCP and /pub, /mpub and /pub?defer over HTTP to both nsqds (``soak_traffic``); consumers
found through lookupd that FIN most messages, REQ some, leave some to time out, and are replaced every few
seconds, beside bare clients that drop their connections with messages in flight; topics and channels created and
deleted all along (``soak_topology``). Every message has a body of its own and the ledger (``soak_ledger``) knows
which channels owe it a copy.

Every ``--sample-every`` seconds it samples each process's RSS and open files; after the warm-up (the first 20 %)
it fits a least-squares slope to the RSS and prints it with the first, last and largest sample. At the end the
producers stop, the consumers FIN everything until nsqd holds nothing, and it accounts for every message. Exits 1
if a copy was lost (or something else that must never happen happened), or a process died.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import logging
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from bench.run import cpu_seconds
from bench.soak_ledger import Action, Ledger, Tally
from bench.soak_topology import Topology
from bench.soak_traffic import Cluster, Counters, Policy, Publishers
from harness.processes import FAST_SCAN, ROOT, NSQDProcess, start_lookupd, start_nsqd
from shared.cluster_info import ClusterInfo

# what the scenario needs besides NSQ's defaults: timeouts and deferrals that fire within seconds, and backlogs
# that reach the disk queue, whose files roll over
NSQD_FLAGS = ("--msg-timeout=3s", *FAST_SCAN, "--mem-queue-size=100", "--max-bytes-per-file=1048576")
Report = Callable[[str], None]


@dataclass(frozen=True)
class Settings:
    minutes: float = 30.0
    sample_every: float = 10.0  # seconds
    rate: float = 1000.0  # messages per second, all producers together
    seed: int = 1
    warm_up: float = 0.2  # the part of the run left out of the slopes
    drain_timeout: float = 120.0  # seconds


@dataclass
class Series:
    """One process's samples: minutes since the start, RSS in KiB, open files."""

    name: str
    pid: int
    minutes: list[float] = field(default_factory=list)
    rss: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    def sample(self, minutes: float) -> None:
        self.minutes.append(minutes)
        self.rss.append(rss_kib(self.pid))
        self.fds.append(len(os.listdir(f"/proc/{self.pid}/fd")))

    def slope(self, after: float) -> float:
        """KiB per minute, least squares over the samples from minute ``after`` on."""
        points = [(x, y) for x, y in zip(self.minutes, self.rss) if x >= after]
        return least_squares_slope([x for x, _ in points], [y for _, y in points])


@dataclass
class SoakResult:
    settings: Settings
    tally: Tally
    counters: Counters
    series: list[Series]
    alive: dict[str, bool] = field(default_factory=dict)
    drained: bool = False
    drain_seconds: float = 0.0
    held_at_end: int = 0  # messages the nsqds still held when the drain ended
    nodes_known: list[int] = field(default_factory=list)  # nsqd that lookupd handed out, at each sample
    shortfalls: list[str] = field(default_factory=list)
    nsqd_counts: dict[str, int] = field(default_factory=dict)
    deletions: dict[str, int] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # seconds over the whole run
    leftovers: list[str] = field(default_factory=list)  # disk-queue files of topics or channels deleted

    @property
    def ok(self) -> bool:
        return (self.drained and not self.tally.anomalies() and all(self.alive.values()) and not self.leftovers
                and min(self.nodes_known, default=0) == 2)

    def slope(self, name: str) -> float:
        series = next(series for series in self.series if series.name == name)
        return series.slope(self.settings.minutes * self.settings.warm_up)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def least_squares_slope(xs: list[float], ys: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread else 0.0


# -- the run ---------------------------------------------------------------------------------------------------


def run_soak(settings: Settings, data_path: Path, report: Report = print) -> SoakResult:
    """Starts the cluster in ``data_path``, soaks it, stops it."""
    lookupd = start_lookupd()
    processes = {"nsqlookupd": lookupd}
    try:
        for node in range(2):
            (data_path / f"nsqd{node}").mkdir()
            processes[f"nsqd{node}"] = start_nsqd(*NSQD_FLAGS, f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}",
                                                  data_path=data_path / f"nsqd{node}")
        report(f"-- nsqlookupd and 2 nsqd at NSQ's default flags but {' '.join(NSQD_FLAGS)}")
        report(f"-- {settings.minutes:g} min at ~{settings.rate:g} msg/s, RSS every {settings.sample_every:g} s, "
               f"seed {settings.seed}")
        result = asyncio.run(_soak(settings, processes, data_path, report))
        result.alive = {name: process.process.poll() is None for name, process in processes.items()}
        result.cpu = {name: cpu_seconds(process.process.pid) for name, process in processes.items()
                      if result.alive[name]}
        return result
    finally:
        for process in processes.values():
            process.stop()


async def _soak(settings: Settings, processes: dict[str, NSQDProcess], data_path: Path,
                report: Report) -> SoakResult:
    nodes = [process for name, process in processes.items() if name.startswith("nsqd")]
    cluster = Cluster([f"127.0.0.1:{node.tcp_port}" for node in nodes], [f"127.0.0.1:{node.http_port}" for node in nodes],
                      f"127.0.0.1:{processes['nsqlookupd'].http_port}")
    rng, ledger, counters = random.Random(settings.seed), Ledger(), Counters()
    policy = Policy(rng)
    result = SoakResult(settings, ledger.tally, counters,
                        [Series(name, process.process.pid) for name, process in processes.items()])
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        topology = Topology(cluster, ledger, ClusterInfo(session), policy, rng, counters)
        await topology.start()
        publishers = Publishers(cluster, ledger, settings.rate, rng, counters, session)
        publishers.start()
        await _sample_until(settings, result, topology, report)
        await publishers.stop()
        await topology.stop_churn()
        started = time.monotonic()
        result.drained = await _drain(topology, ledger, policy, settings.drain_timeout)
        result.drain_seconds = time.monotonic() - started
        result.held_at_end = await topology.holding()
        await topology.stop_consumers()
        await topology.count_live()
    ledger.close_books()
    result.shortfalls, result.nsqd_counts, result.deletions = ledger.shortfalls, topology.nsqd_counts, topology.deletions
    result.leftovers = _leftover_files(data_path, ledger)
    return result


async def _sample_until(settings: Settings, result: SoakResult, topology: Topology, report: Report) -> None:
    """Samples every process, and which nsqd lookupd knows, every ``sample_every`` seconds for the run's time, with
    a progress line now and then."""
    started = time.monotonic()
    end = started + settings.minutes * 60
    progress_every = 60.0 if settings.minutes >= 5 else 10.0
    next_progress = started + progress_every
    while True:
        now = time.monotonic()
        for one in result.series:
            one.sample((now - started) / 60)
        result.nodes_known.append(await topology.nodes_known())
        if now >= next_progress:
            next_progress += progress_every
            report(_progress((now - started) / 60, result, await topology.holding()))
        if now >= end:
            return
        await asyncio.sleep(min(settings.sample_every, end - now))


def _progress(minutes: float, result: SoakResult, holding: int) -> str:
    memory = "  ".join(f"{one.name} {one.rss[-1] / 1024:.1f}" for one in result.series)
    tally = result.tally
    return (f"[{minutes:6.1f} min] acknowledged {tally.acknowledged:,}  finished {tally.finished:,}  "
            f"deleted {tally.deleted:,}  nsqd hold {holding:,}  lookupd knows {result.nodes_known[-1]} nsqd  "
            f"RSS MiB: {memory}")


async def _drain(topology: Topology, ledger: Ledger, policy: Policy, timeout: float) -> bool:
    """Consumers FIN everything until nothing is owed and no nsqd holds a message; False after ``timeout`` s."""
    policy.draining = True
    await topology.calm()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not ledger.still_owed() and not await topology.holding():
            return True
        await asyncio.sleep(0.5)
    return False


def _leftover_files(data_path: Path, ledger: Ledger) -> list[str]:
    """Disk-queue files of topics or channels that are no longer alive."""
    live = {channel.topic.name for channel in ledger.live_channels()}
    live |= {f"{channel.topic.name}:{channel.name}" for channel in ledger.live_channels()}
    return sorted(str(path.relative_to(data_path)) for path in data_path.rglob("*.diskqueue.*")
                  if path.name.split(".diskqueue.")[0] not in live)


# -- the report ------------------------------------------------------------------------------------------------


def print_report(result: SoakResult, report: Report = print) -> None:
    _report_messages(result, report)
    _report_processes(result, report)
    verdict = "OK" if result.ok else "FAILED"
    report(f"-- {verdict}: lost {result.tally.lost + result.tally.shortfall}, anomalies "
           f"{result.tally.anomalies() or 'none'}, drained {result.drained}, alive {result.alive}, lookupd knew "
           f"{min(result.nodes_known, default=0)} to {max(result.nodes_known, default=0)} nsqd")


def _report_messages(result: SoakResult, report: Report) -> None:
    tally, counters = result.tally, result.counters
    minutes = result.settings.minutes
    drain = (f"drained in {result.drain_seconds:.1f} s" if result.drained else
             f"NOT drained after {result.drain_seconds:.0f} s: the nsqds still hold {result.held_at_end:,} messages")
    report(f"-- messages ({tally.acknowledged / (minutes * 60):,.0f} msg/s acknowledged; {drain})")
    rows = [
        ("acknowledged", tally.acknowledged),
        ("refused (publish failed)", tally.refused),
        ("copies owed (message x channel)", tally.copies),
        ("  finished (FIN)", tally.finished),
        ("  deleted with their channel or topic", tally.deleted),
        ("    of which nsqd no longer held at the deletion (lost)", tally.shortfall),
        ("  lost (never FINed on a live channel)", tally.lost),
        ("  unaccounted for", tally.unaccounted),
        ("acknowledged to a topic without channels (held there)", tally.unowed),
        ("deliveries", tally.deliveries),
        ("  delivered more than once (attempts > 1)", tally.redelivered),
        ("  FINed again (first FIN too late or lost)", tally.finished_again),
        ("  on a channel being created or deleted (not owed)", tally.extra),
        *((f"  answered {action.value}", tally.actions[action]) for action in Action),
        ("nsqd's counts: messages to channels", result.nsqd_counts.get("message_count", 0)),
        ("  requeued", result.nsqd_counts.get("requeue_count", 0)),
        ("  timed out", result.nsqd_counts.get("timeout_count", 0)),
        ("topics deleted", result.deletions.get("topics", 0)),
        ("channels deleted (besides their topics')", result.deletions.get("channels", 0)),
        ("consumers started", counters.consumers_started),
        ("bare connections dropped without CLS", counters.rude_connections),
    ]
    for name, count in rows:
        report(f"{name:<52} {count:>12,}")
    report("publishes by kind: " + ", ".join(f"{kind} {count:,}" for kind, count in counters.publishes.items()))
    for problem in [*result.shortfalls, *counters.publish_errors[:5], *counters.client_errors[:5],
                    *result.leftovers[:5]]:
        report(f"   !! {problem}")


def _report_processes(result: SoakResult, report: Report) -> None:
    settings = result.settings
    warm = settings.minutes * settings.warm_up
    report(f"-- RSS (MiB) sampled every {settings.sample_every:g} s; slope after the first {warm:.1f} min")
    report(f"{'process':<12} {'first':>8} {'last':>8} {'max':>8} {'slope KiB/min':>14} {'MiB/hour':>9} "
           f"{'open files first/last/max':>26} {'CPU s':>8}")
    for series in result.series:
        slope = series.slope(warm)
        files = f"{series.fds[0]}/{series.fds[-1]}/{max(series.fds)}"
        report(f"{series.name:<12} {series.rss[0] / 1024:>8.1f} {series.rss[-1] / 1024:>8.1f} "
               f"{max(series.rss) / 1024:>8.1f} {slope:>14.1f} {slope * 60 / 1024:>9.2f} {files:>26} "
               f"{result.cpu.get(series.name, 0.0):>8.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds between RSS samples")
    parser.add_argument("--rate", type=float, default=1000.0, help="messages per second, all producers together")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("nsq.client").setLevel(logging.CRITICAL)  # the soak's consumers drop connections on purpose
    # the services run from compiled bytecode, as an installed package does
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    for package in ("shared", "services"):
        compileall.compile_dir(ROOT / package, quiet=1)
    settings = Settings(args.minutes, args.sample_every, args.rate, args.seed)
    with tempfile.TemporaryDirectory(prefix="soak-") as data_path:
        result = run_soak(settings, Path(data_path), lambda line: print(line, flush=True))
    print_report(result, lambda line: print(line, flush=True))
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":
    main()
