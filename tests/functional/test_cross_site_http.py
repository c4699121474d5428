"""nsqd and nsqlookupd, as real processes, refusing the state-changing requests a browser sends for another
site's page (what such a page can make a browser send: the ``Origin`` and ``Sec-Fetch-Site`` it adds), and
serving every other request as before; ``--http-allow-cross-site`` gives back NSQ's behaviour."""

from __future__ import annotations

import json
import ssl
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.processes import NSQDProcess, Service, start_lookupd, start_nsqd, wait_for
from tests.functional.test_lookupd import logged_port
from tests.functional.test_transport import Certificates, certificates  # noqa: F401  (the fixture)

ATTACKER = "http://127.0.0.2:39999"
# what a page on ATTACKER makes a browser add (older browsers send only Origin), by a name fit for a topic
CROSS_SITE = {"origin-and-fetch-site": {"Origin": ATTACKER, "Sec-Fetch-Site": "cross-site"},
              "origin": {"Origin": ATTACKER}, "fetch-site": {"Sec-Fetch-Site": "cross-site"}}
REFUSED = (403, b'{"message":"CROSS_SITE_REQUEST"}')
FRAME_DENY = {"Content-Security-Policy": "frame-ancestors 'none'", "X-Frame-Options": "DENY"}

# in an order each can succeed in (--http-allow-cross-site)
NSQD_ACTIONS = [("POST", "/topic/empty?topic={topic}", None), ("POST", "/topic/pause?topic={topic}", None),
                ("POST", "/pub?topic={topic}", b"evil"), ("POST", "/mpub?topic={topic}", b"evil\nevil"),
                ("POST", "/topic/create?topic={topic}_new", None),
                ("POST", "/channel/empty?topic={topic}&channel=c", None),
                ("POST", "/channel/create?topic={topic}&channel=new", None),
                ("POST", "/channel/delete?topic={topic}&channel=c", None),
                ("POST", "/topic/delete?topic={topic}", None), ("PUT", "/config/log_level", b"debug")]
LOOKUPD_ACTIONS = ["/topic/tombstone?topic={topic}&node={node}", "/topic/create?topic={topic}_new",
                   "/topic/delete?topic={topic}", "/channel/create?topic={topic}&channel=new",
                   "/channel/delete?topic={topic}&channel=c"]


@pytest.fixture(scope="module")
def lookupd() -> Iterator[NSQDProcess]:
    process = start_lookupd("--external-http-address=127.0.0.1:0")
    yield process
    process.stop()


@pytest.fixture(scope="module")
def nsqd(lookupd: NSQDProcess) -> Iterator[NSQDProcess]:
    process = start_nsqd(f"--lookupd-tcp-address=127.0.0.1:{lookupd.tcp_port}")
    yield process
    process.stop()


def setup_topic(nsqd: Service, topic: str) -> None:
    """A topic with one message in it and in its channel ``c``."""
    assert nsqd.http("POST", f"/topic/create?topic={topic}")[0] == 200
    assert nsqd.http("POST", f"/channel/create?topic={topic}&channel=c")[0] == 200
    assert nsqd.http("POST", f"/pub?topic={topic}", b"kept")[0] == 200


def topic_state(nsqd: Service, topic: str) -> dict[str, Any]:
    document = json.loads(nsqd.http("GET", "/stats?format=json")[2])
    found = {t["topic_name"]: t for t in document["topics"]}
    if topic not in found:
        return {}
    return {"depth": found[topic]["depth"], "paused": found[topic]["paused"], "new": f"{topic}_new" in found,
            "channels": {c["channel_name"]: c["depth"] for c in found[topic]["channels"]}}


def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None,
          context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def listening_port(process: NSQDProcess, listener: str) -> int:
    """The port of a listener the process logged after its HTTP one (HTTPS, HTTP (external))."""
    return wait_for(lambda: logged_port(process, f"{listener}: listening on "), what=f"{listener} logged")


def log_level(nsqd: Service) -> Any:
    return json.loads(nsqd.http("GET", "/config/log_level")[2])


def action(nsqd: Service, method: str, path: str, body: bytes | None, topic: str,
           headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    status, _, answer = nsqd.http(method, path.format(topic=topic), body, headers)
    return status, answer


@pytest.mark.parametrize("marks", CROSS_SITE)
def test_nsqd_refuses_cross_site_actions_and_changes_nothing(nsqd: NSQDProcess, marks: str) -> None:
    topic, headers = f"orders-{marks}", CROSS_SITE[marks]
    setup_topic(nsqd, topic)
    before, level = topic_state(nsqd, topic), log_level(nsqd)
    for method, path, body in NSQD_ACTIONS:
        assert action(nsqd, method, path, body, topic, headers) == REFUSED, path
    assert topic_state(nsqd, topic) == before == {"depth": 0, "paused": False, "new": False, "channels": {"c": 1}}
    assert log_level(nsqd) == level
    logged = f'refused POST "/topic/delete" from "{headers.get("Origin") or "cross-site"}"'
    wait_for(lambda: any(logged in line for line in nsqd.log_lines), what="the refusal logged")


@pytest.mark.parametrize("marks", [{}, {"Sec-Fetch-Site": "same-origin"}, {"Origin": "http://{host}"}],
                         ids=["no-browser", "same-origin", "own-origin"])
def test_nsqd_serves_everything_else(nsqd: NSQDProcess, marks: dict[str, str],
                                     request: pytest.FixtureRequest) -> None:
    headers = {name: value.format(host=f"127.0.0.1:{nsqd.http_port}") for name, value in marks.items()}
    topic = f"served-{request.node.callspec.id}"
    setup_topic(nsqd, topic)
    assert action(nsqd, "POST", "/pub?topic={topic}", b"more", topic, headers) == (200, b"OK")
    assert topic_state(nsqd, topic)["channels"] == {"c": 2}
    assert action(nsqd, "POST", "/channel/empty?topic={topic}&channel=c", None, topic, headers)[0] == 200
    assert topic_state(nsqd, topic)["channels"] == {"c": 0}
    level = log_level(nsqd)
    assert action(nsqd, "PUT", "/config/log_level", b"warn", topic, headers)[0] == 200
    assert log_level(nsqd) != level
    assert action(nsqd, "PUT", "/config/log_level", b"info", topic, headers)[0] == 200
    assert action(nsqd, "POST", "/topic/delete?topic={topic}", None, topic, headers)[0] == 200
    assert topic_state(nsqd, topic) == {}


def test_nsqd_reads_are_served_to_any_site_but_not_framed(nsqd: NSQDProcess) -> None:
    for path in ("/ping", "/stats", "/stats?format=json", "/info", "/nope"):
        status, headers, _ = nsqd.http("GET", path, headers=CROSS_SITE["origin-and-fetch-site"])
        assert status in (200, 404) and FRAME_DENY.items() <= headers.items(), path
    status, headers, _ = nsqd.http("POST", "/pub?topic=framing", b"x")
    assert status == 200 and not FRAME_DENY.keys() & headers.keys()


def test_nsqd_over_https_refuses_and_denies_framing_too(certificates: Certificates) -> None:  # noqa: F811
    nsqd = start_nsqd(f"--tls-cert={certificates.cert}", f"--tls-key={certificates.key}",
                      "--https-address=127.0.0.1:0")
    try:
        url = f"https://127.0.0.1:{listening_port(nsqd, 'HTTPS')}"
        context = certificates.client_context()
        assert fetch(f"{url}/topic/create?topic=secure", "POST", context=context)[0] == 200
        refused = fetch(f"{url}/topic/delete?topic=secure", "POST", CROSS_SITE["origin"], context)
        assert (refused[0], refused[2]) == REFUSED
        status, headers, _ = fetch(f"{url}/stats", context=context)
        assert status == 200 and FRAME_DENY.items() <= headers.items()
        assert topic_state(nsqd, "secure") != {}
    finally:
        nsqd.stop()


def test_nsqd_allowing_cross_site_from_its_config_file(tmp_path: Path) -> None:
    config = tmp_path / "nsqd.toml"
    config.write_text("http_allow_cross_site = true\n")
    nsqd = start_nsqd(f"--config={config}")
    try:
        setup_topic(nsqd, "open")
        level = log_level(nsqd)
        for method, path, body in NSQD_ACTIONS:
            assert action(nsqd, method, path, body, "open", CROSS_SITE["origin"])[0] == 200, path
        assert topic_state(nsqd, "open") == {}
        assert log_level(nsqd) != level
        assert not FRAME_DENY.keys() & nsqd.http("GET", "/stats")[1].keys()
    finally:
        nsqd.stop()


# -- nsqlookupd --------------------------------------------------------------------------------------------


def lookupd_state(lookupd: Service) -> dict[str, Any]:
    def get(path: str) -> Any:
        return json.loads(lookupd.http("GET", path)[2])

    topics, nodes = get("/topics")["topics"], get("/nodes")["producers"]
    return {"topics": topics,
            "tombstoned": {topic for node in nodes for topic, tombstoned in zip(node["topics"], node["tombstones"])
                           if tombstoned},
            "channels": {topic: get(f"/channels?topic={topic}")["channels"] for topic in topics}}


@pytest.fixture(scope="module")
def registered(lookupd: NSQDProcess, nsqd: NSQDProcess) -> str:
    """A topic with a channel that the nsqd registered with lookupd."""
    setup_topic(nsqd, "registered")
    wait_for(lambda: lookupd_state(lookupd)["channels"].get("registered") == ["c"], what="nsqd registered")
    return "registered"


@pytest.mark.parametrize("marks", CROSS_SITE)
def test_lookupd_refuses_cross_site_actions_and_changes_nothing(lookupd: NSQDProcess, nsqd: NSQDProcess,
                                                                registered: str, marks: str) -> None:
    before = lookupd_state(lookupd)
    node = f"127.0.0.1:{nsqd.http_port}"
    for path in LOOKUPD_ACTIONS:
        assert action(lookupd, "POST", path.format(topic=registered, node=node), None, registered,
                      CROSS_SITE[marks]) == REFUSED, path
    assert lookupd_state(lookupd) == before
    assert registered in before["topics"] and not before["tombstoned"]


def test_lookupd_serves_requests_without_browser_marks(lookupd: NSQDProcess) -> None:
    for headers in ({}, {"Sec-Fetch-Site": "same-origin"}):
        assert action(lookupd, "POST", "/topic/create?topic={topic}", None, "made", headers)[0] == 200
        assert "made" in lookupd_state(lookupd)["topics"]
        assert action(lookupd, "POST", "/topic/delete?topic={topic}", None, "made", headers)[0] == 200
        assert "made" not in lookupd_state(lookupd)["topics"]


def test_lookupd_reads_are_not_framed_on_either_listener(lookupd: NSQDProcess) -> None:
    for port in (lookupd.http_port, listening_port(lookupd, "HTTP (external)")):
        for path in ("/nodes", "/topics", "/ping", "/nope"):
            status, headers, _ = fetch(f"http://127.0.0.1:{port}{path}", headers=CROSS_SITE["origin"])
            assert status in (200, 404) and FRAME_DENY.items() <= headers.items(), (port, path)


def test_lookupd_allowing_cross_site() -> None:
    lookupd = start_lookupd("--http-allow-cross-site")
    try:
        for path in ("/topic/create?topic={topic}", "/channel/create?topic={topic}&channel=c"):
            assert action(lookupd, "POST", path, None, "open", CROSS_SITE["origin"])[0] == 200
        assert lookupd_state(lookupd)["channels"] == {"open": ["c"]}
        assert not FRAME_DENY.keys() & lookupd.http("GET", "/nodes")[1].keys()
    finally:
        lookupd.stop()
