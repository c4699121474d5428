"""The admin's defences against cross-site requests, over a real admin and nsqd: what browsers mark as sent for
another site is refused and audited, the pages' session token, JSON-only actions, the security headers, proxies
(``X-Forwarded-Host``, ``--allowed-origin``, ``--base-path``), and the built-in htpasswd login. Scripts and tools,
which send no browser marks, work as before."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Iterator
from pathlib import Path

import bcrypt
import pytest

from harness.processes import NSQDProcess, start_admin, start_nsqd
from tests.functional.test_admin import get_json, nsqd_topic, send

ATTACKER = "http://127.0.0.2:39999"
# what a text/plain form with the field name '{"action":"empty","x":"' and the value '"}' sends
FORM_BODY = b'{"action":"empty","x":"="}'
ORDERS = (b"m", b"m", b"m")  # what the tests publish to topic "orders", each in a /pub of its own


@pytest.fixture
def nsqd(tmp_path: Path) -> Iterator[NSQDProcess]:
    (tmp_path / "nsqd").mkdir()
    process = start_nsqd(data_path=tmp_path / "nsqd")
    yield process
    process.stop()


def admin_with(nsqd: NSQDProcess, tmp_path: Path, *args: str) -> NSQDProcess:
    data = tmp_path / f"admin{len(list(tmp_path.glob('admin*')))}"
    data.mkdir()
    return start_admin(f"--nsqd-http-address=127.0.0.1:{nsqd.http_port}", *args, data_path=data)


@pytest.fixture
def admin(nsqd: NSQDProcess, tmp_path: Path) -> Iterator[NSQDProcess]:
    process = admin_with(nsqd, tmp_path)
    yield process
    process.stop()


def depth(nsqd: NSQDProcess, topic: str = "orders") -> int:
    return int(nsqd_topic(nsqd, topic)["depth"])  # type: ignore[index]


def session(admin: NSQDProcess, path: str = "/", headers: dict[str, str] | None = None) -> tuple[str, str]:
    """A browser's first page: the session cookie it was given and the token in the page (the same)."""
    status, answer, body = admin.http("GET", path, headers=headers)
    assert status == 200
    cookie = answer["Set-Cookie"]
    token = re.search(r'<meta name="nsqadmin-token" content="([^"]+)">', body.decode())
    assert token is not None
    return cookie, token.group(1)


def audited(admin: NSQDProcess) -> list[tuple[str, str, str]]:
    return [(e["action"], e["topic"], e["result"]) for e in get_json(admin, "/api/audit")[1]["entries"]]


def test_a_cross_site_form_is_refused_and_audited(nsqd: NSQDProcess, admin: NSQDProcess) -> None:
    nsqd.publish("orders", *ORDERS)
    for marks in ({"Origin": ATTACKER, "Sec-Fetch-Site": "cross-site"}, {"Origin": ATTACKER},
                  {"Sec-Fetch-Site": "cross-site"}, {"Origin": "null"},
                  {"Origin": ATTACKER, "Sec-Fetch-Site": "same-site"}):
        status, _, body = admin.http("POST", "/api/topics/orders", FORM_BODY,
                                     {"Content-Type": "text/plain", "User-Agent": "Mozilla/5.0", **marks})
        assert status == 403, marks
        message = json.loads(body)["message"]
        assert message.startswith("CROSS_SITE_REQUEST: refused a request sent from "), message
    assert depth(nsqd) == 3
    entries = audited(admin)
    assert len(entries) == 5
    assert entries[-1] == ("empty_topic", "orders",
                           f"refused: CROSS_SITE_REQUEST: refused a request sent from {ATTACKER}; a page on another "
                           "site cannot act through the admin (--allowed-origin trusts an origin)")
    assert "refused: CROSS_SITE_REQUEST" in admin.http("GET", "/audit")[2].decode()


def test_every_state_changing_route_is_guarded(nsqd: NSQDProcess, admin: NSQDProcess) -> None:
    nsqd.publish("orders", *ORDERS)
    assert nsqd.http("POST", "/channel/create?topic=orders&channel=c")[0] == 200
    cross_site = {"Origin": ATTACKER, "Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"}
    log_level = get_json(admin, "/config/log_level")[1]
    attempts = [("POST", "/api/topics", {"topic": "new"}), ("POST", "/api/topics/orders/c", {"action": "pause"}),
                ("POST", "/api/topics/orders/c", {"action": "rewind", "since": "earliest"}),
                ("POST", "/api/topics/orders", {"action": "set_retention", "time": "1h"}),
                ("DELETE", "/api/topics/orders", None), ("DELETE", "/api/topics/orders/c", None),
                ("DELETE", f"/api/nodes/127.0.0.1:{nsqd.http_port}", {"topic": "orders"}),
                ("POST", "/api/topics/orders", b"not json"), ("POST", "/api/topics/orders", b"x" * (2 << 20)),
                ("PUT", "/config/log_level", b"debug")]
    for method, path, body in attempts:
        status, answer = send(admin, method, path, body, cross_site)
        assert status == 403 and answer["message"].startswith("CROSS_SITE_REQUEST"), (method, path)
    channel = nsqd.channel_stats("orders", "c")
    assert (channel["paused"], channel["depth"]) == (False, 3)
    assert [action for action, _, _ in audited(admin)] == [
        "unknown", "unknown", "tombstone_topic_producer", "delete_channel", "delete_topic", "set_retention",
        "rewind_channel", "pause_channel", "create_topic"]
    assert get_json(admin, "/config/log_level")[1] == log_level


def test_scripts_without_browser_marks_work_as_before(nsqd: NSQDProcess, admin: NSQDProcess) -> None:
    nsqd.publish("orders", *ORDERS)
    assert send(admin, "POST", "/api/topics/orders", {"action": "empty"}) == (200, {"message": ""})
    assert depth(nsqd) == 0
    assert send(admin, "DELETE", "/api/topics/orders") == (200, {"message": ""})
    assert admin.http("PUT", "/config/log_level", b"debug")[0] == 200  # curl -d: no JSON content type needed here


def test_the_api_takes_json_bodies_only(nsqd: NSQDProcess, admin: NSQDProcess) -> None:
    nsqd.publish("orders", *ORDERS)
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        status, _, body = admin.http("POST", "/api/topics/orders", FORM_BODY, {"Content-Type": content_type})
        assert (status, json.loads(body)["message"]) == (
            415, "INVALID_CONTENT_TYPE: the admin's API takes application/json bodies"), content_type
    assert admin.http("POST", "/api/topics/orders", FORM_BODY,
                      {"Content-Type": "application/json; charset=utf-8"})[0] == 200
    assert depth(nsqd) == 0


def test_a_browser_needs_its_session_token(nsqd: NSQDProcess, admin: NSQDProcess) -> None:
    nsqd.publish("orders", *ORDERS)
    cookie, token = session(admin)
    assert re.fullmatch(r"nsqadmin_session=([\w-]{43}); HttpOnly; Path=/; SameSite=Strict", cookie)
    assert cookie.split(";")[0] == f"nsqadmin_session={token}"
    same_origin = {"Origin": f"http://127.0.0.1:{admin.http_port}", "Sec-Fetch-Site": "same-origin",
                   "Cookie": f"nsqadmin_session={token}"}
    for headers in (same_origin, {**same_origin, "X-NSQAdmin-Token": "x" * 43},
                    {"Cookie": f"nsqadmin_session={token}"},
                    {**same_origin, "Cookie": "", "X-NSQAdmin-Token": token}):
        status, answer = send(admin, "POST", "/api/topics/orders", {"action": "empty"}, headers)
        assert (status, answer["message"]) == (
            403, "INVALID_TOKEN: the request lacks this browser's session token; reload the page"), headers
    assert depth(nsqd) == 3
    assert send(admin, "POST", "/api/topics/orders", {"action": "empty"},
                {**same_origin, "X-NSQAdmin-Token": token}) == (200, {"message": ""})
    assert depth(nsqd) == 0


def test_a_page_keeps_the_session_it_has(admin: NSQDProcess) -> None:
    _, token = session(admin)
    status, answer, body = admin.http("GET", "/nodes", headers={"Cookie": f"nsqadmin_session={token}"})
    assert status == 200 and "Set-Cookie" not in answer
    assert f'content="{token}"' in body.decode()


def test_every_response_carries_the_security_headers(admin: NSQDProcess) -> None:
    for path in ("/", "/topics/missing", "/api/topics", "/static/admin.js", "/no/such/page", "/ping"):
        _, headers, _ = admin.http("GET", path)
        assert headers["Content-Security-Policy"] == (
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"), path
        assert (headers["X-Frame-Options"], headers["X-Content-Type-Options"], headers["Referrer-Policy"]) == (
            "DENY", "nosniff", "same-origin"), path


def test_behind_a_proxy(nsqd: NSQDProcess, tmp_path: Path) -> None:
    nsqd.publish("orders", *ORDERS)
    admin = admin_with(nsqd, tmp_path, "--base-path=/nsq", "--allowed-origin=https://ops.example.com")
    try:
        cookie, token = session(admin, "/nsq/", {"X-Forwarded-Proto": "https"})
        assert "Path=/nsq;" in cookie and "Secure" in cookie
        browser = {"Cookie": f"nsqadmin_session={token}", "X-NSQAdmin-Token": token}
        # an older browser (Origin, no Sec-Fetch-Site) reaching the admin as https://nsq.example.com
        proxied = {**browser, "Origin": "https://nsq.example.com", "X-Forwarded-Host": "nsq.example.com"}
        assert send(admin, "POST", "/nsq/api/topics/orders", {"action": "pause"}, proxied)[0] == 200
        assert send(admin, "POST", "/nsq/api/topics/orders", {"action": "unpause"},
                    {**proxied, "X-Forwarded-Host": "other.example.com"})[0] == 403
        trusted = {**browser, "Origin": "https://ops.example.com", "Sec-Fetch-Site": "cross-site"}
        assert send(admin, "POST", "/nsq/api/topics/orders", {"action": "unpause"}, trusted)[0] == 200
        assert send(admin, "POST", "/nsq/api/topics/orders", {"action": "pause"},
                    {**trusted, "Origin": "http://ops.example.com"})[0] == 403
    finally:
        admin.stop()


def credentials(user: str, password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_the_built_in_login(nsqd: NSQDProcess, tmp_path: Path) -> None:
    nsqd.publish("orders", *ORDERS)
    htpasswd = tmp_path / "htpasswd"
    users = {"alice": "wonderland", "bob": "builder"}
    htpasswd.write_text("".join(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()}\n"
                                for user, password in users.items()))
    admin = admin_with(nsqd, tmp_path, f"--htpasswd-file={htpasswd}", "--admin-user=alice")
    try:
        for path in ("/", "/api/topics", "/static/admin.css", "/metrics"):
            status, headers, _ = admin.http("GET", path)
            assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="nsqadmin", charset="UTF-8"'
        assert admin.http("GET", "/ping")[0] == 200  # health checks
        assert admin.http("GET", "/", headers=credentials("alice", "wrong"))[0] == 401
        assert admin.http("GET", "/", headers=credentials("mallory", "x"))[0] == 401
        status, _, body = admin.http("GET", "/", headers=credentials("alice", "wonderland"))
        assert status == 200 and '<span class="user" title="signed in user">alice</span>' in body.decode()
        # the login names the user: a client's own X-Forwarded-User counts for nothing
        bob = {**credentials("bob", "builder"), "X-Forwarded-User": "alice"}
        assert send(admin, "POST", "/api/topics/orders", {"action": "empty"}, bob) == (403, {"message": "FORBIDDEN"})
        assert send(admin, "POST", "/api/topics/orders", {"action": "empty"},
                    credentials("alice", "wonderland")) == (200, {"message": ""})
        assert depth(nsqd) == 0
        entries = get_json(admin, "/api/audit", credentials("alice", "wonderland"))[1]["entries"]
        assert [(e["user"], e["action"], e["result"]) for e in entries] == [
            ("alice", "empty_topic", "ok"), ("bob", "empty_topic", "refused: FORBIDDEN")]
    finally:
        admin.stop()


def test_a_login_file_that_cannot_be_used_stops_the_start(nsqd: NSQDProcess, tmp_path: Path) -> None:
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text("alice:$apr1$salt$hash\n")
    with pytest.raises(RuntimeError) as failed:
        admin_with(nsqd, tmp_path, f"--htpasswd-file={htpasswd}")
    assert f"failed to start - {htpasswd}:1: the entry for 'alice' is not bcrypt" in str(failed.value)


def test_an_allowed_origin_must_be_an_origin(nsqd: NSQDProcess, tmp_path: Path) -> None:
    with pytest.raises(RuntimeError) as failed:
        admin_with(nsqd, tmp_path, "--allowed-origin=ops.example.com")
    assert "--allowed-origin: 'ops.example.com' is not an origin (scheme://host[:port])" in str(failed.value)
