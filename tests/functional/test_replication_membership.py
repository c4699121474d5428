"""An nsqd given --etcd-address holds a key in etcd for as long as it is alive: registered right after start, gone
within the liveness timeout when the nsqd is killed or paused, back under a new lease after a pause, removed at
once on a clean exit; and an etcd that does not answer yet holds nothing up."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable


from harness.etcd import EtcdCluster
from harness.processes import NSQDProcess, wait_for

LIVENESS = "--replication-liveness-timeout=2s"
ANY_PORT = "--replication-address=127.0.0.1:0"


def node_key(nsqd: NSQDProcess) -> str:
    return f"/nsq/nodes/127.0.0.1:{nsqd.tcp_port}"


def registered(etcd: EtcdCluster, nsqd: NSQDProcess, timeout: float = 15) -> bytes:
    entry: bytes = wait_for(lambda: etcd.get(node_key(nsqd)), timeout,
                            lambda: "the node's key in etcd; nsqd's log:\n" + "\n".join(nsqd.log_lines[-30:]))
    return entry


def test_registered_at_start_with_what_clients_need(etcd: EtcdCluster,
                                                    nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(f"--etcd-address={etcd.addresses[0]}", LIVENESS, ANY_PORT)
    entry = registered(etcd, nsqd)
    info = json.loads(entry)
    assert info["node"] == f"127.0.0.1:{nsqd.tcp_port}"
    assert (info["broadcast_address"], info["tcp_port"], info["http_port"]) == \
        ("127.0.0.1", nsqd.tcp_port, nsqd.http_port)
    assert nsqd.stop() == 0
    assert etcd.get(node_key(nsqd)) is None  # revoked on the way out, not left to run out


def test_killed_it_is_counted_out_within_the_liveness_timeout(etcd: EtcdCluster,
                                                              nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(f"--etcd-address={etcd.addresses[0]}", LIVENESS, ANY_PORT)
    registered(etcd, nsqd)
    nsqd.process.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(lambda: etcd.get(node_key(nsqd)) is None, 10, "the key to go")
    assert time.monotonic() - killed_at < 2 + 2.0  # etcd checks leases twice a second


def test_paused_past_the_timeout_it_registers_again_under_a_new_lease(
        etcd: EtcdCluster, nsqd_factory: Callable[..., NSQDProcess]) -> None:
    nsqd = nsqd_factory(f"--etcd-address={etcd.addresses[0]}", LIVENESS, ANY_PORT)
    registered(etcd, nsqd)
    nsqd.process.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: etcd.get(node_key(nsqd)) is None, 5, "the key to go while nsqd is stopped")
    finally:
        nsqd.process.send_signal(signal.SIGCONT)
    registered(etcd, nsqd)
    wait_for(lambda: any("registering again" in line for line in nsqd.log_lines), 5, "the lost lease in the log")


def test_an_etcd_not_answering_yet_holds_nothing_up(etcd: EtcdCluster,
                                                    nsqd_factory: Callable[..., NSQDProcess]) -> None:
    member = etcd.members[0]
    etcd.stop_member(member)
    nsqd = nsqd_factory(f"--etcd-address={member.address}", LIVENESS, ANY_PORT)
    nsqd.publish("t", b"served while etcd is down")
    etcd.start_member(member, new=False)
    etcd.wait_healthy()
    registered(etcd, nsqd)
