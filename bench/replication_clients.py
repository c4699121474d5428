"""NSQ's clients across a failover: ``.venv/bin/python -m bench.replication_clients --go-bin DIR [--nsqjs DIR]``
(``--go-bin``: NSQ's ``nsqd``, ``to_nsq`` and ``nsq_tail``, built from NSQ's source; ``--nsqjs``: a directory
whose ``node_modules`` has nsqjs, ``npm install nsqjs``; Debian's etcd-server).

Three nsqd of this project at ``--replication-factor=3`` and one of NSQ's Go nsqd, unreplicated, all registered
with one nsqlookupd. NSQ's ``to_nsq`` (go-nsq's producer) publishes to the first replicated nsqd and to the Go
nsqd; NSQ's ``nsq_tail`` (go-nsq's consumer) finds every nsqd through lookupd. The first replicated nsqd is killed
with -9 once its producer has exited (every message answered OK), its channel paused until then so that its
messages wait there. Prints how many messages ``nsq_tail`` received
of each nsqd's, and how long after the kill the last of the lost nsqd's arrived. With ``--nsqjs``, then the same
with nsqjs's Writer and Reader (bench/nsqjs/failover.js) on another channel, the second replicated nsqd killed.
Exits 1 if any message is missing.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.etcd import start_etcd
from harness.processes import FAST_SCAN, ROOT, NSQDProcess, start_lookupd, start_nsqd, wait_for

TOPIC, CHANNEL = "orders", "tail"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--go-bin", type=Path, required=True, help="directory of NSQ's Go binaries")
    parser.add_argument("--nsqjs", type=Path, help="a directory whose node_modules holds nsqjs")
    parser.add_argument("--messages", type=int, default=500, help="to each nsqd published to")
    args = parser.parse_args()
    etcd, lookupd = start_etcd(), start_lookupd()
    started: list[NSQDProcess] = []
    tail: subprocess.Popen[str] | None = None
    try:
        with tempfile.TemporaryDirectory() as scratch:
            lookup = f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"
            for index in range(3):
                (Path(scratch) / str(index)).mkdir()
                started.append(start_nsqd(*FAST_SCAN, lookup, f"--etcd-address={etcd.addresses[0]}",
                                          "--replication-address=127.0.0.1:0", "--replication-factor=3",
                                          data_path=Path(scratch) / str(index)))
            go = start_nsqd(lookup, data_path=Path(scratch), program=[str(args.go_bin / "nsqd")])
            started.append(go)
            origin = started[0]
            for nsqd in started[:3]:
                wait_for(lambda: len(json.loads(nsqd.http("GET", "/stats?format=json")[2])["replication"]
                                     ["in_sync_recorded"]) == 2, 30, "every nsqd mirrored")
            for nsqd in started:  # as where consumers already are: nsq_tail connects to every nsqd at once
                nsqd.http("POST", f"/topic/create?topic={TOPIC}")
                nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}")
            received: list[tuple[str, float]] = []
            tail = subprocess.Popen([str(args.go_bin / "nsq_tail"), f"--topic={TOPIC}", f"--channel={CHANNEL}",
                                     f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}",
                                     f"-n={2 * args.messages}"], stdout=subprocess.PIPE,
                                    stderr=subprocess.DEVNULL, text=True)
            threading.Thread(target=_read, args=(tail, received), daemon=True).start()
            wait_for(lambda: sum(len(nsqd.channel_stats(TOPIC, CHANNEL).get("clients") or []) for nsqd in started)
                     == 4, 30, "nsq_tail connected to every nsqd")
            origin.http("POST", f"/channel/pause?topic={TOPIC}&channel={CHANNEL}")  # its messages wait there
            expected = {name: [f"{name} {number}" for number in range(args.messages)] for name in ("replicated", "go")}
            for name, nsqd in (("replicated", origin), ("go", go)):
                publish = subprocess.run([str(args.go_bin / "to_nsq"), f"--topic={TOPIC}",
                                          f"--nsqd-tcp-address={nsqd.tcp_address_text}"],
                                         input="\n".join(expected[name]) + "\n", text=True, capture_output=True,
                                         timeout=120)
                if publish.returncode != 0:
                    raise SystemExit(f"to_nsq to the {name} nsqd failed:\n{publish.stderr[-2000:]}")
            origin.process.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            deadline = time.monotonic() + 60
            while len(received) < 2 * args.messages and time.monotonic() < deadline:
                time.sleep(0.1)
            bodies = [body for body, _ in received]
            for name, sent in expected.items():
                got = set(bodies) & set(sent)
                print(f"{name} nsqd: {len(got)} of {len(sent)} received by nsq_tail through lookupd"
                      + (f", the last {max(at for body, at in received if body in got) - killed_at:.1f} s after the "
                         "kill" if name == "replicated" and got else ""))
            missing = sum(len(set(sent) - set(bodies)) for sent in expected.values())
            acknowledged = 2 * args.messages
            if args.nsqjs:
                acknowledged += args.messages
                missing += nsqjs_failover(args.nsqjs, started[1], started, lookupd, args.messages)
            print(f"acknowledged {acknowledged}, lost {missing}")
            sys.exit(1 if missing else 0)
    finally:
        if tail is not None and tail.poll() is None:
            tail.kill()
        for nsqd in started:
            nsqd.stop()
        lookupd.stop()
        etcd.stop()


def nsqjs_failover(modules: Path, victim: NSQDProcess, nodes: list[NSQDProcess], lookupd: NSQDProcess,
                   count: int) -> int:
    """nsqjs's Writer publishes ``count`` to ``victim`` (its channel paused: they wait there), which is then killed;
    how many of them nsqjs's Reader, finding the nsqd through lookupd, did not receive."""
    alive = [nsqd for nsqd in nodes if nsqd.process.poll() is None]
    for nsqd in alive:
        nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel=js")
    victim.http("POST", f"/channel/pause?topic={TOPIC}&channel=js")
    client = subprocess.Popen(["node", str(ROOT / "bench" / "nsqjs" / "failover.js"), victim.tcp_address_text,
                               f"127.0.0.1:{lookupd.http_port}", TOPIC, "js", str(count)],
                              env={**os.environ, "NODE_PATH": str(modules / "node_modules")},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    received: list[tuple[str, float]] = []
    said: list[tuple[str, float]] = []
    threading.Thread(target=_read, args=(client, received), daemon=True).start()
    threading.Thread(target=_read, args=(client, said, "stderr"), daemon=True).start()
    try:
        wait_for(lambda: any(line == "published" for line, _ in said), 60,
                 lambda: f"nsqjs publishing: {[line for line, _ in said][-5:]}")
        victim.process.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        sent = {f"nsqjs {number}" for number in range(count)}
        deadline = time.monotonic() + 60
        while not sent <= {body for body, _ in received} and time.monotonic() < deadline:
            time.sleep(0.1)
        got = sent & {body for body, _ in received}
        print(f"nsqjs: {len(got)} of {count} published to a replicated nsqd received through lookupd"
              + (f", the last {max(at for body, at in received if body in got) - killed_at:.1f} s after the kill"
                 if got else ""))
        return len(sent - got)
    finally:
        client.kill()
        client.wait()


def _read(process: subprocess.Popen[str], lines: list[tuple[str, float]], stream: str = "stdout") -> None:
    pipe = getattr(process, stream)
    assert pipe is not None
    for line in pipe:
        lines.append((line.rstrip("\n"), time.monotonic()))


if __name__ == "__main__":
    main()
