"""The admin's Graphite graphs: the targets are the series NSQ's nsqadmin asks for (its page script's names, written
out here), the image URLs draw them as nsqadmin does, the options are checked, and a rate is read from a real
HTTP server answering as graphite-web does."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, urlsplit

import aiohttp
import pytest
from aiohttp import web

from services.admin.graphite import Graphite, GraphiteError, sanitize
from services.admin.options import Options, redact_url
from shared.flags import FlagError


def graphite(**overrides: object) -> Graphite:
    settings: dict[str, object] = {"graphite_url": "http://graphite.example:8080", **overrides}
    opts = Options(nsqd_http_addresses=["127.0.0.1:4151"], **settings)  # type: ignore[arg-type]
    opts.validate()
    made = Graphite.from_options(opts)
    assert made is not None
    return made


def test_targets_are_the_series_nsqadmin_asks_for() -> None:
    g = graphite()
    assert g.topic_target("clicks", "depth") == "sumSeries(stats.gauges.nsq.*.topic.clicks.depth)"
    assert g.topic_target("clicks", "message_count", node="10.0.0.7:4151") == \
        "sumSeries(stats.counters.nsq.10_0_0_7_4151.topic.clicks.message_count.count)"
    assert g.channel_target("clicks", "archive", "requeue_count") == \
        "sumSeries(stats.counters.nsq.*.topic.clicks.channel.archive.requeue_count.count)"
    assert g.channel_target("clicks", "archive", "clients") == \
        "sumSeries(stats.gauges.nsq.*.topic.clicks.channel.archive.clients)"
    assert g.node_target("vm:4151", "*_bytes") == "stats.gauges.nsq.vm_4151.mem.*_bytes"
    # nsqadmin wraps the format around movingAverage(...), a name Graphite never has; the average goes outside
    assert g.node_target("vm:4151", "gc_runs") == "movingAverage(stats.counters.nsq.vm_4151.mem.gc_runs.count,45)"
    assert g.counter_target() == "sumSeries(stats.counters.nsq.*.topic.*.channel.*.message_count.count)"
    assert g.e2e_targets("clicks", "archive", [0.99]) == [
        'alias(scale(averageSeries(stats.gauges.nsq.*.topic.clicks.channel.archive.e2e_processing_latency_99),'
        '0.000001),"p99")']


def test_names_are_sanitized_as_statsd_stores_them_and_formats_apply_as_given() -> None:
    assert sanitize("a b/c#ephemeral") == "a_b-cephemeral"
    assert graphite().topic_target("t#ephemeral", "depth") == "sumSeries(stats.gauges.nsq.*.topic.tephemeral.depth)"
    plain = graphite(statsd_prefix="", statsd_gauge_format="", statsd_counter_format="%s.sum")
    assert plain.topic_target("t", "depth") == "sumSeries(topic.t.depth)"
    assert plain.topic_target("t", "message_count") == "sumSeries(topic.t.message_count.sum)"
    assert graphite(statsd_prefix="shop.nsq").node_prefix("*") == "shop.nsq."


def test_images_draw_counters_per_second_averaged_over_the_interval() -> None:
    g = graphite(statsd_interval=10.0)
    image = g.graph("Rate", [g.topic_target("t", "message_count")], "message_count", "2h")
    query = parse_qsl(urlsplit(image.image).query)
    assert image.image.startswith("http://graphite.example:8080/render?")
    assert ("target", 'summarize(scale(sumSeries(stats.counters.nsq.*.topic.t.message_count.count),0.1),'
                      '"10sec","avg")') in query
    assert ("from", "-2h") in query and ("until", "-10sec") in query
    gauge = g.graph("Depth", [g.topic_target("t", "depth")], "depth", "1h", sparkline=True)
    sparkline = dict(parse_qsl(urlsplit(gauge.image).query))
    assert sparkline["target"] == 'summarize(sumSeries(stats.gauges.nsq.*.topic.t.depth),"10sec","avg")'
    assert sparkline["width"] == "120" and sparkline["hideAxes"] == "true"
    assert dict(parse_qsl(urlsplit(gauge.large).query))["width"] == "800"


def test_credentials_go_to_the_proxy_not_the_browser() -> None:
    g = graphite(graphite_url="https://ops:s%3Acret@graphite.example/base/", proxy_graphite=True,
                 base_path="/admin")
    assert g.url == "https://graphite.example/base"
    assert g.headers == {"Authorization": "Basic b3BzOnM6Y3JldA=="}  # ops:s:cret
    assert g.image_base == "/admin" and g.image_origin == ""
    direct = graphite()
    assert direct.headers == {} and direct.image_origin == "http://graphite.example:8080"


@pytest.mark.parametrize("flags, error", [
    ({"graphite_url": "graphite:8080"}, "--graphite-url 'graphite:8080' must be http[s]://"),
    ({"graphite_url": "http://graphite:port"}, "--graphite-url 'http://graphite:port' must be http[s]://"),
    ({"graphite_url": "http://ops:pw@graphite"}, "--graphite-url with credentials needs --proxy-graphite"),
    ({"graphite_url": "", "proxy_graphite": True}, "--proxy-graphite needs --graphite-url"),
    ({"graphite_url": "http://graphite", "statsd_interval": 0.5},
     "--statsd-interval must be a whole number of seconds, at least 1s"),
])
def test_bad_graphite_flags_are_refused(flags: dict[str, object], error: str) -> None:
    opts = Options(nsqd_http_addresses=["127.0.0.1:4151"], **flags)  # type: ignore[arg-type]
    with pytest.raises(FlagError, match=re.escape(error)):
        opts.validate()


def test_without_graphite_the_statsd_flags_are_accepted_as_nsqadmin_accepts_them() -> None:
    opts = Options(nsqd_http_addresses=["127.0.0.1:4151"], statsd_interval=0.5)
    opts.validate()
    assert Graphite.from_options(opts) is None


def test_a_password_is_never_shown() -> None:
    assert redact_url("https://ops:s3cret@graphite:8080/x") == "https://ops:***@graphite:8080/x"
    assert redact_url("http://graphite") == "http://graphite"
    assert "s3cret" not in repr(graphite(graphite_url="https://ops:s3cret@graphite", proxy_graphite=True))


def test_an_ipv6_nodes_series_are_named_as_statsd_stores_them() -> None:
    # nsqd's key for [::1]:4151 is "[__1]_4151"; statsd drops the brackets
    assert graphite().node_target("[::1]:4151", "heap_objects") == "stats.gauges.nsq.__1_4151.mem.heap_objects"


async def serve(handler: Callable[[web.Request], Awaitable[web.Response]]) -> web.AppRunner:
    """A real HTTP server on a free loopback port answering ``/render`` with ``handler``."""
    app = web.Application()
    app.router.add_route("*", "/render", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def test_rates_are_the_last_intervals_count_per_second_asked_at_once() -> None:
    answers: list[tuple[int, str]] = []
    asked: list[dict[str, object]] = []

    async def render(request: web.Request) -> web.Response:
        form = await request.post()
        asked.append({"method": request.method, "targets": form.getall("target"), "from": form["from"],
                      "until": form["until"], "authorization": request.headers.get("Authorization", "")})
        status, body = answers.pop(0)
        return web.Response(status=status, text=body, content_type="application/json")

    runner = await serve(render)
    port = runner.addresses[0][1]
    g = graphite(graphite_url=f"http://ops:pw@127.0.0.1:{port}", proxy_graphite=True, statsd_interval=10.0)
    try:
        async with aiohttp.ClientSession() as session:
            # Graphite may keep finer points than nsqd pushes: the interval's points are summed
            answers.append((200, json.dumps([{"target": "1", "datapoints": [[120.0, 1], [None, 2], [5.0, 3]]},
                                             {"target": "0", "datapoints": [[None, 1]]}])))
            assert await g.rates(session, ["sumSeries(a)", "sumSeries(b)"]) == ["N/A", "12.50"]
            assert asked[-1] == {"method": "POST", "targets": ['alias(sumSeries(a),"0")', 'alias(sumSeries(b),"1")'],
                                 "from": "-20sec", "until": "-10sec", "authorization": "Basic b3BzOnB3"}  # ops:pw
            answers.append((200, "[]"))
            assert await g.rate(session, "none") == "N/A"
            for status, body in ((500, '{"error": "boom"}'), (200, ""), (200, '{"not": "a list"}'),
                                 (200, '[{"target": "0"}]')):
                answers.append((status, body))
                with pytest.raises(GraphiteError):
                    await g.rate(session, "x")
            assert await g.rates(session, []) == []
    finally:
        await runner.cleanup()
    with pytest.raises(GraphiteError):
        async with aiohttp.ClientSession() as session:
            await g.rate(session, "x")  # nothing listens there any more
