"""Graphs from Graphite, as nsqadmin draws them with ``--graphite-url``: the render API's images of the series
nsqd pushes to statsd (``--statsd-address``), under the names statsd gives them.

A series' name is ``--statsd-prefix`` with ``%s`` the node (``host:port``, dots and colons as underscores; ``*``
for every node), then nsqd's stat (``topic.<t>.channel.<c>.depth``), put through ``--statsd-gauge-format`` or
``--statsd-counter-format`` by the stat's kind. A topic's or channel's series are summed over the nodes matched;
counters are drawn per second (scaled by ``1/--statsd-interval``) and every series is averaged over the interval.

With ``--proxy-graphite`` the pages' images come through the admin's own ``/render`` (for a Graphite the browser
cannot reach, or one behind HTTP Basic credentials given in the URL), else straight from the Graphite URL.

Pure but for ``rate``: URLs and targets are made from the options alone.
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from typing import NamedTuple
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

import aiohttp

from .options import Options

GRAPH_WINDOWS = ("1h", "2h", "12h", "24h", "48h", "168h")  # nsqadmin's graph timeframes

# each stat's statsd kind (a gauge's value is drawn as is, a counter's per second); nsqadmin's table
_KINDS = {
    "depth": "gauge", "in_flight_count": "gauge", "deferred_count": "gauge", "clients": "gauge",
    "requeue_count": "counter", "timeout_count": "counter", "message_count": "counter",
    "*_bytes": "gauge", "gc_pause_*": "gauge", "heap_objects": "gauge", "gc_runs": "counter",
    "e2e_processing_latency": "gauge",
}
# what statsd itself does to a name's characters (Etsy's statsd and bitly's statsdaemon alike)
_UNSAFE = re.compile(r"[^a-zA-Z0-9\-_.]")

ON_PAGE = {"width": "600", "height": "240", "fgcolor": "555555"}
LARGE = {"width": "800", "height": "450", "fgcolor": "555555"}  # what a graph links to, nsqadmin's size
SPARKLINE = {"width": "120", "height": "20", "hideGrid": "true", "hideLegend": "true", "hideAxes": "true",
             "margin": "0", "fgcolor": "black"}


class Graph(NamedTuple):
    title: str
    image: str  # the image's URL
    large: str  # the same graph at full size, what a sparkline links to


def sanitize(name: str) -> str:
    """A topic or channel name as statsd stores it: spaces to ``_``, ``/`` to ``-``, anything else unsafe
    dropped (``#ephemeral`` becomes ``ephemeral``)."""
    return _UNSAFE.sub("", name.replace(" ", "_").replace("/", "-"))


@dataclass(frozen=True)
class Graphite:
    url: str  # graphite-web's base URL, without credentials
    authorization: str = field(repr=False)  # the header for the credentials --graphite-url gives ("" without)
    image_base: str  # where the browser fetches /render from: the Graphite URL, or the admin's own path
    prefix: str
    counter_format: str
    gauge_format: str
    interval: int  # seconds between nsqd's pushes

    @classmethod
    def from_options(cls, opts: Options) -> Graphite | None:
        """The graphs ``--graphite-url`` and the statsd flags describe; None without a Graphite URL."""
        if not opts.graphite_url:
            return None
        parts = urlsplit(opts.graphite_url)
        host = parts.hostname or ""
        netloc = (f"[{host}]" if ":" in host else host) + (f":{parts.port}" if parts.port else "")
        url = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
        authorization = ""
        if parts.username is not None:
            credentials = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
            authorization = "Basic " + base64.b64encode(credentials).decode()
        image_base = opts.base_path.rstrip("/") if opts.proxy_graphite else url
        return cls(url, authorization, image_base, opts.statsd_prefix, opts.statsd_counter_format, opts.statsd_gauge_format,
                   int(opts.statsd_interval))

    @property
    def headers(self) -> dict[str, str]:
        """What a request to Graphite carries."""
        return {"Authorization": self.authorization} if self.authorization else {}

    @property
    def image_origin(self) -> str:
        """Where the browser fetches the images from, when not the admin itself (for the page's CSP)."""
        if not self.image_base.startswith(("http://", "https://")):
            return ""
        parts = urlsplit(self.image_base)
        return f"{parts.scheme}://{parts.netloc}"

    # targets -----------------------------------------------------------------------------------------------

    def node_prefix(self, node: str) -> str:
        """``--statsd-prefix`` for ``node`` (``*``: every node), ending in a dot."""
        # as nsqd makes its key, then as statsd stores it (an IPv6 node's brackets dropped)
        key = node if node == "*" else sanitize(node.replace(".", "_").replace(":", "_"))
        prefix = self.prefix.replace("%s", key)
        return prefix if prefix.endswith(".") or not prefix else prefix + "."

    def series(self, stat: str, kind_of: str) -> str:
        """A statsd name as Graphite stores it: through the counter or gauge format of ``kind_of``'s kind."""
        form = self.counter_format if _KINDS[kind_of] == "counter" else self.gauge_format
        return form.replace("%s", stat) if form else stat

    def topic_target(self, topic: str, key: str, node: str = "*") -> str:
        return f"sumSeries({self.series(f'{self.node_prefix(node)}topic.{sanitize(topic)}.{key}', key)})"

    def channel_target(self, topic: str, channel: str, key: str, node: str = "*") -> str:
        stat = f"{self.node_prefix(node)}topic.{sanitize(topic)}.channel.{sanitize(channel)}.{key}"
        return f"sumSeries({self.series(stat, key)})"

    def node_target(self, node: str, key: str) -> str:
        target = self.series(f"{self.node_prefix(node)}mem.{key}", key)
        return f"movingAverage({target},45)" if key == "gc_runs" else target

    def counter_target(self) -> str:
        """Every channel's deliveries on every node: the counter page's rate."""
        stat = self.node_prefix("*") + "topic.*.channel.*.message_count"
        return f"sumSeries({self.series(stat, 'message_count')})"

    def e2e_targets(self, topic: str, channel: str, quantiles: list[float], node: str = "*") -> list[str]:
        """One series per quantile nsqd computes, averaged over the nodes, in milliseconds (nsqd sends
        nanoseconds)."""
        base = f"{self.node_prefix(node)}topic.{sanitize(topic)}"
        if channel:
            base += f".channel.{sanitize(channel)}"
        targets = []
        for quantile in quantiles:
            target = self.series(f"{base}.e2e_processing_latency_{quantile * 100:.0f}", "e2e_processing_latency")
            if node == "*":
                target = f"averageSeries({target})"
            targets.append(f"alias(scale({target},0.000001),\"p{quantile * 100:g}\")")
        return targets

    # images ------------------------------------------------------------------------------------------------

    def render_url(self, targets: list[str], key: str, window: str, size: dict[str, str]) -> str:
        """An image of ``targets`` over the last ``window``, up to an interval ago (the last interval is still
        being pushed; nsqadmin stops a minute ago, its default interval)."""
        summary = f"{self.interval}sec"
        if _KINDS.get(key) == "counter":
            targets = [f"scale({target},{1 / self.interval:.12g})" for target in targets]
        query = [("target", f'summarize({target},"{summary}","avg")') for target in targets]
        query += [*size.items(), ("bgcolor", "ff000000"), ("yMin", "0"), ("lineMode", "connected"),
                  ("drawNullAsZero", "false"), ("from", f"-{window}"), ("until", f"-{self.interval}sec")]
        return f"{self.image_base}/render?{urlencode(query)}"

    def graph(self, title: str, targets: list[str], key: str, window: str, sparkline: bool = False) -> Graph:
        shown = SPARKLINE if sparkline else {**ON_PAGE, "title": title}
        return Graph(title, self.render_url(targets, key, window, shown),
                     self.render_url(targets, key, window, {**LARGE, "title": title}))

    def topic_graphs(self, topic: str, window: str, quantiles: list[float]) -> list[Graph]:
        graphs = [self.graph("Depth (messages)", [self.topic_target(topic, "depth")], "depth", window),
                  self.graph("Rate (msg/s)", [self.topic_target(topic, "message_count")], "message_count", window)]
        if quantiles:
            graphs.append(self.graph("E2E latency (ms)", self.e2e_targets(topic, "", quantiles),
                                     "e2e_processing_latency", window))
        return graphs

    def channel_graphs(self, topic: str, channel: str, window: str, quantiles: list[float]) -> list[Graph]:
        graphs = [self.graph(title, [self.channel_target(topic, channel, key)], key, window) for title, key in (
            ("Depth (messages)", "depth"), ("In-Flight (messages)", "in_flight_count"),
            ("Deferred (messages)", "deferred_count"), ("Rate (msg/s)", "message_count"),
            ("Requeued (msg/s)", "requeue_count"), ("Timed out (msg/s)", "timeout_count"),
            ("Connections", "clients"))]
        if quantiles:
            graphs.append(self.graph("E2E latency (ms)", self.e2e_targets(topic, channel, quantiles),
                                     "e2e_processing_latency", window))
        return graphs

    def node_graphs(self, node: str, window: str) -> list[Graph]:
        return [self.graph(title, [self.node_target(node, key)], key, window) for title, key in (
            ("Memory (bytes)", "*_bytes"), ("GC pauses (µs)", "gc_pause_*"), ("GC runs (per s)", "gc_runs"),
            ("Heap objects", "heap_objects"))]

    def topic_sparklines(self, topic: str, window: str) -> list[Graph]:
        """The topics list's small depth and rate graphs."""
        return [self.graph(title, [self.topic_target(topic, key)], key, window, sparkline=True)
                for title, key in (("Depth", "depth"), ("Rate", "message_count"))]

    # the latest rate ---------------------------------------------------------------------------------------

    async def rate(self, session: aiohttp.ClientSession, target: str) -> str:
        """nsqadmin's ``/api/graphite?metric=rate``: a counter's last full interval per second (``%.2f``), or
        ``N/A`` when Graphite has no point for it. Raises ``GraphiteError``."""
        return (await self.rates(session, [target]))[0]

    async def rates(self, session: aiohttp.ClientSession, targets: list[str]) -> list[str]:
        """``rate`` of each target, asked in one request (the topics page has one a topic). The interval's points
        are summed: Graphite may keep finer points than nsqd pushes (nsqadmin takes the first, assuming one).
        Sent as a form, so that many targets fit."""
        if not targets:
            return []
        form = [("format", "json"), ("from", f"-{2 * self.interval}sec"), ("until", f"-{self.interval}sec"),
                *(("target", f'alias({target},"{index}")') for index, target in enumerate(targets))]
        headers = {**self.headers, "Content-Type": "application/x-www-form-urlencoded"}
        try:
            async with session.post(f"{self.url}/render", data=urlencode(form), headers=headers) as response:
                if response.status != 200:
                    raise GraphiteError(f"{self.url}/render answered {response.status}")
                answer = await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as error:
            raise GraphiteError(f"{self.url}/render: {error or type(error).__name__}") from error
        points = _points_by_target(answer)
        if points is None:
            raise GraphiteError(f"{self.url}/render answered something other than a list of series")
        return [_rate(points.get(str(index), []), self.interval) for index in range(len(targets))]


def _points_by_target(answer: object) -> dict[str, list[float]] | None:
    """The values of a ``format=json`` answer's series, by name; None when it is not such an answer."""
    if not isinstance(answer, list):
        return None
    points: dict[str, list[float]] = {}
    for series in answer:
        if not isinstance(series, dict) or not isinstance(series.get("datapoints"), list):
            return None
        values = points.setdefault(str(series.get("target")), [])
        for point in series["datapoints"]:
            if isinstance(point, list) and point and isinstance(point[0], (int, float)):
                values.append(float(point[0]))
    return points


def _rate(values: list[float], interval: int) -> str:
    total = sum(values)
    return "N/A" if not values or total < 0 else f"{total / interval:.2f}"


class GraphiteError(Exception):
    """Graphite did not answer a rate."""
