"""compose.yaml for real: the images built from a local base image, the cluster up in a Docker engine this test
starts (root only: it installs Debian's docker.io and runs dockerd), then what a user does with it: publish through
the host ports, consume on the host and in a container through lookupd, see the topic in the admin, find the
pipeline's Parquet, and ``down``/``up`` with nsqd's messages kept on its volume. Nothing is left running."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator

import pytest

from harness.processes import ROOT, wait_for
from nsqclient import Consumer, Message, Producer

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1200)]

ENGINE = ROOT / "tests" / "e2e" / "docker-engine.sh"
PROJECT = "nsq-e2e"
BASE_IMAGE = "local/python-base:bookworm-cc-etcd"
HOST_PORTS = (4150, 4151, 4250, 4251, 4161, 4261, 4171, 4350, 4351, 4450, 4451, 4550, 4551, 4650, 4651, 4661,
              4671)
REPLICATED = ("etcd1", "etcd2", "etcd3", "nsqd3", "nsqd4", "nsqd5")
GUARDED = ("auth", "lookupd-auth", "nsqd-auth", "admin-auth")
EVERY_PROFILE = ("--profile", "spark", "--profile", "replicated", "--profile", "auth")


class Docker:
    """The docker client against the engine the test runs; every call's output goes to the test's log."""

    def __init__(self, environment: dict[str, str]) -> None:
        self.environment = environment

    def run(self, *args: str, timeout: float = 600, check: bool = True) -> str:
        started = time.monotonic()
        result = subprocess.run(["/usr/bin/docker", *args], env=self.environment, cwd=ROOT, text=True,
                                capture_output=True, timeout=timeout)
        print(f"$ docker {' '.join(args)}  ({time.monotonic() - started:.1f}s)\n{result.stdout[-2000:]}"
              f"{result.stderr[-2000:]}")
        if check and result.returncode != 0:
            raise AssertionError(f"docker {' '.join(args)} exited {result.returncode}:\n{result.stderr[-4000:]}")
        return result.stdout

    def compose(self, *args: str, timeout: float = 600, check: bool = True) -> str:
        return self.run("compose", "-p", PROJECT, *args, timeout=timeout, check=check)


def why_not_runnable() -> str | None:
    if os.geteuid() != 0:
        return "needs root: it installs docker.io and runs dockerd"
    if not shutil.which("apt-get") and not shutil.which("dockerd"):
        return "neither dockerd nor apt-get to install it"
    return None


def port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def docker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Docker]:
    reason = why_not_runnable()
    if reason:
        pytest.skip(reason)
    busy = [port for port in HOST_PORTS if port_in_use(port)]
    assert not busy, f"compose.yaml publishes {busy} on 127.0.0.1, and something already listens there (make up?)"
    root = "/tmp/nsq-e2e-dockerd"
    cache = ROOT / ".data" / "docker"  # kept between runs: the compose plugin and the base image
    environment = {**os.environ, "DOCKERD_ROOT": root, "DOCKER_CONFIG": str(cache / "client"),
                   "DOCKER_HOST": f"unix://{root}/docker.sock", "BASE_IMAGE": BASE_IMAGE, "OFFLINE": "1",
                   "BASE_TARBALL": str(cache / "python-base-cc-etcd.tar"),
                   "COMPOSE_PROGRESS": "plain", "COMPOSE_ANSI": "never"}
    timings: dict[str, float] = {}

    def timed(name: str, command: list[str], timeout: float) -> None:
        started = time.monotonic()
        subprocess.run(command, env=environment, cwd=ROOT, check=True, timeout=timeout)
        timings[name] = time.monotonic() - started

    try:
        timed("engine, compose and base image", ["bash", str(ENGINE), "start"], 900)
        timed("wheels", ["make", "--no-print-directory", "wheels"], 900)
        client = Docker(environment)
        # an engine left by a run cut short keeps its containers, every profile's: start from none
        client.compose(*EVERY_PROFILE, "down", "--volumes", "--remove-orphans", "--timeout", "10", timeout=300)
        started = time.monotonic()
        client.compose("build", timeout=900)
        client.compose("--profile", "replicated", "build", "etcd1", timeout=900)
        timings["build"] = time.monotonic() - started
        yield client
        started = time.monotonic()
        client.compose(*EVERY_PROFILE, "down", "--volumes", "--rmi", "all", "--timeout", "60", check=False)
        timings["down -v"] = time.monotonic() - started
    finally:
        subprocess.run(["bash", str(ENGINE), "stop"], env=environment, cwd=ROOT, timeout=300)
        print("timings:", ", ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items()))


def http(url: str, body: bytes | None = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET",
                                     headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


# what a condition on a container raises while the container is still starting: a refused connection, a failed
# ``docker compose exec``, an empty answer
NOT_YET = (OSError, AssertionError, ValueError)


def up(docker: Docker) -> float:
    started = time.monotonic()
    docker.compose("up", "--detach", "--wait", "--wait-timeout", "300", timeout=400)
    return time.monotonic() - started


async def consume_on_host(topic: str, channel: str, count: int) -> list[bytes]:
    """``count`` messages through both lookupds' host ports (they hand out 127.0.0.1 and the published ports)."""
    bodies: list[bytes] = []
    done = asyncio.Event()

    async def handle(message: Message) -> None:
        bodies.append(message.body)
        if len(bodies) >= count:
            done.set()

    consumer = Consumer(topic, channel, handle, lookupd_http_addresses=["127.0.0.1:4161", "127.0.0.1:4261"],
                        lookupd_poll_interval=1)
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await consumer.stop()
    return bodies


async def publish_on_host(topic: str, bodies: list[bytes]) -> None:
    """Through lookupd's host port, which hands out the nsqd's host addresses."""
    async with Producer(lookupd_http_addresses=["127.0.0.1:4161"]) as producer:
        await producer.multi_publish(topic, bodies)


def channel_depth(http_port: int, topic: str, channel: str) -> int | None:
    stats = json.loads(http(f"http://127.0.0.1:{http_port}/stats?format=json&topic={topic}")[1])
    for topic_stats in stats.get("topics") or []:
        for channel_stats in topic_stats.get("channels") or []:
            if channel_stats["channel_name"] == channel:
                return int(channel_stats["depth"])
    return None


def test_the_cluster_in_compose(docker: Docker) -> None:
    timings = {"up": up(docker)}
    services = {json.loads(line)["Service"]: json.loads(line)["Health"]
                for line in docker.compose("ps", "--format", "json").splitlines() if line.strip()}
    assert services == dict.fromkeys(("lookupd1", "lookupd2", "nsqd1", "nsqd2", "admin", "pipeline"), "healthy")
    # the images' build of the package compiled the per-message path (their base has a C compiler)
    build = docker.compose("exec", "-T", "nsqd1", "python3", "-c",
                           "from shared import compiled; print(compiled.describe())")
    assert "modules compiled" in build, build

    # each nsqd its own node ID, so that the message IDs they hand out differ
    assert {http(f"http://127.0.0.1:{port}/config/id")[1] for port in (4151, 4251)} == {b"1", b"2"}

    # lookupd answers the host with host addresses, a container with the network's
    host_view = json.loads(http("http://127.0.0.1:4161/nodes")[1])["producers"]
    assert {(p["broadcast_address"], p["tcp_port"]) for p in host_view} == {("127.0.0.1", 4150), ("127.0.0.1", 4250)}
    inside = docker.compose("exec", "-T", "admin", "python3", "-c",
                            "import urllib.request; print(urllib.request.urlopen('http://lookupd2:4161/nodes').read()"
                            ".decode())")
    assert {(p["broadcast_address"], p["tcp_port"]) for p in json.loads(inside)["producers"]} == {
        ("nsqd1", 4150), ("nsqd2", 4150)}

    # both channels exist before anything is published, so each gets every message
    for http_port in (4151, 4251):
        assert http(f"http://127.0.0.1:{http_port}/topic/create?topic=orders", b"")[0] == 200
        for channel in ("host", "container"):
            assert http(f"http://127.0.0.1:{http_port}/channel/create?topic=orders&channel={channel}", b"")[0] == 200
    sent = [b"order %d" % number for number in range(40)]
    asyncio.run(publish_on_host("orders", sent[:20]))  # TCP, to an nsqd found through lookupd
    assert http("http://127.0.0.1:4251/mpub?topic=orders", b"\n".join(sent[20:]))[0] == 200  # HTTP, nsqd2's

    started = time.monotonic()
    assert sorted(asyncio.run(consume_on_host("orders", "host", len(sent)))) == sorted(sent)
    timings["host consumer"] = time.monotonic() - started
    tail = docker.compose("exec", "-T", "nsqd2", "nsq_tail", "--topic=orders", "--channel=container",
                          "--lookupd-http-address=lookupd1:4161", "-n", str(len(sent)), timeout=120)
    assert sorted(line.encode() for line in tail.splitlines() if line) == sorted(sent)

    # the admin aggregates both nodes (it finds them through lookupd, inside the network)
    status, page = http("http://127.0.0.1:4171/topics/orders")
    assert status == 200 and b"nsqd1:4151" in page and b"nsqd2:4151" in page
    topic = json.loads(http("http://127.0.0.1:4171/api/topics/orders")[1])
    assert topic["message_count"] == len(sent) and len(topic["nodes"]) == 2

    # the pipeline archives topic events to Parquet on its volume
    events = [json.dumps({"n": number}).encode() for number in range(30)]
    assert http("http://127.0.0.1:4151/mpub?topic=events", b"\n".join(events[:15]))[0] == 200
    assert http("http://127.0.0.1:4251/mpub?topic=events", b"\n".join(events[15:]))[0] == 200
    count_rows = ("import pyarrow.dataset as ds; "
                  "print(ds.dataset('/data/pipeline/archive', format='parquet', partitioning='hive').count_rows())")
    started = time.monotonic()
    wait_for(lambda: int(docker.compose("exec", "-T", "pipeline", "python3", "-c", count_rows).strip() or 0)
             == len(events), 180, "the pipeline's Parquet", interval=3, retry_on=NOT_YET)
    timings["pipeline archived"] = time.monotonic() - started

    # --profile spark: the same job submitted to a Spark master and worker, archiving what comes after it started
    started = time.monotonic()
    spark = ("spark-master", "spark-worker", "pipeline-cluster")
    docker.compose("--profile", "spark", "up", "--detach", "--wait", "--wait-timeout", "300", *spark, timeout=400)
    timings["spark profile up"] = time.monotonic() - started
    # its channel is new: only what is published once it exists reaches it
    wait_for(lambda: channel_depth(4151, "events", "nsq_to_parquet_cluster") is not None, 120,
             "the cluster pipeline subscribed", interval=1, retry_on=NOT_YET)
    later = [json.dumps({"n": number}).encode() for number in range(30, 50)]
    assert http("http://127.0.0.1:4151/mpub?topic=events", b"\n".join(later))[0] == 200
    count_cluster_rows = count_rows.replace("/data/pipeline/archive", "/data/pipeline/cluster-archive")
    wait_for(lambda: int(docker.compose("exec", "-T", "pipeline-cluster", "python3", "-c", count_cluster_rows)
                         .strip() or 0) == len(later), 180, "the cluster pipeline's Parquet", interval=3,
             retry_on=NOT_YET)
    workers = docker.compose("logs", "spark-worker")
    assert "Asked to launch executor" in workers  # the work ran on the worker, not in the driver
    docker.compose("--profile", "spark", "rm", "--stop", "--force", *spark, timeout=120)
    timings["spark profile archived"] = time.monotonic() - started

    # --profile replicated: three nsqd mirroring one another through a 3-member etcd; one killed with -9, what it
    # had acknowledged is taken over by a survivor
    started = time.monotonic()
    docker.compose("--profile", "replicated", "up", "--detach", "--wait", "--wait-timeout", "300", *REPLICATED,
                   timeout=400)
    for port in (4351, 4451, 4551):
        wait_for(lambda: len(json.loads(http(f"http://127.0.0.1:{port}/stats?format=json")[1])["replication"]
                             ["in_sync_recorded"]) == 2, 60, f"the nsqd on {port} mirrored on both others", interval=1,
                 retry_on=NOT_YET + (KeyError,))
    assert http("http://127.0.0.1:4351/topic/create?topic=replicated", b"")[0] == 200
    assert http("http://127.0.0.1:4351/channel/create?topic=replicated&channel=c", b"")[0] == 200
    replicated = [b"replicated %d" % number for number in range(30)]
    assert http("http://127.0.0.1:4351/mpub?topic=replicated", b"\n".join(replicated)) == (200, b"OK")
    timings["replicated profile up"] = time.monotonic() - started
    started = time.monotonic()
    docker.compose("kill", "-s", "SIGKILL", "nsqd3")
    wait_for(lambda: sum(channel_depth(port, "replicated", "c") or 0 for port in (4451, 4551)) == len(replicated),
             60, "nsqd3's messages on a survivor", interval=1, retry_on=NOT_YET)
    timings["replicated failover"] = time.monotonic() - started
    docker.compose("--profile", "replicated", "rm", "--stop", "--force", *REPLICATED, timeout=120)

    # --profile auth: a lookupd, an nsqd and an admin whose HTTP APIs answer to nsq_auth_server (deploy/auth's
    # example secrets)
    started = time.monotonic()
    docker.compose("--profile", "auth", "up", "--detach", "--wait", "--wait-timeout", "300", *GUARDED, timeout=400)
    publisher = {"Authorization": "Bearer example-publisher-secret"}
    assert http("http://127.0.0.1:4651/pub?topic=guarded", b"anonymous")[0] == 401
    assert http("http://127.0.0.1:4651/pub?topic=guarded", b"published", publisher) == (200, b"OK")
    assert http("http://127.0.0.1:4661/topics")[0] == 401
    wait_for(lambda: b"guarded" in http("http://127.0.0.1:4671/api/topics")[1], 30,
             "the admin reading the guarded lookupd with its secret", interval=1, retry_on=NOT_YET)
    timings["auth profile up"] = time.monotonic() - started
    docker.compose("--profile", "auth", "rm", "--stop", "--force", *GUARDED, timeout=120)

    # down and up again: nsqd wrote its memory queue to its volume on SIGTERM
    assert http("http://127.0.0.1:4151/topic/create?topic=kept", b"")[0] == 200
    assert http("http://127.0.0.1:4151/channel/create?topic=kept&channel=later", b"")[0] == 200
    kept = [b"kept %d" % number for number in range(25)]
    assert http("http://127.0.0.1:4151/mpub?topic=kept", b"\n".join(kept))[0] == 200
    started = time.monotonic()
    docker.compose("down", "--timeout", "60")
    timings["down"] = time.monotonic() - started
    assert not docker.compose("ps", "--all", "--quiet").strip()
    timings["up again"] = up(docker)
    assert channel_depth(4151, "kept", "later") == len(kept)
    assert sorted(asyncio.run(consume_on_host("kept", "later", len(kept)))) == sorted(kept)
    print("timings:", ", ".join(f"{name} {seconds:.1f}s" for name, seconds in timings.items()))
