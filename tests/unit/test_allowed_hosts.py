"""The Host allow-list against DNS rebinding: IP addresses and the service's own names pass, other names do not."""

from __future__ import annotations

from shared.allowed_hosts import allowed_names, host_allowed, name_of


def test_names_are_compared_without_port_case_or_trailing_dot() -> None:
    assert name_of("NSQD1.Example.com.:4151") == "nsqd1.example.com"
    assert name_of("[::1]:4151") == "::1" and name_of("[fe80::1%lo]") == "fe80::1%lo" and name_of("host") == "host"


def test_own_names_and_any_ip_address_pass_other_names_do_not() -> None:
    names = allowed_names(["nsq.internal"], "box", "nsqd1", "0.0.0.0:4151", ":4152", "")
    assert names >= {"localhost", "box", "nsqd1", "nsq.internal"}
    for host in ("localhost:4151", "LOCALHOST", "box:4151", "nsqd1:4151", "nsq.internal", "127.0.0.1:4151",
                 "10.1.2.3", "[::1]:4151", "[fe80::1%eth0]:4151", None, ""):
        assert host_allowed(host, names), host
    for host in ("rebound.example:4151", "localhost.evil.example", "box.evil.example", "127.0.0.1.nip.io:4151"):
        assert not host_allowed(host, names), host


def test_a_star_allows_any_name() -> None:
    assert host_allowed("rebound.example:4151", allowed_names(["*"]))
