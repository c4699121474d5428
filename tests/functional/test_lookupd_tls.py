"""TLS between nsqd and nsqlookupd, with real processes: nsqd registers over TLS when it is given a CA, lookupd
verifies client certificates and refuses plain registrations when told to, and both stay compatible with NSQ's
binaries (``NSQ_GO_BIN``: a directory holding NSQ's ``nsqd`` and ``nsqlookupd``; those tests are skipped
without them)."""

from __future__ import annotations

import json
import os
import re
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from harness.processes import NSQDProcess, start_lookupd, start_nsqd, wait_for
from tests.functional.test_lookupd import V1Client

GO_BIN = Path(os.environ.get("NSQ_GO_BIN", "/opt/gonsq/bin"))


@dataclass
class Authority:
    """A CA's file, and a server certificate (127.0.0.1) and a client certificate it signed."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path

    def lookupd_flags(self) -> list[str]:
        return [f"--tls-cert={self.cert}", f"--tls-key={self.key}"]

    def nsqd_flags(self, with_certificate: bool = False) -> list[str]:
        flags = [f"--lookupd-tls-root-ca-file={self.ca}"]
        if with_certificate:
            flags += [f"--lookupd-tls-cert={self.client_cert}", f"--lookupd-tls-key={self.client_key}"]
        return flags


def make_authority(directory: Path, *server_names: str) -> Authority:
    directory.mkdir()
    authority = trustme.CA()
    server = authority.issue_cert(*(server_names or ("127.0.0.1", "localhost")))
    client = authority.issue_cert("nsqd.example.com")
    files = Authority(*(directory / name for name in ("ca.pem", "cert.pem", "key.pem", "client.pem",
                                                      "client.key")))
    authority.cert_pem.write_to_path(str(files.ca))
    server.cert_chain_pems[0].write_to_path(str(files.cert))
    server.private_key_pem.write_to_path(str(files.key))
    client.cert_chain_pems[0].write_to_path(str(files.client_cert))
    client.private_key_pem.write_to_path(str(files.client_key))
    return files


@pytest.fixture(scope="module")
def authority(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    return make_authority(tmp_path_factory.mktemp("tls") / "trusted")


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """Another CA: what it signed is not trusted by the other's holders."""
    return make_authority(tmp_path_factory.mktemp("tls") / "stranger")


@pytest.fixture(scope="module")
def named(tmp_path_factory: pytest.TempPathFactory) -> Authority:
    """A CA whose server certificate names ``lookupd.internal`` only, not the address nsqd dials."""
    return make_authority(tmp_path_factory.mktemp("tls") / "named", "lookupd.internal")


@pytest.fixture
def processes() -> Iterator[Callable[..., NSQDProcess]]:
    """``processes(start_lookupd, *flags)``; every process started is stopped at teardown."""
    started: list[NSQDProcess] = []

    def start(starter: Callable[..., NSQDProcess], *flags: str, program: str = "") -> NSQDProcess:
        started.append(starter(*flags, program=[str(GO_BIN / program)] if program else None))
        return started[-1]

    yield start
    for process in reversed(started):
        process.stop()


def go_binary(name: str) -> str:
    if not os.access(GO_BIN / name, os.X_OK):
        pytest.skip(f"NSQ's {name} is not in {GO_BIN} (NSQ_GO_BIN)")
    return name


def lookupd_address(lookupd: NSQDProcess) -> str:
    return f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}"


def producers_of(lookupd: NSQDProcess, topic: str) -> list[int]:
    """The TCP ports of the nsqds lookupd lists for ``topic``."""
    status, _, body = lookupd.http("GET", f"/lookup?topic={topic}")
    return [producer["tcp_port"] for producer in json.loads(body)["producers"]] if status == 200 else []


def registered(lookupd: NSQDProcess, nsqd: NSQDProcess, topic: str = "orders") -> None:
    status = nsqd.http("POST", f"/topic/create?topic={topic}")[0]
    assert status == 200
    wait_for(lambda: nsqd.tcp_port in producers_of(lookupd, topic), what=f"nsqd registered {topic}")


def logged(process: NSQDProcess, pattern: str, count: int = 1, timeout: float = 10) -> list[str]:
    """The log lines matching ``pattern`` once there are ``count`` of them."""
    def matching() -> list[str] | None:
        lines = [line for line in process.log_lines if re.search(pattern, line)]
        return lines if len(lines) >= count else None

    return wait_for(matching, timeout, what=lambda: f"{count} log line(s) matching {pattern!r} in\n" +
                    "\n".join(process.log_lines))


def producers_over_tls(lookupd: NSQDProcess) -> float:
    metrics = lookupd.http("GET", "/metrics")[2].decode()
    found = re.search(r"^nsqlookupd_producers_tls (\S+)$", metrics, re.M)
    assert found is not None, metrics
    return float(found.group(1))


# -- our nsqd and our lookupd ------------------------------------------------------------------------------------

def test_nsqd_registers_over_tls(processes: Callable[..., NSQDProcess], authority: Authority) -> None:
    lookupd = processes(start_lookupd, *authority.lookupd_flags())
    nsqd = processes(start_nsqd, lookupd_address(lookupd), *authority.nsqd_flags())
    registered(lookupd, nsqd)
    assert logged(lookupd, r"CLIENT\(127\.0\.0\.1:\d+\): TLS TLSv1\.[23] ")
    assert logged(nsqd, r"LOOKUPD\(127\.0\.0\.1:\d+\): TLS TLSv1\.[23] ")
    assert producers_over_tls(lookupd) == 1
    nodes = json.loads(lookupd.http("GET", "/nodes")[2])["producers"]
    assert "tls" not in nodes[0]  # NSQ's shape, whatever the transport


def test_a_plain_nsqd_registers_where_tls_is_offered_but_not_required(
        processes: Callable[..., NSQDProcess], authority: Authority) -> None:
    lookupd = processes(start_lookupd, *authority.lookupd_flags())
    nsqd = processes(start_nsqd, lookupd_address(lookupd))
    registered(lookupd, nsqd)
    assert producers_over_tls(lookupd) == 0
    assert not any(" TLS " in line for line in lookupd.log_lines)


def test_a_lookupd_certificate_from_another_ca_is_refused_and_nsqd_keeps_trying(
        processes: Callable[..., NSQDProcess], authority: Authority, stranger: Authority) -> None:
    lookupd = processes(start_lookupd, *stranger.lookupd_flags())
    nsqd = processes(start_nsqd, lookupd_address(lookupd), *authority.nsqd_flags())
    # nsqd tries again after 1 s, then 2 s: the second refusal shows it kept going
    failures = logged(nsqd, r"LOOKUPD\(.*\): TLS handshake failed - .*CERTIFICATE_VERIFY_FAILED.* - reconnecting",
                      count=2)
    assert "certificate verify failed" in failures[0]
    assert logged(lookupd, r"CLIENT\(.*\): TLS handshake failed - ")
    assert nsqd.http("GET", "/ping")[0] == 200 and nsqd.process.poll() is None
    assert json.loads(lookupd.http("GET", "/nodes")[2])["producers"] == []


def test_a_lookupd_certificate_is_checked_for_the_server_name_given(processes: Callable[..., NSQDProcess],
                                                                     named: Authority) -> None:
    lookupd = processes(start_lookupd, *named.lookupd_flags())
    by_address = processes(start_nsqd, lookupd_address(lookupd), *named.nsqd_flags())
    by_name = processes(start_nsqd, lookupd_address(lookupd), *named.nsqd_flags(),
                        "--lookupd-tls-server-name=lookupd.internal")
    registered(lookupd, by_name)
    assert logged(by_address, r"TLS handshake failed - .*IP address mismatch.* - reconnecting")
    by_address.http("POST", "/topic/create?topic=orders")
    assert producers_of(lookupd, "orders") == [by_name.tcp_port]


def test_client_certificates_are_required_and_verified(processes: Callable[..., NSQDProcess],
                                                       authority: Authority, stranger: Authority) -> None:
    lookupd = processes(start_lookupd, *authority.lookupd_flags(), f"--tls-root-ca-file={authority.ca}")
    without = processes(start_nsqd, lookupd_address(lookupd), *authority.nsqd_flags())
    wrong = processes(start_nsqd, lookupd_address(lookupd), f"--lookupd-tls-root-ca-file={authority.ca}",
                      f"--lookupd-tls-cert={stranger.client_cert}", f"--lookupd-tls-key={stranger.client_key}")
    trusted = processes(start_nsqd, lookupd_address(lookupd), *authority.nsqd_flags(with_certificate=True))
    registered(lookupd, trusted)
    assert logged(lookupd, r"TLS TLSv1\.[23] \S+, client certificate verified")
    for nsqd in (without, wrong):
        logged(nsqd, r"LOOKUPD\(.*\): lookupd closed the connection after the TLS handshake.*: does it want a "
                     r"client certificate it trusts \(--lookupd-tls-cert\)\? - reconnecting in 2s")
        nsqd.http("POST", "/topic/create?topic=orders")
    # each refused connection is logged, and neither nsqd is listed, whatever it publishes
    assert logged(lookupd, r"TLS handshake failed - .*(PEER_DID_NOT_RETURN_A_CERTIFICATE|CERTIFICATE_VERIFY)",
                  count=4)
    assert producers_of(lookupd, "orders") == [trusted.tcp_port]
    assert len(json.loads(lookupd.http("GET", "/nodes")[2])["producers"]) == 1


def test_tls_required_refuses_a_plain_registration(processes: Callable[..., NSQDProcess],
                                                   authority: Authority) -> None:
    lookupd = processes(start_lookupd, *authority.lookupd_flags(), "--tls-required")
    nsqd = processes(start_nsqd, lookupd_address(lookupd))
    refusal = "E_INVALID cannot IDENTIFY without TLS (nsqlookupd has --tls-required"
    assert logged(lookupd, re.escape(refusal))
    assert logged(nsqd, re.escape(refusal))
    assert json.loads(lookupd.http("GET", "/nodes")[2])["producers"] == []


def test_an_nsqd_that_asks_for_tls_refuses_a_lookupd_without_it(processes: Callable[..., NSQDProcess],
                                                                 authority: Authority) -> None:
    lookupd = processes(start_lookupd)
    nsqd = processes(start_nsqd, lookupd_address(lookupd), *authority.nsqd_flags())
    nsqd.http("POST", "/topic/create?topic=orders")
    assert logged(nsqd, r"lookupd did not agree to TLS .* - reconnecting", count=2)
    assert logged(lookupd, r"asked for TLS, which this nsqlookupd does not offer")
    assert producers_of(lookupd, "orders") == []


def test_bytes_between_identify_and_the_handshake_are_refused(processes: Callable[..., NSQDProcess],
                                                              authority: Authority) -> None:
    lookupd = processes(start_lookupd, *authority.lookupd_flags())
    client = V1Client(lookupd)
    body = json.dumps({"broadcast_address": "127.0.0.1", "tcp_port": 4150, "http_port": 4151, "version": "1.3.0",
                       "tls_v1": True}).encode()
    client.send(b"IDENTIFY\n" + len(body).to_bytes(4, "big") + body + b"PING\n")
    assert json.loads(client.reply())["tls_v1"] is True
    assert client.reply() == b"E_INVALID cannot send commands between IDENTIFY and the TLS handshake"
    assert client.closed()
    client.close()


def test_a_client_speaking_tls_after_identify_registers(processes: Callable[..., NSQDProcess],
                                                        authority: Authority) -> None:
    lookupd = processes(start_lookupd, *authority.lookupd_flags())
    client = V1Client(lookupd)
    answer = client.identify(tls_v1=True)
    assert answer["tls_v1"] is True
    client.sock = ssl.create_default_context(cafile=str(authority.ca)).wrap_socket(client.sock,
                                                                                   server_hostname="127.0.0.1")
    assert client.reply() == b"OK"  # the handshake is done
    assert client.command(b"REGISTER orders archive") == b"OK"
    assert producers_of(lookupd, "orders") == [4150]
    client.close()


# -- NSQ's binaries --------------------------------------------------------------------------------------------

def test_nsqs_nsqd_registers_with_our_lookupd_in_plain_tls_offered_or_not(
        processes: Callable[..., NSQDProcess], authority: Authority) -> None:
    program = go_binary("nsqd")
    for flags in ([], authority.lookupd_flags()):
        lookupd = processes(start_lookupd, *flags)
        nsqd = processes(start_nsqd, lookupd_address(lookupd), program=program)
        registered(lookupd, nsqd)
        assert producers_over_tls(lookupd) == 0


def test_nsqs_nsqd_is_refused_by_a_lookupd_requiring_tls(processes: Callable[..., NSQDProcess],
                                                         authority: Authority) -> None:
    program = go_binary("nsqd")
    lookupd = processes(start_lookupd, *authority.lookupd_flags(), "--tls-required")
    nsqd = processes(start_nsqd, lookupd_address(lookupd), program=program)
    refusal = re.escape("E_INVALID cannot IDENTIFY without TLS (nsqlookupd has --tls-required")
    assert logged(lookupd, refusal)
    # NSQ's nsqd logs the answer it could not read as lookupd's JSON
    assert logged(nsqd, r"LOOKUPD\(127\.0\.0\.1:\d+\): parsing response - " + refusal)
    assert json.loads(lookupd.http("GET", "/nodes")[2])["producers"] == []


def test_our_nsqd_registers_with_nsqs_lookupd_in_plain(processes: Callable[..., NSQDProcess]) -> None:
    program = go_binary("nsqlookupd")
    lookupd = processes(start_lookupd, program=program)
    nsqd = processes(start_nsqd, lookupd_address(lookupd))
    registered(lookupd, nsqd)


def test_our_nsqd_asking_for_tls_does_not_register_in_plain_with_nsqs_lookupd(
        processes: Callable[..., NSQDProcess], authority: Authority) -> None:
    program = go_binary("nsqlookupd")
    lookupd = processes(start_lookupd, program=program)
    nsqd = processes(start_nsqd, lookupd_address(lookupd), *authority.nsqd_flags())
    nsqd.http("POST", "/topic/create?topic=orders")
    assert logged(nsqd, r"lookupd did not agree to TLS \(its IDENTIFY answer has no tls_v1: NSQ's nsqlookupd",
                  count=2)
    assert producers_of(lookupd, "orders") == []
    assert nsqd.process.poll() is None
