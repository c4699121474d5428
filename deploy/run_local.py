"""The cluster on this machine without Docker (``make up``): one nsqlookupd, two nsqd registered with it and the
admin, on NSQ's default ports (lookupd 4160/4161, nsqd 4150/4151 and 4250/4251, admin 4171), each nsqd with its own
node ID (1 and 2) and data directory, and the admin's history in ``admin/`` beside them.

``--replicated`` (``make up ARGS=--replicated``): three nsqd instead (4150, 4250, 4350, their replication links on
4153, 4253, 4353) at ``--replication-factor=3``, with a 3-member etcd (Debian's etcd-server; clients on 2379, 2479
and 2579, peers on 2380, 2480 and 2580, data in ``etcd-*/``).

``--auth`` (``make up ARGS=--auth``): the HTTP APIs behind the project's ``nsq_auth_server`` (on 4181), as TCP's AUTH
already is: lookupd and each nsqd with ``--auth-http-address`` and ``--http-auth-required``. Its rules, made at
start in ``auth/rules.json`` with fresh random secrets, grant ``operator`` everything (the admin's and the nsqds'
secret, in ``auth/operator.secret``), ``publisher`` publishing and ``consumer`` subscribing to every topic; each
secret is also in ``auth/<name>.secret``, for ``curl -H "Authorization: Bearer $(cat auth/publisher.secret)"``.

Waits until every service answers (/ping; etcd's /health), prints where they are, streams their logs with a prefix
per service, and stops them all on Ctrl-C (or when one of them exits).

    python deploy/run_local.py [--data-path DIR] [--port-offset N] [--host ADDRESS] [--replicated] [--auth]
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# (name, command, HTTP port, the path that answers 200 once it is up)
Service = tuple[str, list[str], int, str]
# peers one above each; with --port-offset up to ~20000 all stay below the kernel's ephemeral ports (32768 and up),
# which the clients of a busy machine may hold
ETCD_CLIENT_PORTS = (2379, 2479, 2579)


def plan(host: str, offset: int, data_path: Path, replicated: bool = False, auth: bool = False) -> list[Service]:
    lookupd_tcp, lookupd_http = 4160 + offset, 4161 + offset
    services: list[Service] = []
    guarded: list[str] = []  # the flags of lookupd and the nsqds with --auth
    secret_flag: list[str] = []  # the admin's and the nsqds' secret
    if auth:
        rules, operator = auth_rules(data_path / "auth")
        services.append(("auth", [sys.executable, "-m", "apps.nsq_auth_server",
                                  f"--http-address={host}:{4181 + offset}", f"--rules={rules}"], 4181 + offset,
                         "/ping"))
        guarded = [f"--auth-http-address={host}:{4181 + offset}", "--http-auth-required"]
        secret_flag = [f"--http-client-auth-secret-file={operator}"]
    services.append(("nsqlookupd", [
        sys.executable, "-m", "services.lookupd", f"--tcp-address={host}:{lookupd_tcp}",
        f"--http-address={host}:{lookupd_http}", f"--broadcast-address={host}", *guarded], lookupd_http, "/ping"))
    replication: list[str] = []
    if replicated:
        members = etcd_members(host, offset, data_path)
        services += members
        replication = ["--replication-factor=3", *(f"--etcd-address={host}:{port}" for _, _, port, _ in members)]
    # each nsqd its own node ID: the default, from the host name, is the same for both, and so would be the
    # message IDs they hand out at the same time
    for node_id, tcp_port in enumerate((4150 + offset, 4250 + offset, 4350 + offset)[:3 if replicated else 2], 1):
        directory = data_path / f"nsqd-{tcp_port}"
        directory.mkdir(parents=True, exist_ok=True)
        linked = [f"--replication-address={host}:{tcp_port + 3}", *replication] if replicated else []
        services.append((f"nsqd-{tcp_port}", [
            sys.executable, "-m", "services.nsqd", f"--node-id={node_id}", f"--tcp-address={host}:{tcp_port}",
            f"--http-address={host}:{tcp_port + 1}", f"--broadcast-address={host}",
            f"--lookupd-tcp-address={host}:{lookupd_tcp}", f"--data-path={directory}", *linked, *guarded,
            *secret_flag], tcp_port + 1, "/ping"))
    admin_directory = data_path / "admin"
    admin_directory.mkdir(parents=True, exist_ok=True)
    services.append(("nsqadmin", [sys.executable, "-m", "services.admin", f"--http-address={host}:{4171 + offset}",
                                  f"--lookupd-http-address={host}:{lookupd_http}", f"--data-path={admin_directory}",
                                  *secret_flag], 4171 + offset, "/ping"))
    return services


def auth_rules(directory: Path) -> tuple[Path, Path]:
    """``nsq_auth_server``'s rules with fresh secrets, each secret also in a file of its own (readable by this user
    alone); the rules' path and the operator's secret file."""
    directory.mkdir(parents=True, exist_ok=True)
    every_topic = {"topic": ".*", "channels": [".*"]}
    grants = {"operator": ["subscribe", "publish", "admin"], "publisher": ["publish"], "consumer": ["subscribe"]}
    rules: dict[str, dict[str, object]] = {}
    for name, permissions in grants.items():
        secret = secrets.token_urlsafe(24)
        rules[secret] = {"identity": name, "authorizations": [{**every_topic, "permissions": permissions}]}
        path = directory / f"{name}.secret"
        path.write_text(secret + "\n")
        path.chmod(0o600)
    path = directory / "rules.json"
    path.write_text(json.dumps({"ttl": 300, "secrets": rules}, indent=2))
    path.chmod(0o600)
    return path, directory / "operator.secret"


def etcd_members(host: str, offset: int, data_path: Path) -> list[Service]:
    etcd = shutil.which("etcd")
    if etcd is None:
        raise SystemExit("--replicated needs etcd: apt-get install etcd-server")
    ports = [(client + offset, client + 1 + offset) for client in ETCD_CLIENT_PORTS]
    cluster = ",".join(f"etcd{index}=http://{host}:{peer}" for index, (_, peer) in enumerate(ports))
    return [(f"etcd{index}", [
        etcd, "--name", f"etcd{index}", "--data-dir", str(data_path / f"etcd-{index}"),
        "--listen-client-urls", f"http://{host}:{client}", "--advertise-client-urls", f"http://{host}:{client}",
        "--listen-peer-urls", f"http://{host}:{peer}", "--initial-advertise-peer-urls", f"http://{host}:{peer}",
        "--initial-cluster", cluster, "--initial-cluster-token", "nsq-local", "--log-level", "warn"], client,
        "/health") for index, (client, peer) in enumerate(ports)]


def stream(name: str, process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        sys.stdout.write(f"{name:<12}| {line}")
        sys.stdout.flush()


def answers(host: str, port: int, path: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-path", default=str(ROOT / ".data"), help="where each nsqd gets its directory")
    parser.add_argument("--port-offset", type=int, default=0, help="added to every port")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on and broadcast")
    parser.add_argument("--replicated", action="store_true",
                        help="three nsqd at --replication-factor=3 and a 3-member etcd (etcd-server)")
    parser.add_argument("--auth", action="store_true",
                        help="the HTTP APIs behind nsq_auth_server (on 4181), secrets in DATA_PATH/auth/")
    args = parser.parse_args()
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    running: list[tuple[str, subprocess.Popen[str], int, str]] = []
    try:
        for name, command, http_port, health in plan(args.host, args.port_offset, Path(args.data_path),
                                                     args.replicated, args.auth):
            process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       text=True, start_new_session=True)
            running.append((name, process, http_port, health))
            threading.Thread(target=stream, args=(name, process), daemon=True).start()
        deadline = time.monotonic() + 30
        while not all(answers(args.host, port, health) for _, _, port, health in running):
            if time.monotonic() > deadline or stopping.is_set() or any(p.poll() is not None for _, p, _, _ in running):
                print("cluster did not come up", file=sys.stderr)
                return 1
            time.sleep(0.1)
        print(f"cluster up: nsqlookupd http://{args.host}:{4161 + args.port_offset} (TCP {4160 + args.port_offset}); "
              + "; ".join(f"{name} TCP {port - 1}, http://{args.host}:{port}" for name, _, port, _ in running
                          if name.startswith("nsqd"))
              + ("; etcd " + ",".join(f"{args.host}:{port}" for name, _, port, _ in running if name.startswith("etcd"))
                 if args.replicated else "")
              + f"; nsqadmin http://{args.host}:{4171 + args.port_offset}"
              + (f"; nsq_auth_server http://{args.host}:{4181 + args.port_offset}, secrets in "
                 f"{Path(args.data_path) / 'auth'}" if args.auth else "")
              + f". Find nodes: curl 'http://{args.host}:{4161 + args.port_offset}/lookup?topic=<topic>'. "
                "Ctrl-C stops everything.", flush=True)
        while not stopping.is_set():
            if any(process.poll() is not None for _, process, _, _ in running):
                print("a service exited; stopping the others", file=sys.stderr)
                return 1
            stopping.wait(0.2)
        return 0
    finally:
        # etcd last: an nsqd stopping cleanly ends its lease there
        etcd = [service for service in running if service[0].startswith("etcd")]
        for group in ([service for service in running if service not in etcd], etcd):
            for _, process, _, _ in reversed(group):
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for _, process, _, _ in group:
                try:
                    process.wait(15)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


if __name__ == "__main__":
    sys.exit(main())
