"""The cluster on this machine without Docker (``make up``): one nsqlookupd, two nsqd registered with it and the
admin, on NSQ's default ports (lookupd 4160/4161, nsqd 4150/4151 and 4250/4251, admin 4171), each nsqd with its own
node ID (1 and 2) and data directory, and the admin's history in ``admin/`` beside them.

Waits until every service answers /ping, prints where they are, streams their logs with a prefix per service,
and stops them all on Ctrl-C (or when one of them exits).

    python deploy/run_local.py [--data-path DIR] [--port-offset N] [--host ADDRESS]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def plan(host: str, offset: int, data_path: Path) -> list[tuple[str, list[str], int]]:
    """(name, command, HTTP port) of every service."""
    lookupd_tcp, lookupd_http = 4160 + offset, 4161 + offset
    services = [("nsqlookupd", [sys.executable, "-m", "services.lookupd", f"--tcp-address={host}:{lookupd_tcp}",
                                f"--http-address={host}:{lookupd_http}", f"--broadcast-address={host}"],
                 lookupd_http)]
    # each nsqd its own node ID: the default, from the host name, is the same for both, and so would be the
    # message IDs they hand out at the same time
    for node_id, tcp_port in enumerate((4150 + offset, 4250 + offset), start=1):
        directory = data_path / f"nsqd-{tcp_port}"
        directory.mkdir(parents=True, exist_ok=True)
        services.append((f"nsqd-{tcp_port}", [
            sys.executable, "-m", "services.nsqd", f"--node-id={node_id}", f"--tcp-address={host}:{tcp_port}",
            f"--http-address={host}:{tcp_port + 1}", f"--broadcast-address={host}",
            f"--lookupd-tcp-address={host}:{lookupd_tcp}", f"--data-path={directory}"], tcp_port + 1))
    admin_directory = data_path / "admin"
    admin_directory.mkdir(parents=True, exist_ok=True)
    services.append(("nsqadmin", [sys.executable, "-m", "services.admin", f"--http-address={host}:{4171 + offset}",
                                  f"--lookupd-http-address={host}:{lookupd_http}", f"--data-path={admin_directory}"],
                     4171 + offset))
    return services


def stream(name: str, process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(f"{name:<12}| {line}")
        sys.stdout.flush()


def answers_ping(host: str, port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/ping", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-path", default=str(ROOT / ".data"), help="where each nsqd gets its directory")
    parser.add_argument("--port-offset", type=int, default=0, help="added to every port")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on and broadcast")
    args = parser.parse_args()
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    running: list[tuple[str, subprocess.Popen[str], int]] = []
    try:
        for name, command, http_port in plan(args.host, args.port_offset, Path(args.data_path)):
            process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, start_new_session=True)
            running.append((name, process, http_port))
            threading.Thread(target=stream, args=(name, process), daemon=True).start()
        deadline = time.monotonic() + 20
        while not all(answers_ping(args.host, port) for _, _, port in running):
            if time.monotonic() > deadline or stopping.is_set() or any(p.poll() is not None for _, p, _ in running):
                print("cluster did not come up", file=sys.stderr)
                return 1
            time.sleep(0.1)
        print(f"cluster up: nsqlookupd http://{args.host}:{4161 + args.port_offset} (TCP {4160 + args.port_offset}); "
              + "; ".join(f"{name} TCP {port - 1}, http://{args.host}:{port}" for name, _, port in running[1:-1])
              + f"; nsqadmin http://{args.host}:{4171 + args.port_offset}"
              + f". Find nodes: curl 'http://{args.host}:{4161 + args.port_offset}/lookup?topic=<topic>'. "
                "Ctrl-C stops everything.", flush=True)
        while not stopping.is_set():
            if any(process.poll() is not None for _, process, _ in running):
                print("a service exited; stopping the others", file=sys.stderr)
                return 1
            stopping.wait(0.2)
        return 0
    finally:
        for _, process, _ in reversed(running):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for _, process, _ in running:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


if __name__ == "__main__":
    sys.exit(main())
