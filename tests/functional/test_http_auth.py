"""The HTTP APIs of nsqd and lookupd behind the auth server (``--http-auth-required``), on real processes: every
route of the README's table against no secret, a refused one, and publish-only, subscribe-only and admin secrets;
the answers' TTL; one auth server answering TCP AUTH and HTTP alike; auth servers down, failing or slow; HTTPS with
a client certificate; cross-site protection with Basic credentials."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import re
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from harness.fault_proxy import FaultProxy
from harness.processes import (
    ROOT,
    NSQDProcess,
    start_admin,
    start_auth_server,
    start_lookupd,
    start_nsqd,
    wait_for,
)
from nsqclient import NSQProtocolError, Producer
from services.lookupd.http_api import build_router as lookupd_router
from services.nsqd.http_api import build_router as nsqd_router
from services.nsqd.options import Options as NSQDOptions

TOPIC, CHANNEL = "t", "c"
SECRETS: dict[str, Any] = {
    "publisher": {"identity": "billing", "authorizations": [
        {"topic": f"^{TOPIC}$", "channels": [".*"], "permissions": ["publish"]}]},
    "subscriber": {"identity": "reader", "authorizations": [
        {"topic": f"^{TOPIC}$", "channels": [".*"], "permissions": ["subscribe"]}]},
    "archivist": {"identity": "archive", "authorizations": [
        {"topic": f"^{TOPIC}$", "channels": [f"^{CHANNEL}$"], "permissions": ["subscribe"]}]},
    "operator": {"identity": "ops", "authorizations": [
        {"topic": ".*", "channels": [".*"], "permissions": ["admin"]}]},
    "everything": {"identity": "root", "authorizations": [
        {"topic": ".*", "channels": [".*"], "permissions": ["publish", "subscribe", "admin"]}]},
}
ROW = re.compile(r"^\| (nsqd|nsqlookupd) \| (GET|POST|PUT) \| `([^`]+)` \| ([^|]+) \|$")


def readme_routes() -> list[tuple[str, str, str, str]]:
    text = (ROOT / "README.md").read_text()
    return [(match[1], match[2], match[3], match[4].strip())
            for match in map(ROW.match, text.splitlines()) if match]


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def basic(secret: str, user: str = "anyone") -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{secret}".encode()).decode()}


def code(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", ""))
    except ValueError:
        return ""


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[NSQDProcess]:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"ttl": 300, "secrets": SECRETS}))
    server = start_auth_server(rules)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def guarded(tmp_path: Path, auth_server: NSQDProcess) -> Iterator[dict[str, NSQDProcess]]:
    flags = (f"--auth-http-address=127.0.0.1:{auth_server.http_port}", "--http-auth-required")
    started: list[NSQDProcess] = []
    try:
        started.append(start_lookupd(*flags))
        started.append(start_nsqd(*flags, f"--lookupd-tcp-address=127.0.0.1:{started[0].tcp_port}",
                                  data_path=tmp_path))
        yield {"nsqlookupd": started[0], "nsqd": started[1]}
    finally:
        for process in reversed(started):
            process.stop()


def test_the_readme_table_is_every_route_of_both_services() -> None:
    nsqd: Any = SimpleNamespace(opts=NSQDOptions())
    lookupd: Any = SimpleNamespace()
    routes = {("nsqd", method, path, need.describe()) for method, path, need in nsqd_router(nsqd).routes()}
    routes |= {("nsqlookupd", method, path, need.describe())
               for method, path, need in lookupd_router(lookupd, False).routes()}
    table = readme_routes()
    assert len(table) == len(set(table))
    assert set(table) == routes


def _request(process: NSQDProcess, method: str, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
    target = path.replace(":opt", "log_level") + f"?topic={TOPIC}&channel={CHANNEL}&node=127.0.0.1:1"
    body = {"/pub": b"hello", "/mpub": b"one\ntwo", "/config/:opt": b"info"}.get(path) if method != "GET" else None
    status, _, answer = process.http(method, target, body, headers)
    return status, answer


def _expected(need: str, secret: str | None) -> tuple[int, str] | None:
    """The refusal a secret gets from a route that needs ``need``; None: it reaches the handler."""
    if need == "open":
        return None
    if secret is None:
        return 401, "AUTH_REQUIRED"
    if secret == "refused":
        return 401, "AUTH_FAILED"
    if need == "any accepted secret":
        return None
    permission = need.split()[0]
    granted = {"publisher": "publish", "subscriber": "subscribe", "operator": "admin"}[secret]
    return None if permission == granted else (403, "AUTH_UNAUTHORIZED")


def test_every_route_of_both_services_against_every_kind_of_secret(guarded: dict[str, NSQDProcess]) -> None:
    table = readme_routes()
    kinds: list[str | None] = [None, "refused", "publisher", "subscriber", "operator"]
    # the refusals first, over the whole table: then nothing may have changed anywhere
    for service, method, path, need in table:
        for secret in kinds:
            expected = _expected(need, secret)
            if expected is not None:
                status, answer = _request(guarded[service], method, path, {} if secret is None else bearer(secret))
                assert (status, code(answer)) == expected, (service, method, path, secret)
    stats = json.loads(guarded["nsqd"].http("GET", "/stats?format=json", headers=bearer("everything"))[2])
    assert stats["topics"] == [], "a refused request acted"
    assert json.loads(guarded["nsqlookupd"].http("GET", "/topics", headers=bearer("operator"))[2])["topics"] == []
    for service, method, path, need in table:
        for secret in kinds:
            if _expected(need, secret) is None:
                status, answer = _request(guarded[service], method, path, {} if secret is None else bearer(secret))
                assert status not in (401, 403, 502), (service, method, path, secret, status, answer)


def test_get_auth_names_the_identity_of_the_secret(guarded: dict[str, NSQDProcess], tmp_path: Path) -> None:
    for process in guarded.values():
        status, _, body = process.http("GET", "/auth", headers=bearer("publisher"))
        assert (status, json.loads(body)) == (200, {"identity": "billing", "identity_url": "",
                                                    "permission_count": 1})
    open_nsqd = start_nsqd()  # NSQ's open API
    try:
        status, _, body = open_nsqd.http("GET", "/auth")
        assert (status, code(body)) == (404, "AUTH_DISABLED")
    finally:
        open_nsqd.stop()


def test_basic_credentials_carry_the_secret_as_their_password(guarded: dict[str, NSQDProcess]) -> None:
    nsqd = guarded["nsqd"]
    assert nsqd.http("POST", f"/pub?topic={TOPIC}", b"x", basic("publisher"))[0] == 200
    assert nsqd.http("POST", f"/pub?topic={TOPIC}", b"x", basic("publisher", user=""))[0] == 200
    status, _, answer = nsqd.http("POST", f"/pub?topic={TOPIC}", b"x", {"Authorization": "Basic !!!"})
    assert (status, code(answer)) == (401, "AUTH_REQUIRED")
    connection = http.client.HTTPConnection("127.0.0.1", nsqd.http_port, timeout=10)
    try:
        for headers, error in (({}, "AUTH_REQUIRED"), (bearer("nobody"), "AUTH_FAILED")):
            connection.request("POST", f"/pub?topic={TOPIC}", b"x", headers)
            response = connection.getresponse()
            assert (response.status, code(response.read())) == (401, error)
            challenges = response.headers.get_all("WWW-Authenticate") or []
            assert any(challenge.startswith('Basic realm="nsqd"') for challenge in challenges)
            assert any(challenge.startswith('Bearer realm="nsqd"') for challenge in challenges)
    finally:
        connection.close()


def test_stats_lists_only_what_the_identity_may_see(guarded: dict[str, NSQDProcess]) -> None:
    nsqd = guarded["nsqd"]
    for topic, channel in ((TOPIC, CHANNEL), (TOPIC, "other"), ("secret", "c")):
        assert nsqd.http("POST", f"/topic/create?topic={topic}", headers=bearer("everything"))[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={topic}&channel={channel}",
                         headers=bearer("everything"))[0] == 200

    def seen(secret: str) -> dict[str, list[str]]:
        document = json.loads(nsqd.http("GET", "/stats?format=json", headers=bearer(secret))[2])
        return {topic["topic_name"]: [channel["channel_name"] for channel in topic["channels"]]
                for topic in document["topics"]}

    assert seen("everything") == {TOPIC: [CHANNEL, "other"], "secret": ["c"]}
    assert seen("archivist") == {TOPIC: [CHANNEL]}
    assert seen("publisher") == {TOPIC: []}
    assert nsqd.http("GET", f"/channel/peek?topic={TOPIC}&channel=other", headers=bearer("archivist"))[0] == 403
    assert nsqd.http("GET", f"/topic/peek?topic={TOPIC}", headers=bearer("archivist"))[0] == 403  # all channels'
    text = nsqd.http("GET", "/stats", headers=bearer("archivist"))[2].decode()
    assert re.search(rf"\[{TOPIC}\s*\]", text) and re.search(rf"\[{CHANNEL}\s*\]", text)
    assert "secret" not in text and "other" not in text


def test_a_revoked_secret_stops_working_once_its_answer_expires(tmp_path: Path) -> None:
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"ttl": 2, "secrets": SECRETS}))
    auth = start_auth_server(rules)
    nsqd = None
    try:
        nsqd = start_nsqd(f"--auth-http-address=127.0.0.1:{auth.http_port}", "--http-auth-required",
                          data_path=tmp_path)
        assert nsqd.http("POST", f"/pub?topic={TOPIC}", b"x", bearer("publisher"))[0] == 200
        granted_at = time.monotonic()
        rules.write_text(json.dumps({"ttl": 2, "secrets": {}}))
        assert nsqd.http("POST", f"/pub?topic={TOPIC}", b"x", bearer("publisher"))[0] == 200  # still kept
        wait_for(lambda: nsqd.http("POST", f"/pub?topic={TOPIC}", b"x", bearer("publisher"))[0] == 401, 10,
                 "the revoked secret refused")
        assert time.monotonic() - granted_at >= 1.5
    finally:
        if nsqd is not None:
            nsqd.stop()
        auth.stop()


class RecordingAuthServer:
    """An auth server written here: records each question and answers what ``answer`` says."""

    def __init__(self) -> None:
        self.questions: list[dict[str, str]] = []
        self.answer: Callable[[dict[str, str]], tuple[int, bytes]] = self.grant
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                question = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
                recorder.questions.append(question)
                status, body = recorder.answer(question)
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @staticmethod
    def grant(question: dict[str, str]) -> tuple[int, bytes]:
        permissions = ["publish", "subscribe"] + (["admin"] if question.get("interface") == "http" else [])
        return 200, json.dumps({"ttl": 60, "identity": "svc", "authorizations": [
            {"topic": ".*", "channels": [".*"], "permissions": permissions}]}).encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recording() -> Iterator[RecordingAuthServer]:
    server = RecordingAuthServer()
    yield server
    server.close()


async def test_one_auth_server_answers_tcp_auth_as_go_nsqd_asks_and_http_with_admin(
        tmp_path: Path, recording: RecordingAuthServer) -> None:
    nsqd = start_nsqd(f"--auth-http-address=127.0.0.1:{recording.port}", "--http-auth-required",
                      data_path=tmp_path)
    try:
        producer = Producer(f"127.0.0.1:{nsqd.tcp_port}", auth_secret="tcp-secret")
        await producer.connect()
        await producer.publish(TOPIC, b"over tcp")
        await producer.close()
        assert nsqd.http("POST", f"/topic/pause?topic={TOPIC}", headers=bearer("http-secret"))[0] == 200
        tcp, http_ = (next(q for q in recording.questions if q["secret"] == s) for s in ("tcp-secret", "http-secret"))
        assert sorted(tcp) == ["common_name", "remote_ip", "secret", "tls"]  # exactly what Go's nsqd sends
        assert sorted(http_) == ["common_name", "interface", "remote_ip", "secret", "tls"]
        assert (http_["interface"], http_["remote_ip"], http_["tls"]) == ("http", "127.0.0.1", "false")
        # a TCP AUTH granted admin is refused, as Go's nsqd refuses a permission it does not know
        recording.answer = lambda question: (200, json.dumps({"ttl": 60, "authorizations": [
            {"topic": ".*", "channels": [".*"], "permissions": ["publish", "admin"]}]}).encode())
        refused = Producer(f"127.0.0.1:{nsqd.tcp_port}", auth_secret="another")
        with pytest.raises(NSQProtocolError, match="E_AUTH_FAILED"):
            await refused.connect()
        await refused.close()
    finally:
        nsqd.stop()


def test_auth_servers_down_failing_or_refusing_are_told_apart(tmp_path: Path, recording: RecordingAuthServer) -> None:
    nsqd = start_nsqd(f"--auth-http-address=127.0.0.1:{recording.port}", "--http-auth-required",
                      data_path=tmp_path)
    try:
        cases = [((500, b"oops"), 502, "AUTH_ERROR"), ((200, b"not json"), 502, "AUTH_ERROR"),
                 ((200, b'{"ttl": 60, "authorizations": [{"topic": ".*", "channels": [".*"], '
                        b'"permissions": ["root"]}]}'), 502, "AUTH_ERROR"),
                 ((401, b"no"), 401, "AUTH_FAILED"), ((403, b"no"), 401, "AUTH_FAILED"),
                 ((200, b'{"ttl": 60, "authorizations": []}'), 401, "AUTH_FAILED")]
        for index, (answer, status, error) in enumerate(cases):
            recording.answer = lambda question, answer=answer: answer  # type: ignore[misc]
            got = nsqd.http("POST", f"/pub?topic={TOPIC}", b"x", bearer(f"secret-{index}"))
            assert (got[0], code(got[2])) == (status, error), answer
        recording.answer = RecordingAuthServer.grant
        asked = len(recording.questions)
        for _ in range(5):  # a refusal is kept briefly: a flood of one bad secret asks once
            assert nsqd.http("POST", f"/pub?topic={TOPIC}", b"x", bearer("secret-3"))[0] == 401
        assert len(recording.questions) == asked
        stats = json.loads(nsqd.http("GET", "/stats?format=json", headers=bearer("good"))[2])
        assert stats["topics"] == [], "a request the auth server did not grant published"
    finally:
        nsqd.stop()


async def test_an_auth_server_that_is_down_or_slow_is_a_502_and_nothing_is_published(
        tmp_path: Path, recording: RecordingAuthServer) -> None:
    async with FaultProxy(("127.0.0.1", recording.port), seed=1) as proxy:
        nsqd = start_nsqd(f"--auth-http-address={proxy.address_text}", "--http-auth-required",
                          "--http-client-request-timeout=1s", data_path=tmp_path)
        try:
            proxy.stall()  # the auth server hears nothing and answers nothing
            started = time.monotonic()
            status, _, answer = await asyncio.to_thread(nsqd.http, "POST", f"/pub?topic={TOPIC}", b"x",
                                                         bearer("slow-q7z"))
            assert (status, code(answer)) == (502, "AUTH_ERROR")
            assert time.monotonic() - started < 5
            proxy.resume()
            recording.close()  # down: connection refused
            status, _, answer = await asyncio.to_thread(nsqd.http, "POST", f"/pub?topic={TOPIC}", b"x",
                                                         bearer("down-q7z"))
            assert (status, code(answer)) == (502, "AUTH_ERROR")
            log = "\n".join(nsqd.log_lines)
            assert "failed to auth against" in log and "q7z" not in log  # the secret never in the log
        finally:
            nsqd.stop()
    other = start_nsqd(data_path=tmp_path)  # the same data: nothing was published
    try:
        assert json.loads(other.http("GET", "/stats?format=json")[2])["topics"] == []
    finally:
        other.stop()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    import trustme

    directory = tmp_path_factory.mktemp("tls")
    authority = trustme.CA()
    server = authority.issue_cert("127.0.0.1", "localhost")
    client = authority.issue_cert("billing@example.com", common_name="billing-service")
    files = SimpleNamespace(ca=directory / "ca.pem", cert=directory / "cert.pem", key=directory / "key.pem",
                            client=directory / "client.pem")
    authority.cert_pem.write_to_path(str(files.ca))
    server.cert_chain_pems[0].write_to_path(str(files.cert))
    server.private_key_pem.write_to_path(str(files.key))
    client.private_key_and_cert_chain_pem.write_to_path(str(files.client))
    return files


def _https(port: int, certificates: SimpleNamespace, method: str, path: str, headers: dict[str, str],
           body: bytes | None = None) -> tuple[int, bytes]:
    context = ssl.create_default_context(cafile=str(certificates.ca))
    context.load_cert_chain(str(certificates.client))
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request(method, path, body, headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _listening(process: NSQDProcess, label: str) -> int:
    return int(next(line for line in process.log_lines if f"{label}: listening" in line).rsplit(":", 1)[1])


def test_https_passes_the_client_certificates_common_name_on_nsqd_and_lookupd(
        tmp_path: Path, recording: RecordingAuthServer, certificates: SimpleNamespace) -> None:
    tls = (f"--tls-cert={certificates.cert}", f"--tls-key={certificates.key}",
           f"--tls-root-ca-file={certificates.ca}", "--https-address=127.0.0.1:0",
           f"--auth-http-address=127.0.0.1:{recording.port}", "--http-auth-required")
    lookupd = start_lookupd(*tls)
    nsqd = None
    try:
        nsqd = start_nsqd(*tls, "--tls-client-auth-policy=require-verify", data_path=tmp_path)
        assert _https(_listening(nsqd, "HTTPS"), certificates, "POST", f"/pub?topic={TOPIC}",
                      bearer("over-https"), b"x") == (200, b"OK")
        status, answer = _https(_listening(lookupd, "HTTPS"), certificates, "GET", "/topics", bearer("lookupd-https"))
        assert status == 200 and json.loads(answer) == {"topics": []}
        assert _https(_listening(lookupd, "HTTPS"), certificates, "GET", "/topics", {})[0] == 401
        for secret in ("over-https", "lookupd-https"):
            question = next(q for q in recording.questions if q["secret"] == secret)
            assert (question["tls"], question["common_name"], question["interface"]) == (
                "true", "billing-service", "http")
    finally:
        if nsqd is not None:
            nsqd.stop()
        lookupd.stop()


def test_cross_site_requests_are_refused_even_with_basic_credentials_a_browser_cached(
        guarded: dict[str, NSQDProcess]) -> None:
    nsqd, lookupd = guarded["nsqd"], guarded["nsqlookupd"]
    assert nsqd.http("POST", f"/topic/create?topic={TOPIC}", headers=bearer("operator"))[0] == 200
    browser = {**basic("operator"), "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"}
    for process, path in ((nsqd, f"/topic/delete?topic={TOPIC}"), (lookupd, f"/topic/delete?topic={TOPIC}"),
                          (nsqd, f"/pub?topic={TOPIC}")):
        status, _, answer = process.http("POST", path, b"x", browser)
        assert (status, code(answer)) == (403, "CROSS_SITE_REQUEST"), path
    stats = json.loads(nsqd.http("GET", "/stats?format=json", headers=bearer("everything"))[2])
    assert [(topic["topic_name"], topic["message_count"]) for topic in stats["topics"]] == [(TOPIC, 0)]
    same_site = {**basic("operator"), "Sec-Fetch-Site": "same-origin"}
    assert nsqd.http("POST", f"/topic/delete?topic={TOPIC}", headers=same_site)[0] == 200


# --- the tools and the admin against a guarded cluster ---------------------------------------------------------

async def test_the_client_library_sends_its_secret_to_lookupd(guarded: dict[str, NSQDProcess]) -> None:
    lookupd = f"127.0.0.1:{guarded['nsqlookupd'].http_port}"
    assert guarded["nsqd"].http("POST", f"/topic/create?topic={TOPIC}", headers=bearer("operator"))[0] == 200
    wait_for(lambda: guarded["nsqlookupd"].http("GET", "/nodes", headers=bearer("operator"))[0] == 200
             and json.loads(guarded["nsqlookupd"].http("GET", "/nodes", headers=bearer("operator"))[2])["producers"],
             10, "nsqd registered")
    async with Producer(lookupd_http_addresses=[lookupd], auth_secret="everything") as producer:
        await producer.publish(TOPIC, b"found through a guarded lookupd")  # /nodes needed the secret
    anonymous = Producer(lookupd_http_addresses=[lookupd])
    with pytest.raises(Exception):
        await anonymous.connect()  # /nodes refused it: no nsqd known
    await anonymous.close()
    stats = json.loads(guarded["nsqd"].http("GET", "/stats?format=json", headers=bearer("everything"))[2])
    assert stats["topics"][0]["message_count"] == 1


def with_a_channel(guarded: dict[str, NSQDProcess]) -> tuple[NSQDProcess, NSQDProcess]:
    """The guarded nsqd with the topic and its channel, registered with the guarded lookupd; (nsqd, lookupd)."""
    nsqd, lookupd = guarded["nsqd"], guarded["nsqlookupd"]
    assert nsqd.http("POST", f"/topic/create?topic={TOPIC}", headers=bearer("operator"))[0] == 200
    assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}",
                     headers=bearer("subscriber"))[0] == 200
    wait_for(lambda: json.loads(lookupd.http("GET", f"/lookup?topic={TOPIC}")[2]).get("producers"), 10, "registered")
    return nsqd, lookupd


def test_nsq_stat_reads_a_guarded_cluster_with_a_secret_file(guarded: dict[str, NSQDProcess],
                                                             tmp_path: Path) -> None:
    _, lookupd = with_a_channel(guarded)
    secret = tmp_path / "secret"
    secret.write_text("subscriber\n")
    command = [sys.executable, "-m", "apps.nsq_stat", f"--topic={TOPIC}", f"--channel={CHANNEL}", "--count=1",
               "--interval=100ms", f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}"]
    done = subprocess.run([*command, f"--http-client-auth-secret-file={secret}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    refused = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        refused.communicate(timeout=3)  # it keeps asking, as it does when a node is down
    except subprocess.TimeoutExpired:
        refused.kill()
    errors = refused.communicate()[1]
    assert "AUTH_REQUIRED" in errors and "--http-client-auth-secret-file" in errors, errors


def test_the_admin_reaches_a_guarded_cluster_with_its_secret_and_says_who_refused_it(
        guarded: dict[str, NSQDProcess], tmp_path: Path) -> None:
    nsqd, lookupd = with_a_channel(guarded)
    secret = tmp_path / "secret"
    secret.write_text("everything")
    lookupd_flag = f"--lookupd-http-address=127.0.0.1:{lookupd.http_port}"
    admin = start_admin(lookupd_flag, f"--http-client-auth-secret-file={secret}", data_path=tmp_path)
    try:
        status, _, body = admin.http("GET", f"/api/topics/{TOPIC}")
        assert status == 200 and json.loads(body)["message"] == ""
        assert [channel["channel_name"] for channel in json.loads(body)["channels"]] == [CHANNEL]
        assert admin.http("POST", f"/api/topics/{TOPIC}", json.dumps({"action": "pause"}).encode(),
                          {"Content-Type": "application/json"})[0] == 200
        assert json.loads(nsqd.http("GET", "/stats?format=json", headers=bearer("everything"))[2])[
            "topics"][0]["paused"] is True
        [entry] = json.loads(admin.http("GET", "/api/audit")[2])["entries"]
        assert (entry["action"], entry["result"], entry["identity"]) == ("pause_topic", "ok", "root")
    finally:
        admin.stop()
    (tmp_path / "anonymous").mkdir()
    anonymous = start_admin(lookupd_flag, data_path=tmp_path / "anonymous")
    try:
        status, _, body = anonymous.http("GET", "/api/topics")
        message = json.loads(body)["message"]
        assert status == 502 and f"127.0.0.1:{lookupd.http_port}" in message, message
        assert "AUTH_REQUIRED" in message and "--http-client-auth-secret-file" in message
    finally:
        anonymous.stop()


def test_nsqd_asks_a_guarded_lookupd_for_a_new_topics_channels_with_its_secret(
        guarded: dict[str, NSQDProcess], auth_server: NSQDProcess, tmp_path: Path) -> None:
    first, lookupd = guarded["nsqd"], guarded["nsqlookupd"]
    assert first.http("POST", f"/topic/create?topic={TOPIC}", headers=bearer("operator"))[0] == 200
    assert first.http("POST", f"/channel/create?topic={TOPIC}&channel={CHANNEL}",
                      headers=bearer("subscriber"))[0] == 200
    wait_for(lambda: json.loads(lookupd.http("GET", f"/channels?topic={TOPIC}", headers=bearer("operator"))[2])
             .get("channels") == [CHANNEL], 10, "the channel registered")
    secret = tmp_path / "secret"
    secret.write_text("operator\n")
    flags = (f"--auth-http-address=127.0.0.1:{auth_server.http_port}", "--http-auth-required",
             f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}")
    for name, extra in (("with", (f"--http-client-auth-secret-file={secret}",)), ("without", ())):
        (tmp_path / name).mkdir()
        second = start_nsqd(*flags, *extra, data_path=tmp_path / name)
        try:
            wait_for(lambda: len(json.loads(lookupd.http("GET", "/nodes", headers=bearer("operator"))[2])
                                 ["producers"]) == 2, 10, "the second nsqd registered")
            assert second.http("POST", f"/pub?topic={TOPIC}", b"x", bearer("publisher"))[0] == 200
            stats = json.loads(second.http("GET", "/stats?format=json", headers=bearer("everything"))[2])
            channels = [channel["channel_name"] for channel in stats["topics"][0]["channels"]]
            if name == "with":
                assert channels == [CHANNEL]  # made before the publish, which it then holds
            else:
                assert channels == []
                assert any("AUTH_REQUIRED" in line for line in second.log_lines)
        finally:
            second.stop()


def test_the_spark_connectors_since_creates_its_channel_from_history_with_subscribe_alone(
        tmp_path: Path, auth_server: NSQDProcess) -> None:
    from nsqspark.history import create_from_history
    from nsqspark.options import parse_options

    nsqd = start_nsqd(f"--auth-http-address=127.0.0.1:{auth_server.http_port}", "--http-auth-required",
                      "--retention-time=1h", data_path=tmp_path)
    try:
        assert nsqd.http("POST", f"/topic/create?topic={TOPIC}", headers=bearer("operator"))[0] == 200
        assert nsqd.http("POST", f"/channel/create?topic={TOPIC}&channel=live", headers=bearer("subscriber"))[0] == 200
        assert nsqd.http("POST", f"/mpub?topic={TOPIC}", b"one\ntwo\nthree", bearer("publisher"))[0] == 200
        assert nsqd.http("POST", f"/channel/empty?topic={TOPIC}&channel=live", headers=bearer("operator"))[0] == 200
        address = f"127.0.0.1:{nsqd.http_port}"
        where = {"nsqd_tcp_address": f"127.0.0.1:{nsqd.tcp_port}", "nsqd_http_address": address}
        anonymous = parse_options({**where, "topic": TOPIC, "channel": CHANNEL, "since": "earliest"},
                                  need_channel=True)
        with pytest.raises(OSError, match="401"):
            create_from_history(anonymous)
        subscriber = parse_options({**where, "topic": TOPIC, "channel": CHANNEL, "since": "earliest",
                                    "auth_secret": "subscriber"}, need_channel=True)
        assert create_from_history(subscriber) == 3
    finally:
        nsqd.stop()
