"""Network namespaces for partition tests: nodes on one Ethernet segment that the test (in the root namespace)
reaches too, cut from one another by iptables DROP rules inside a node's namespace.

    with Network("nsqd", "lookupd") as net:
        start_nsqd(host=net.address("nsqd"), program=net.python("nsqd", "services.nsqd"))
        net.cut("nsqd", "lookupd")    # nothing passes between them, both ways; the root still reaches both
        net.heal("nsqd", "lookupd")

Layout, on 10.19.N.0/24 with N a subnet no interface of the root namespace uses::

    node namespaces: eth0 10.19.N.1, 10.19.N.2, ...   root namespace: nsq<pid><token> 10.19.N.254
                 \\                                       /
                  veth ---- hub namespace: bridge br0 ---- veth

The root namespace gets one interface; everything else lives in namespaces of this network. Deleting them
removes it all, the root's interface with its veth peer, and the cuts with their namespaces. Namespace names carry
the creating process's id, so runs in parallel do not collide and a later run deletes what a killed one left.
DROP rather than REJECT: a cut link stays silent, as a partition is, and TCP finds out only by its timeouts.
"""

from __future__ import annotations

import fcntl
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import TracebackType

ROOT = "root"  # the test's own namespace, as a peer in cut/heal
PREFIX = "nsqnet"
_LOCK = Path("/tmp/nsqnet.lock")  # held while a network picks its subnet and takes it


class NetworkError(Exception):
    """A command of ip or iptables failed."""


def unavailable() -> str | None:
    """Why this machine cannot make networks (not root, no ``ip``/``iptables``, ``ip netns`` refused), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "iptables") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not installed"
    probe = f"{PREFIX}-{os.getpid()}-probe"
    try:
        _run(["ip", "netns", "add", probe])
        _run(["ip", "netns", "exec", probe, "iptables", "-L", "-n"])
    except NetworkError as error:
        return f"network namespaces unusable: {error}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Network:
    """Namespaces named after ``nodes``, each with one address on a segment shared with the root namespace."""

    def __init__(self, *nodes: str) -> None:
        assert nodes and ROOT not in nodes and len(set(nodes)) == len(nodes), nodes
        self.nodes = nodes
        token = random.randrange(1 << 16)
        self._tag = f"{os.getpid()}-{token:04x}"
        self._root_interface = f"nsq{os.getpid():x}{token:04x}"  # at most 15 characters
        self._subnet = ""  # "10.19.N", once taken

    def __enter__(self) -> Network:
        remove_leftovers()
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def namespace(self, node: str) -> str:
        return f"{PREFIX}-{self._tag}-{node}"

    def address(self, node: str) -> str:
        """``node``'s IPv4 address; ``ROOT``'s is the one the test's connections come from."""
        return f"{self._subnet}.{254 if node == ROOT else self.nodes.index(node) + 1}"

    def command(self, node: str, argv: list[str]) -> list[str]:
        """``argv`` as a command that runs in ``node``'s namespace."""
        return ["ip", "netns", "exec", self.namespace(node), *argv]

    def python(self, node: str, module: str) -> list[str]:
        """``python -m module`` in ``node``'s namespace (for ``start_nsqd(program=...)``)."""
        return self.command(node, [sys.executable, "-m", module])

    def run(self, node: str, argv: list[str]) -> str:
        """Runs ``argv`` in ``node``'s namespace and returns its output; NetworkError if it fails."""
        return _run(self.command(node, argv))

    def cut(self, node: str, peer: str, port: int | None = None) -> None:
        """Drops every packet between ``node`` and ``peer`` (``ROOT`` included), both ways, or only those of
        ``peer``'s TCP ``port`` (one connection of a client). The rules live in ``node``'s namespace."""
        rules = self._rules(node, peer, port)
        for rule in rules:
            self.run(node, ["iptables", "-I", *rule, "-j", "DROP"])

    def heal(self, node: str, peer: str, port: int | None = None) -> None:
        """Removes what :meth:`cut` with the same arguments added."""
        for rule in self._rules(node, peer, port):
            self.run(node, ["iptables", "-D", *rule, "-j", "DROP"])

    def close(self) -> None:
        """Deletes every namespace of the network, which removes its interfaces (the root's, whose peer is in the
        hub) and its rules. Processes still running in one keep it alive, unreachable: stop them first."""
        for name in [self.namespace(node) for node in self.nodes] + [self.namespace("hub")]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)

    def _rules(self, node: str, peer: str, port: int | None) -> list[list[str]]:
        assert node in self.nodes and (peer == ROOT or peer in self.nodes), (node, peer)
        address = self.address(peer)
        source_port = ["-p", "tcp", "--sport", str(port)] if port else []
        destination_port = ["-p", "tcp", "--dport", str(port)] if port else []
        return [["INPUT", "-s", address, *source_port], ["OUTPUT", "-d", address, *destination_port]]

    def _create(self) -> None:
        hub = self.namespace("hub")
        _run(["ip", "netns", "add", hub])
        _run(["ip", "-n", hub, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", hub, "link", "set", "br0", "up"])
        for index, node in enumerate(self.nodes):
            namespace = self.namespace(node)
            _run(["ip", "netns", "add", namespace])
            _run(["ip", "-n", hub, "link", "add", f"port{index}", "type", "veth", "peer", "name", "eth0", "netns",
                  namespace])
            _run(["ip", "-n", hub, "link", "set", f"port{index}", "master", "br0", "up"])
            _run(["ip", "-n", namespace, "link", "set", "lo", "up"])
        with _LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._subnet = _free_subnet()
            _run(["ip", "link", "add", self._root_interface, "type", "veth", "peer", "name", "root", "netns", hub])
            _run(["ip", "addr", "add", f"{self.address(ROOT)}/24", "dev", self._root_interface])
        _run(["ip", "link", "set", self._root_interface, "up"])
        _run(["ip", "-n", hub, "link", "set", "root", "master", "br0", "up"])
        for node in self.nodes:
            _run(["ip", "-n", self.namespace(node), "addr", "add", f"{self.address(node)}/24", "dev", "eth0"])
            _run(["ip", "-n", self.namespace(node), "link", "set", "eth0", "up"])


def remove_leftovers() -> None:
    """Deletes the namespaces of networks whose process is gone (a run killed before it could clean up)."""
    for line in _run(["ip", "netns", "list"]).splitlines():
        match = re.match(rf"{PREFIX}-(\d+)-\S+", line)
        if match and not _alive(int(match.group(1))):
            subprocess.run(["ip", "netns", "del", match.group(0)], capture_output=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _free_subnet() -> str:
    used = set(re.findall(r"\b10\.19\.(\d+)\.", _run(["ip", "-4", "addr"]) + _run(["ip", "-4", "route"])))
    free = [n for n in range(256) if str(n) not in used]
    if not free:
        raise NetworkError("no free subnet left in 10.19.0.0/16")
    return f"10.19.{random.choice(free)}"


def _run(argv: list[str]) -> str:
    result = subprocess.run(argv, capture_output=True, text=True)
    if result.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: {result.stderr.strip() or f'exit status {result.returncode}'}")
    return result.stdout
