"""nsq_auth_server as a real process: its answers to GET and POST queries, live edits of its rules file, its exit
codes, and nsqd's AuthClient asking it."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from apps.nsq_auth_server import AuthServer, Options
from harness.processes import ROOT, NSQDProcess, start_auth_server, wait_for
from shared.auth_client import AuthClient
from shared.auth_reply import AuthError
from shared.flags import FlagError

COMMAND = [sys.executable, "-m", "apps.nsq_auth_server"]
_LISTENING = re.compile(r"HTTP: listening on 127\.0\.0\.1:(\d+)$")

BILLING = {"identity": "billing", "identity_url": "https://example.com/billing",
           "authorizations": [{"topic": "^orders$", "channels": [".*"], "permissions": ["subscribe", "publish"]}]}
RULES: dict[str, Any] = {
    "ttl": 3600,
    "secrets": {
        "s3cret": BILLING,
        "local-only": {"identity": "ops", "authorizations": [], "remote_ips": ["127.0.0.1", "10.0.0.0/8"]},
        "tls-only": {"identity": "secure", "tls_required": True, "ttl": 60},
        "a b+c/d&e=f?ü": {"identity": "odd"},
        "operator": {"identity": "ops", "authorizations": [
            {"topic": ".*", "channels": [".*"], "permissions": ["admin"]},
            {"topic": "^orders$", "channels": [".*"], "permissions": ["publish", "admin"]}]},
    },
}
BILLING_REPLY = {"ttl": 3600, **BILLING}
NOT_AUTHORIZED = (403, {"message": "NOT_AUTHORIZED"})


def write_rules(path: Path, rules: Any) -> Path:
    path.write_text(rules if isinstance(rules, str) else json.dumps(rules))
    return path


@pytest.fixture
def rules_file(tmp_path: Path) -> Path:
    return write_rules(tmp_path / "rules.json", RULES)


@pytest.fixture
def server(rules_file: Path) -> Iterator[NSQDProcess]:
    process = start_auth_server(rules_file)
    yield process
    assert process.stop() == 0


def get(server: NSQDProcess, secret: str, remote_ip: str = "127.0.0.1", tls: bool = False) -> tuple[int, Any]:
    query = f"common_name=&remote_ip={remote_ip}&secret={secret}&tls={'true' if tls else 'false'}"
    status, _, body = server.http("GET", f"/auth?{query}")
    return status, json.loads(body)


def post(server: NSQDProcess, secret: str, remote_ip: str = "127.0.0.1", tls: bool = False) -> tuple[int, Any]:
    values = {"common_name": [""], "remote_ip": [remote_ip], "secret": [secret], "tls": [str(tls).lower()]}
    status, _, body = server.http("POST", "/auth", json.dumps(values).encode(),
                                  {"Content-Type": "application/json"})
    return status, json.loads(body)


# --- the process ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("ask", [get, post])
def test_a_known_secret_gets_nsqs_reply(server: NSQDProcess, ask: Callable[..., tuple[int, Any]]) -> None:
    assert ask(server, "s3cret") == (200, BILLING_REPLY)


@pytest.mark.parametrize("ask", [get, post])
def test_an_unknown_secret_is_refused(server: NSQDProcess, ask: Callable[..., tuple[int, Any]]) -> None:
    assert ask(server, "guess") == NOT_AUTHORIZED
    assert ask(server, "") == NOT_AUTHORIZED


def test_ping_and_the_log(server: NSQDProcess) -> None:
    assert server.http("GET", "/ping")[::2] == (200, b"OK")
    assert any(f"HTTP: listening on 127.0.0.1:{server.http_port}" in line for line in server.log_lines)
    get(server, "s3cret-not")
    wait_for(lambda: any("denied" in line for line in server.log_lines), what="the refusal logged")
    assert not any("s3cret-not" in line for line in server.log_lines)  # secrets stay out of the log


def test_admin_is_granted_only_to_a_question_about_the_http_apis(server: NSQDProcess) -> None:
    """NSQ's Go nsqd refuses a reply naming a permission it does not know: a TCP AUTH never sees ``admin``."""
    operator = RULES["secrets"]["operator"]
    query = "common_name=&interface=http&remote_ip=127.0.0.1&secret=operator&tls=false"
    status, body = server.http("GET", f"/auth?{query}")[::2]
    assert (status, json.loads(body)["authorizations"]) == (200, operator["authorizations"])
    values = {"common_name": [""], "interface": ["http"], "remote_ip": ["127.0.0.1"], "secret": ["operator"],
              "tls": ["false"]}
    posted = server.http("POST", "/auth", json.dumps(values).encode(), {"Content-Type": "application/json"})
    assert json.loads(posted[2])["authorizations"] == operator["authorizations"]
    for ask in (get, post):
        assert ask(server, "operator")[1]["authorizations"] == [
            {"topic": "^orders$", "channels": [".*"], "permissions": ["publish"]}]


def test_remote_ip_and_tls_restrictions(server: NSQDProcess) -> None:
    assert get(server, "local-only", "127.0.0.1")[0] == 200
    assert post(server, "local-only", "10.2.3.4")[0] == 200
    assert get(server, "local-only", "192.168.1.1") == NOT_AUTHORIZED
    assert get(server, "local-only", "not-an-ip") == NOT_AUTHORIZED
    assert get(server, "tls-only", tls=False) == NOT_AUTHORIZED
    assert get(server, "tls-only", tls=True) == (200, {"ttl": 60, "identity": "secure", "identity_url": "",
                                                       "authorizations": []})


def test_a_bad_post_body_is_a_400(server: NSQDProcess) -> None:
    status, _, body = server.http("POST", "/auth", b"secret=s3cret")
    assert (status, json.loads(body)) == (400, {"message": "BAD_BODY"})


def test_an_edited_rules_file_applies_to_the_next_query(server: NSQDProcess, rules_file: Path) -> None:
    assert get(server, "new") == NOT_AUTHORIZED
    write_rules(rules_file, {"ttl": 30, "secrets": {"new": BILLING}})
    assert get(server, "new") == (200, {**BILLING_REPLY, "ttl": 30})
    assert get(server, "s3cret") == NOT_AUTHORIZED


def test_an_edit_that_breaks_the_file_keeps_the_previous_rules(server: NSQDProcess, rules_file: Path) -> None:
    write_rules(rules_file, '{"secrets": {"s3cret": {"authorizations": [{"topic": "(", "channels": [], '
                            '"permissions": []}]}}}')
    assert get(server, "s3cret") == (200, BILLING_REPLY)
    wait_for(lambda: any("keeping the previous rules" in line and "unable to compile topic" in line
                         for line in server.log_lines), what="the broken file logged")
    rules_file.unlink()
    assert get(server, "s3cret") == (200, BILLING_REPLY)
    write_rules(rules_file, {"secrets": {"other": {}}})
    assert get(server, "other") == (200, {"ttl": 3600, "identity": "", "identity_url": "", "authorizations": []})


def test_sigint_stops_it_cleanly(rules_file: Path) -> None:
    process = start_auth_server(rules_file)
    assert process.stop(signal.SIGINT) == 0


@pytest.mark.parametrize(("rules", "message"), [
    ("{not json", "not JSON"),
    ([], "the rules file must be a JSON object"),
    ({"secret": {}}, "unknown key(s) secret"),
    ({"ttl": 0, "secrets": {}}, "ttl must be a whole number of seconds > 0"),
    ({"secrets": []}, '"secrets" must be an object'),
    ({"secrets": {"s": {"identity": "a", "authorizations": [{"topic": "(", "channels": [], "permissions": []}]}}},
     "secrets entry 1 (identity 'a'): unable to compile topic \"(\""),
    ({"secrets": {"s": {"authorizations": [{"topic": "t", "channels": [".*"], "permissions": ["root"]}]}}},
     "unknown permission root"),
    ({"secrets": {"s": {"authorizations": [{"topic": "t", "permissions": []}]}}}, "authorization 1 needs channels"),
    ({"secrets": {"s": {"authorizations": [{"topic": "t", "channels": ".*", "permissions": []}]}}},
     "channels must be a list of strings"),
    ({"secrets": {"s": {"ttl": 1.5}}}, "ttl must be a whole number of seconds > 0"),
    ({"secrets": {"s": {"remote_ips": ["300.1.1.1"]}}}, "remote_ips"),
    ({"secrets": {"s": {"tls_required": "yes"}}}, "tls_required must be true or false"),
    ({"secrets": {"s": {"chanels": []}}}, "unknown key(s) chanels"),
])
def test_a_bad_rules_file_is_a_bad_command_line(tmp_path: Path, rules: Any, message: str) -> None:
    path = write_rules(tmp_path / "rules.json", rules)
    with pytest.raises(FlagError) as raised:
        Options(rules=str(path)).validate()
    assert str(raised.value).startswith(f"--rules: {path}: ")
    assert message in str(raised.value)


@pytest.mark.parametrize(("rules", "message"), [
    (None, "nsq_auth_server: --rules is required"),
    ("missing", "nsq_auth_server: --rules: [Errno 2] No such file or directory"),
    ('{"secrets": {"s": {"tls_required": 1}}}', "nsq_auth_server: --rules: "),
])
def test_a_bad_rules_file_exits_2_with_a_message(tmp_path: Path, rules: str | None, message: str) -> None:
    args = []
    if rules == "missing":
        args = [f"--rules={tmp_path / 'missing.json'}"]
    elif rules is not None:
        args = [f"--rules={write_rules(tmp_path / 'rules.json', rules)}"]
    result = subprocess.run([*COMMAND, "--http-address=127.0.0.1:0", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=30)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.startswith(message)


def test_help_describes_the_rules_file() -> None:
    result = subprocess.run([*COMMAND, "-h"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    assert "-rules" in result.stderr and '"permissions": ["subscribe", "publish", "admin"]' in result.stderr


# --- nsqd's client against it -----------------------------------------------------------------------------------

@pytest.mark.parametrize("method", ["get", "post"])
async def test_auth_client_end_to_end(server: NSQDProcess, method: str) -> None:
    client = AuthClient([f"127.0.0.1:{server.http_port}"], method)
    try:
        state = await client.query("127.0.0.1", False, "s3cret", "", now=100.0)
        assert (state.identity, state.identity_url, state.expires_at) == ("billing", "https://example.com/billing",
                                                                          3700.0)
        assert state.allows("orders", "", "publish") and state.allows("orders", "shipping", "subscribe")
        assert not state.allows("orders2", "", "publish")
        with pytest.raises(AuthError, match="got response 403 Forbidden"):
            await client.query("127.0.0.1", False, "guess", "")
        tls_state = await client.query("127.0.0.1", True, "tls-only", "")
        assert tls_state.identity == "secure" and tls_state.authorizations == ()
        # a secret is any bytes a client sends: it survives the query string and the JSON body
        assert (await client.query("127.0.0.1", False, "a b+c/d&e=f?ü", "")).identity == "odd"
    finally:
        await client.close()


async def test_in_process_with_a_full_url(rules_file: Path) -> None:
    opts = Options(http_address="127.0.0.1:0", rules=str(rules_file))
    opts.validate()
    service = AuthServer(opts)
    await service.start()
    assert service.http_address is not None
    client = AuthClient([f"http://127.0.0.1:{service.http_address[1]}/auth"])
    try:
        assert (await client.query("10.9.8.7", False, "local-only", "cn")).identity == "ops"
        with pytest.raises(AuthError):
            await client.query("192.168.0.1", False, "local-only", "cn")
    finally:
        await client.close()
        await service.stop()
