"""The admin's graphs from Graphite, for real: two nsqd on one host push to Etsy's statsd, which flushes to
carbon-cache; graphite-web answers the render API; the admin (``--graphite-url``) draws its graphs from it, and
chromium loads them. The series are checked under the names NSQ's nsqadmin asks Graphite for (written out here as
nsqadmin's page script builds them), and the admin's own targets are checked to find what nsqd sent."""

from __future__ import annotations

import json
import re
import urllib.error
from collections.abc import Iterator
from urllib.parse import parse_qsl, urlencode, urlsplit

import pytest

from harness.browser import chromium_page, requires_chromium
from harness.graphite import GraphiteChain, require_graphite, wait_for_series
from harness.processes import NSQDProcess, start_admin, start_lookupd, start_nsqd, wait_for

INTERVAL = "2s"  # nsqd's pushes and the admin's --statsd-interval alike


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """statsd → carbon → graphite-web, a lookupd, two nsqd on one host pushing to statsd, and two admins on
    Graphite: one sending the browser to Graphite, one proxying it (``--proxy-graphite``)."""
    require_graphite()
    scratch = tmp_path_factory.mktemp("graphite")
    started: list[NSQDProcess] = []
    with GraphiteChain(scratch / "chain") as chain:
        try:
            lookupd = start_lookupd()
            started.append(lookupd)
            nodes = []
            for _ in range(2):  # make up's shape: two nsqd on one host, told apart by their HTTP ports
                nodes.append(start_nsqd(f"--lookupd-tcp-address={lookupd.tcp_address_text}",
                                        f"--statsd-address={chain.statsd_address}", f"--statsd-interval={INTERVAL}",
                                        "--e2e-processing-latency-percentile=0.99"))
                started.append(nodes[-1])
            admins = []
            # the proxied one with credentials, which only it sends (graphite-web here takes any)
            with_credentials = chain.url.replace("http://", "http://ops:s3cret@")
            for n, extra in enumerate(((f"--graphite-url={chain.url}",),
                                       (f"--graphite-url={with_credentials}", "--proxy-graphite"))):
                (scratch / f"admin{n}").mkdir()
                admins.append(start_admin(f"--lookupd-http-address={lookupd.http_address_text}",
                                          f"--statsd-interval={INTERVAL}", *extra, data_path=scratch / f"admin{n}"))
                started.append(admins[-1])
            for node, count in zip(nodes, (30, 20)):
                assert node.http("POST", "/topic/create?topic=clicks")[0] == 200
                assert node.http("POST", "/channel/create?topic=clicks&channel=archive")[0] == 200
                node.multi_publish("clicks", [b"click %d" % n for n in range(count)])
            wait_for(lambda: len(json.loads(admins[0].http("GET", "/api/topics/clicks")[2])["nodes"]) == 2, 15,
                     "both nsqd registered with lookupd")
            # every test starts from both nodes' figures in Graphite (each xdist worker makes its own cluster)
            wait_for_series(chain, "sumSeries(stats.gauges.nsq.*.topic.clicks.channel.archive.depth)",
                            until=lambda points: points and points[-1][0] == 50)
            yield {"chain": chain, "nodes": nodes, "direct": admins[0], "proxied": admins[1]}
        finally:
            for process in reversed(started):
                process.stop()


def node_key(node: NSQDProcess) -> str:
    """The node's part of NSQ's statsd prefix: its broadcast address and HTTP port, dots and colons as ``_``."""
    return f"127_0_0_1_{node.http_port}"


def test_nsqd_series_are_where_nsqs_nsqadmin_looks_for_them(cluster: dict[str, object]) -> None:
    chain, nodes = cluster["chain"], cluster["nodes"]
    assert isinstance(chain, GraphiteChain) and isinstance(nodes, list)
    # nsqadmin's page script: sumSeries over every node of the gauge or counter format applied to the stat
    depth = wait_for_series(chain, "sumSeries(stats.gauges.nsq.*.topic.clicks.channel.archive.depth)",
                            until=lambda points: points and points[-1][0] == 50)
    assert depth[-1][0] == 50
    wait_for_series(chain, "sumSeries(stats.counters.nsq.*.topic.clicks.message_count.count)",
                    until=lambda points: sum(value for value, _ in points) == 50)
    for node in nodes:
        wait_for_series(chain, f"stats.gauges.nsq.{node_key(node)}.mem.heap_objects")
        wait_for_series(chain, f"stats.gauges.nsq.{node_key(node)}.topic.clicks.channel.archive.clients",
                        until=lambda points: points and points[-1][0] == 0)


def test_the_admins_graphs_and_rates_find_what_nsqd_sent(cluster: dict[str, object]) -> None:
    chain, admin = cluster["chain"], cluster["direct"]
    assert isinstance(chain, GraphiteChain) and isinstance(admin, NSQDProcess)
    status, _, body = admin.http("GET", "/topics/clicks/archive")
    assert status == 200
    images = graph_urls(body.decode())
    assert len(images) == 8  # depth, in-flight, deferred, rate, requeued, timed out, connections, e2e latency
    assert all(url.startswith(chain.url + "/render?") for url in images)
    by_title = {dict(parse_qsl(urlsplit(url).query))["title"]: url for url in images}
    assert {"Connections", "In-Flight (messages)", "E2E latency (ms)"} <= set(by_title)
    # the depth graph's own query, as data: both nodes' depth summed
    wait_for(lambda: last_value(chain, by_title["Depth (messages)"]) == 50, 30, "the depth graph's 50 messages",
             retry_on=(urllib.error.HTTPError,))

    # a rate is the last full interval's count per second: a burst shows in it, then goes out of the window (on a
    # topic of its own: the other tests count the clicks)
    nodes = cluster["nodes"]
    assert isinstance(nodes, list)
    nodes[0].multi_publish("bursts", [b"burst"] * 100)
    rate_target = "sumSeries(stats.counters.nsq.*.topic.bursts.message_count.count)"
    rate_path = "/api/graphite?" + urlencode({"metric": "rate", "target": rate_target})

    def rate() -> float | None:
        status, _, body = admin.http("GET", rate_path)
        assert status == 200, body
        value = json.loads(body)["rate"]
        assert re.fullmatch(r"\d+\.\d\d|N/A", value), value
        return float(value) if value != "N/A" and float(value) > 0 else None
    assert wait_for(rate, 30, "a rate above 0", interval=0.2) == 50.0  # 100 messages in a 2s interval
    assert admin.http("GET", "/api/graphite?metric=depth&target=x")[0] == 400
    assert json.loads(admin.http("GET", "/api/graphite?metric=rate")[2])["message"] == "INVALID_ARG_TARGET"

    status, headers, body = admin.http("GET", "/topics")
    page = body.decode()
    assert status == 200 and "from Graphite&#39;s last interval" in page
    sparklines = re.findall(r'<img class="sparkline" src="([^"]+)" alt="(\w+) of clicks"', page)
    assert [(url.startswith(chain.url), title) for url, title in sparklines] == [(True, "Depth"), (True, "Rate")]
    assert chain.url.split("//")[1] in headers["Content-Security-Policy"]  # the browser may load its images


def test_the_proxied_admin_serves_graphites_images_itself(cluster: dict[str, object]) -> None:
    chain, admin = cluster["chain"], cluster["proxied"]
    assert isinstance(chain, GraphiteChain) and isinstance(admin, NSQDProcess)
    images = graph_urls(admin.http("GET", "/topics/clicks")[2].decode())
    assert images and all(url.startswith("/render?") for url in images)
    status, headers, body = admin.http("GET", images[0])
    assert status == 200 and headers["Content-Type"] == "image/png" and body.startswith(b"\x89PNG")
    status, headers, body = admin.http("GET", images[0] + "&format=json")
    assert status == 200 and json.loads(body)[0]["datapoints"]
    assert "img-src 'self' data:;" in headers["Content-Security-Policy"]
    # only images and data pass: no script (jsonp) or markup (svg) from the admin's own origin
    status, headers, body = admin.http("GET", images[0] + "&format=json&jsonp=alert")
    assert status == 200 and headers["Content-Type"].startswith("application/json") and body.startswith(b"[")
    status, _, body = admin.http("GET", images[0] + "&format=svg")
    assert (status, json.loads(body)["message"]) == (400, "INVALID_ARG_FORMAT")
    assert json.loads(admin.http("GET", "/config/graphite_url")[2]) == chain.url.replace("//", "//ops:***@")


@requires_chromium
def test_the_browser_draws_every_graph(cluster: dict[str, object]) -> None:
    nodes = cluster["nodes"]
    assert isinstance(nodes, list)
    for admin in (cluster["direct"], cluster["proxied"]):
        assert isinstance(admin, NSQDProcess)
        with chromium_page() as page:
            topics = json.loads(admin.http("GET", "/api/topics")[2])["topics"]
            for path, count in (("/topics/clicks", 3), ("/topics/clicks/archive", 8),
                                (f"/nodes/127.0.0.1:{nodes[0].http_port}", 4), ("/counter", 1),
                                ("/topics", 2 * len(topics))):  # a depth and a rate sparkline each
                page.goto(admin.http_url(path + "?window=1h"))
                page.wait_for_load_state("networkidle")
                drawn = page.evaluate("""() => [...document.querySelectorAll('img.graph, img.sparkline')]
                    .map(img => img.complete && img.naturalWidth > 0)""")
                assert drawn == [True] * count, path


def graph_urls(page: str) -> list[str]:
    """The graph images' URLs on a page, unescaped."""
    return [url.replace("&amp;", "&") for url in re.findall(r'<img class="graph" src="([^"]+)"', page)]


def last_value(chain: GraphiteChain, image_url: str) -> float | None:
    """The last point of the first series an image's query draws, asked of graphite-web as JSON."""
    targets = [value for key, value in parse_qsl(urlsplit(image_url).query) if key == "target"]
    series = chain.render(targets)
    return float(series[0]["points"][-1][0]) if series and series[0]["points"] else None

