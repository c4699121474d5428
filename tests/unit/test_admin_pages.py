"""The admin's templates, rendered with contexts built from real nsqadmin answers (tests/reference), and its charts."""

from __future__ import annotations

import base64
import copy
import functools
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from markupsafe import Markup

from services.admin import overview
from services.admin.charts import format_value, line_chart_svg, value_ticks
from services.admin.pages import BodyPreview, Pages, body_preview, commafy, duration_ns, format_datetime, nanos_to_human, percent, urlpart

REFERENCE = Path(__file__).resolve().parent.parent / "reference"
EVIL = "<script>alert(1)</script>"


def reference(name: str) -> Any:
    return json.loads((REFERENCE / f"nsqadmin_api_{name}.json").read_text())


@dataclass
class Entry:
    ts: float
    user: str
    remote_ip: str
    user_agent: str
    action: str
    topic: str
    channel: str = ""
    node: str = ""
    result: str = "ok"
    identity: str = ""


def common(active: str = "topics", **overrides: Any) -> dict[str, Any]:
    context: dict[str, Any] = {"active": active, "is_admin": True, "user": "", "message": "",
                               "lookupd_addresses": ["127.0.0.1:14161"], "title": "nsqadmin", "fragment": False,
                               "session_token": "T" * 43}
    context.update(overrides)
    return context


def topics_context(names: list[str], rates: dict[str, float] | None = None, topics: list[Any] | None = None,
                   sort: str = "topic", order: str = "") -> dict[str, Any]:
    """What the topics page hands its template: rows from topic names (and aggregated topics), sorted."""
    rows = overview.topic_rows(names, topics or [], rates or {})
    chosen = overview.sort_order({"sort": sort, "order": order} if order else {"sort": sort})
    return {"topics": overview.sort_rows(rows, *chosen), "order": chosen, "next_order": overview.next_order}


def queued_message(body: bytes, node: str = "127.0.0.1:14151", attempts: int = 0) -> dict[str, Any]:
    """A message as the admin's peek hands it to a page."""
    return {"node": node, "id": "0c1a2b3c4d5e6f70", "timestamp": 1_700_000_000_123_456_789, "attempts": attempts,
            "body": base64.b64encode(body).decode()}


def page_contexts() -> dict[str, dict[str, Any]]:
    """One realistic context per template."""
    counter_total = sum(c["message_count"] for c in reference("topic")["channels"])
    return {
        "topics.html": topics_context(reference("topics")["topics"], {"sample_topic": 1.5}, [reference("topic")]),
        "topic.html": {"topic": reference("topic"), "charts": [], "chart_window": "1h", "queued": [],
                       "peek_failed": ""},
        "channel.html": {"channel": reference("channel"), "charts": [], "chart_window": "1h",
                         "queued": [queued_message(b"hello")], "peek_failed": "", "dead_letters": [],
                         "dead_peek_failed": ""},
        "nodes.html": {"nodes": reference("nodes")["nodes"], "lookupd_count": 1},
        "node.html": {"node": reference("node")},
        "counter.html": {"total": counter_total},
        "lookup.html": {"inactive": {"old_topic": ["old_channel"]}},
        "audit.html": {"entries": [Entry(1_700_000_000.0, "alice", "10.0.0.1:5555", "curl/8", "pause_topic",
                                         "sample_topic")]},
        "error.html": {"error": "UPSTREAM_ERROR: Failed to query any nsqlookupd"},
    }


@functools.cache
def pages(base_path: str) -> Pages:
    # compiled templates are kept per environment; one per base path keeps the suite fast
    return Pages(base_path, "1.3.0")


def render(template: str, base_path: str = "/", **context: Any) -> str:
    full = page_contexts()[template]
    full.update(context)
    return pages(base_path).render(template, **common(**full))


def links(html: str) -> list[str]:
    return re.findall(r'(?:href|src|data-url|data-redirect)="([^"]*)"', html)


# --- every page --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("template", sorted(page_contexts()))
def test_every_page_has_nav_version_and_live_main(template: str) -> None:
    html = render(template)
    assert html.startswith("<!doctype html>")
    for label in ("Streams", "Nodes", "Counter", "Lookup", "Audit"):
        assert f">{label}</a>" in html
    assert "v1.3.0" in html
    assert '<main id="live"' in html
    assert '<dialog id="confirm">' in html and 'id="confirm-ok"' in html and ">Cancel<" in html


@pytest.mark.parametrize("template", sorted(page_contexts()))
def test_fragment_is_only_the_inside_of_main(template: str) -> None:
    full = render(template)
    fragment = render(template, fragment=True)
    assert "<html" not in fragment and "<nav class=\"nav\"" not in fragment and "<main" not in fragment
    assert "<dialog" not in fragment
    inner = full.split('<main id="live"', 1)[1].split(">", 1)[1].rsplit("</main>", 1)[0]
    assert fragment.strip() == inner.strip()


@pytest.mark.parametrize("template", sorted(page_contexts()))
def test_base_path_prefixes_every_link_and_asset(template: str) -> None:
    html = render(template, base_path="/admin", charts=[line_chart_svg("Depth", [(0, 1), (60, 2)])])
    found = links(html)
    assert found
    for link in found:
        assert link.startswith(("/admin/", "?window=", "?sort=")), link  # ? links keep the page's own path
    assert 'href="/admin/static/admin.css"' in html and 'src="/admin/static/admin.js"' in html


@pytest.mark.parametrize("template", sorted(page_contexts()))
def test_root_base_path_links_are_not_doubled(template: str) -> None:
    for link in links(render(template)):
        assert not link.startswith("//"), link


@pytest.mark.parametrize("template", sorted(page_contexts()))
def test_message_shows_the_warning_banner(template: str) -> None:
    html = render(template, message="WARNING: 1 of 2 nsqlookupd failed")
    assert '<div class="banner banner-warning" role="status">WARNING: 1 of 2 nsqlookupd failed</div>' in html
    assert "banner-warning" not in render(template)


@pytest.mark.parametrize("template", sorted(page_contexts()))
def test_non_admins_get_no_action_buttons(template: str) -> None:
    html = render(template, is_admin=False)
    assert "data-method" not in html
    assert "create-form" not in html


def test_admins_get_confirmed_action_buttons() -> None:
    for template in ("topic.html", "channel.html", "node.html", "lookup.html"):
        buttons = re.findall(r"<button [^>]*data-method=[^>]*>", render(template))
        assert buttons, template
        assert all("data-confirm=" in button for button in buttons), template


def test_active_nav_item_is_marked() -> None:
    html = render("nodes.html", active="nodes")
    assert '<a href="/nodes" class="active" aria-current="page">Nodes</a>' in html


def test_user_is_shown() -> None:
    assert '<span class="user" title="signed in user">alice</span>' in render("topics.html", user="alice")


# --- topics --------------------------------------------------------------------------------------------------------

def test_topics_lists_links_and_rates() -> None:
    html = render("topics.html", **topics_context(["sample_topic", "other"], {"sample_topic": 1234.5}))
    assert '<a href="/topics/sample_topic">sample_topic</a>' in html
    assert "1,234.50" in html
    assert "–" in html  # no history yet for "other"


def test_topics_empty() -> None:
    assert "No Topics Found" in render("topics.html", **topics_context([]))


def test_hostile_topic_name_is_escaped() -> None:
    html = render("topics.html", **topics_context([EVIL]))
    assert EVIL not in html and "&lt;script&gt;" in html
    topic = reference("topic")
    topic["topic_name"] = EVIL
    html = render("topic.html", topic=topic)
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "/api/topics/%3Cscript%3Ealert%281%29%3C%2Fscript%3E" in html


# --- topic --------------------------------------------------------------------------------------------------------

def test_topic_page_shows_totals_nodes_and_channels() -> None:
    html = render("topic.html")
    assert "Topic Message Queue" in html and "Channel Message Queues" in html
    assert '<td class="num">14</td>' in html  # total messages across both nodes
    assert '<td class="num">11</td>' in html and '<td class="num">3</td>' in html
    assert '<a href="/topics/sample_topic/sample_channel">sample_channel</a>' in html
    assert 'href="/nodes/127.0.0.1:14151"' in html and 'href="/nodes/127.0.0.1:14251"' in html
    assert "vm:14151" in html
    assert '<a href="/">Streams</a>' in html  # breadcrumb


def test_topic_admin_buttons() -> None:
    html = render("topic.html")
    assert ">Empty Queue</button>" in html and ">Delete Topic</button>" in html and ">Pause Topic</button>" in html
    assert 'data-body=\'{"action": "pause"}\'' in html
    assert 'data-confirm="Are you sure you want to pause sample_topic?"' in html
    assert 'data-redirect="/"' in html
    tombstone = re.search(r'<button [^>]*data-url="/api/nodes/127.0.0.1:14151"[^>]*>', html)
    assert tombstone and 'data-method="DELETE"' in tombstone[0] and '{"topic": "sample_topic"}' in tombstone[0]


def test_paused_topic_offers_unpause() -> None:
    topic = reference("topic")
    topic["paused"] = True
    topic["nodes"][0]["paused"] = True
    html = render("topic.html", topic=topic)
    assert ">UnPause Topic</button>" in html and ">Pause Topic</button>" not in html
    assert html.count('<span class="label label-paused">paused</span>') == 2


def test_topic_without_producers_points_to_lookup() -> None:
    topic = reference("topic")
    topic.update(nodes=[], channels=[])
    html = render("topic.html", topic=topic)
    assert "No producers exist for this topic" in html
    assert '<a href="/lookup">Lookup</a>' in html
    assert "data-method" not in html


def test_topic_without_channels_notice() -> None:
    topic = reference("topic")
    topic["channels"] = []
    html = render("topic.html", topic=topic)
    assert "No channels exist for this topic. Messages will queue at the topic until a channel is created." in html


def test_topic_e2e_percentiles() -> None:
    topic = reference("topic")
    percentiles = [{"quantile": 0.99, "average": 1_500_000, "min": 1_000_000, "max": 2_000_000, "count": 2},
                   {"quantile": 0.5, "average": 800_000, "min": 800_000, "max": 800_000, "count": 2}]
    topic["e2e_processing_latency"]["percentiles"] = percentiles
    topic["nodes"][0]["e2e_processing_latency"]["percentiles"] = [
        {"quantile": 0.99, "value": 1_500_000}, {"quantile": 0.5, "value": 800_000}]
    html = render("topic.html", topic=topic)
    assert ">99%</th>" in html and ">50%</th>" in html
    assert ">1.5ms</span>" in html and ">800.0us</span>" in html
    assert 'title="99%: min = 1.0ms, max = 2.0ms"' in html
    # the second node has no percentiles and keeps its columns, empty
    second_row = html.split("127.0.0.1:14251</a>)")[1].split("</tr>")[0]
    assert second_row.count("<td></td>") == 2


def test_topic_charts_and_window_links() -> None:
    chart = line_chart_svg("Depth", [(0, 1), (60, 2)])
    html = render("topic.html", charts=[chart], chart_window="24h")
    assert str(chart) in html
    assert '<a href="?window=1h">1h</a>' in html
    assert '<a href="?window=24h" class="active" aria-current="true">24h</a>' in html


# --- channel ------------------------------------------------------------------------------------------------------

def test_channel_page_shows_hosts_total_and_clients() -> None:
    html = render("channel.html")
    assert "Client Connections" in html
    assert "vm:36680" in html and "vm:36974" in html
    assert "nsq_tail/1.3.0 go-nsq/1.1.0" in html
    assert ">20s</td>" in html
    assert '<a href="/nodes/127.0.0.1:14151">127.0.0.1:14151</a>' in html
    total = html.split('<tr class="total">')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', total) == ["0", "0 + 0", "0", "1", "0", "0", "14", "2"]
    assert '<a href="/topics/sample_topic">sample_topic</a>' in html  # breadcrumb


def test_channel_admin_buttons() -> None:
    html = render("channel.html")
    assert ">Empty Queue</button>" in html and ">Delete Channel</button>" in html
    assert ">Pause Channel</button>" in html
    assert 'data-url="/api/topics/sample_topic/sample_channel"' in html
    assert 'data-redirect="/topics/sample_topic"' in html


def test_paused_channel_is_labelled() -> None:
    channel = reference("channel")
    channel["paused"] = True
    html = render("channel.html", channel=channel)
    assert '<span class="label label-paused">paused</span>' in html
    assert ">UnPause Channel</button>" in html


def test_client_attributes() -> None:
    channel = reference("channel")
    channel["clients"][0].update(sample_rate=25, tls=True, tls_version="TLS1.3", deflate=True, snappy=True,
                                 authed=True, auth_identity="bob", auth_identity_url="javascript:alert(1)",
                                 client_id="worker-7")
    channel["clients"][1].update(authed=True, auth_identity_url="https://auth.example/bob")
    html = render("channel.html", channel=channel)
    for label in ("Sampled 25%", ">TLS</span>", ">Deflate</span>", ">Snappy</span>", "Authed"):
        assert label in html
    assert "vm:36680 (worker-7)" not in html  # the port sits inside the span; client_id follows it
    assert "</span> (worker-7)" in html
    assert "javascript:" not in html
    assert '<a href="https://auth.example/bob">Authed</a>' in html


def test_channel_without_clients() -> None:
    channel = reference("channel")
    channel["clients"] = []
    assert "No clients connected to this channel." in render("channel.html", channel=channel)


def peek_table(html: str) -> str:
    return html.split('<table class="peek">', 1)[1].split("</table>", 1)[0]


def test_queued_messages_show_text_escaped_binary_as_hex_and_long_bodies_cut() -> None:
    queued = [queued_message(EVIL.encode()), queued_message(b"\x00\x01\xfe", node="127.0.0.1:14251", attempts=3),
              queued_message(b"x" * 500)]
    html = render("channel.html", queued=queued)
    table = peek_table(html)
    assert EVIL not in html and "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>" in table
    assert '<span class="label">hex</span> <code>00 01 fe</code>' in table
    assert f"<code>{'x' * 200}…</code>" in table and 'title="500 bytes"' in table
    assert '<a href="/nodes/127.0.0.1:14251">127.0.0.1:14251</a>' in table
    assert "<code>0c1a2b3c4d5e6f70</code>" in table
    assert format_datetime(1_700_000_000.123456789) in table
    assert re.findall(r'<td class="num">([^<]*)</td>', table) == ["0", "3", "0"]


def test_a_queue_with_nothing_queued_says_so_and_a_failed_peek_is_said_beside_it() -> None:
    assert "No messages queued." in render("channel.html", queued=[])
    html = render("topic.html", peek_failed="http://127.0.0.1:14151/topic/peek?topic=t: got response 404")
    section = html.split('<section class="queued">', 1)[1].split("</section>", 1)[0]
    assert "Queued at the Topic" in section
    assert "<strong>Could not peek:</strong> http://127.0.0.1:14151/topic/peek?topic=t: got response 404" in section
    assert "No messages queued." not in section and "banner-warning" not in html


@pytest.mark.parametrize(("body", "preview"), [
    (b"plain text", BodyPreview("plain text", False, 10)),
    (b"tab\tand\r\nlines", BodyPreview("tab\tand\r\nlines", False, 14)),
    ("caf\u00e9 \u2603".encode(), BodyPreview("caf\u00e9 \u2603", False, 9)),
    (b"\x1b[31mred", BodyPreview("1b 5b 33 31 6d 72 65 64", True, 8)),  # a control character
    (b"\xff\xfe", BodyPreview("ff fe", True, 2)),  # not UTF-8
    (b"", BodyPreview("", False, 0)),
    ("\u00e9".encode() * 300, BodyPreview("\u00e9" * 200 + "…", False, 600)),  # cut by characters, not bytes
    (bytes(100), BodyPreview(("00 " * 67)[:200] + "…", True, 100)),
])
def test_body_preview(body: bytes, preview: BodyPreview) -> None:
    assert body_preview(base64.b64encode(body).decode()) == preview


def test_a_large_body_is_previewed_from_its_start() -> None:
    body = b"a" * 1000 + b"\xff" * 1_000_000  # not UTF-8 only far past what is shown
    assert body_preview(base64.b64encode(body).decode()) == BodyPreview("a" * 200 + "…", False, 1_001_000)


# --- beyond NSQ: counters and settings nsqd reports only while a feature is in use --------------------------------

DEAD = {"max_attempts": 3, "dead_letter_count": 7, "dead_letter_depth": 5}
NEW_HEADERS = (">Expired</th>", ">Dead Letters</th>", ">Parked</th>", ">Max Attempts</th>", ">Dropped</th>",
               ">TTL</th>")


@pytest.mark.parametrize("template", ["topic.html", "channel.html", "node.html"])
def test_without_the_features_no_column_button_or_section_is_added(template: str) -> None:
    html = render(template)
    assert not any(header in html for header in NEW_HEADERS)
    assert "Dead Letters" not in html and "dead_letters" not in html and "mixed" not in html


def test_channel_page_shows_the_counters_beyond_nsq_in_its_columns() -> None:
    channel = reference("channel")
    channel.update(expired_count=1234, **DEAD, dropped_count=9)
    channel["nodes"][0].update(expired_count=1234, **DEAD, dropped_count=9)
    html = render("channel.html", channel=channel)
    headers = re.findall(r'<th class="num"[^>]*>([^<]*)</th>', html.split("<h2>Channel</h2>")[1].split("</thead>")[0])
    assert headers == ["Depth", "Memory + Disk", "In-Flight", "Deferred", "Requeued", "Timed Out", "Expired",
                       "Dead Letters", "Parked", "Max Attempts", "Dropped", "Messages", "Connections"]
    assert 'title="messages waiting in the dead-letter queue">Dead Letters</th>' in html
    total = html.split('<tr class="total">')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', total) == [
        "0", "0 + 0", "0", "1", "0", "0", "1,234", "5", "7", "3", "9", "14", "2"]
    # the node without those fields: counts 0, no limit
    other = html.split("127.0.0.1:14151</a>)")[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', other)[6:11] == ["0", "0", "0", "none", "0"]


def test_a_setting_the_nodes_do_not_share_shows_as_mixed() -> None:
    channel = reference("channel")
    channel.update(max_attempts=None, dead_letter_count=0, dead_letter_depth=0)
    html = render("channel.html", channel=channel)
    total = html.split('<tr class="total">')[1].split("</tr>")[0]
    assert '<td class="num"><span title="differs between nodes">mixed</span></td>' in total


def test_channel_with_dead_letters_offers_replay_and_discard_and_shows_them() -> None:
    channel = reference("channel")
    channel.update(DEAD)
    dead = [queued_message(b"poison", node="127.0.0.1:14251", attempts=3)]
    html = render("channel.html", channel=channel, dead_letters=dead)
    replay = re.search(r"<button [^>]*>Replay Dead Letters</button>", html)
    assert replay and 'data-body=\'{"action": "replay_dead_letters"}\'' in replay[0]
    assert 'data-confirm="Are you sure you want to replay the dead letters of sample_topic/sample_channel?"' in (
        replay[0])
    discard = re.search(r"<button [^>]*>Discard Dead Letters</button>", html)
    assert discard and 'data-body=\'{"action": "empty_dead_letters"}\'' in discard[0]
    assert 'data-confirm="Are you sure you want to discard the dead letters of' in discard[0]
    section = html.split("<h2>Dead Letters</h2>", 1)[1].split("</section>", 1)[0]
    assert "in the order a replay moves them back" in section
    assert "<code>poison</code>" in section and '<td class="num">3</td>' in section
    assert "Replay Dead Letters" not in render("channel.html", channel=channel, is_admin=False)
    # a limit and no dead letters: the actions, no section
    channel.update(dead_letter_count=0, dead_letter_depth=0)
    html = render("channel.html", channel=channel)
    assert ">Replay Dead Letters</button>" in html and "<h2>Dead Letters</h2>" not in html


def test_a_failed_dead_letter_peek_is_said_beside_them() -> None:
    channel = reference("channel")
    channel.update(DEAD)
    html = render("channel.html", channel=channel, dead_peek_failed="http://127.0.0.1:14151/channel/peek: 500")
    section = html.split("<h2>Dead Letters</h2>", 1)[1].split("</section>", 1)[0]
    assert "<strong>Could not peek:</strong> http://127.0.0.1:14151/channel/peek: 500" in section


def test_topic_page_shows_its_ttl_dropped_and_its_channels_dead_letters() -> None:
    topic = reference("topic")
    topic.update(ttl="1h0m0s", dropped_count=2000)
    topic["nodes"][0].update(ttl="1h0m0s", dropped_count=2000)
    topic["channels"][0].update(DEAD)
    html = render("topic.html", topic=topic)
    queue = html.split("<h2>Topic Message Queue</h2>")[1].split("</table>")[0]
    headers = re.findall(r'<th class="num"[^>]*>([^<]*)</th>', queue)
    assert headers == ["Depth", "Memory + Disk", "TTL", "Dropped", "Messages", "Channels"]
    total = queue.split('<tr class="total">')[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', total) == ["0", "0 + 0", "1h0m0s", "2,000", "14", "1"]
    other = queue.split("127.0.0.1:14251</a>)")[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', other)[2:4] == ["none", "0"]
    channels = html.split("<h2>Channel Message Queues</h2>")[1].split("</table>")[0]
    assert ">Dead Letters</th>" in channels and ">Expired</th>" not in channels
    row = channels.split("sample_channel</a>")[1].split("</tr>")[0]
    assert re.findall(r'<td class="num">([^<]*)</td>', row)[6:9] == ["5", "7", "3"]


def test_node_page_with_columns_beyond_nsq_still_fills_the_table() -> None:
    node = reference("node_with_tcp_producer")
    node["topics"][0]["channels"][0].update(DEAD)
    html = render("node.html", node=node)
    assert ">Dead Letters</th>" in html and ">Expired</th>" not in html
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", html, re.S):
        spans = [int(n) for n in re.findall(r'colspan="(\d+)"', row)]
        cells = len(re.findall(r"<t[dh][ >]", row))
        assert cells - len(spans) + sum(spans) == 11 + 3, row


# --- nodes --------------------------------------------------------------------------------------------------------

def test_nodes_page() -> None:
    html = render("nodes.html", active="nodes")
    assert "NSQd Nodes (2)" in html
    assert '<a href="/nodes/127.0.0.1:14151">127.0.0.1</a>' in html
    assert '<a href="/nodes/127.0.0.1:14251">127.0.0.1</a>' in html
    assert "<summary>1</summary>" in html and "127.0.0.1:14161/127.0.0.1:60076" in html
    assert "conns warn" not in html
    assert '<a class="label label-info" href="/topics/sample_topic">sample_topic</a>' in html


def test_nodes_warnings() -> None:
    nodes = reference("nodes")["nodes"]
    nodes[0].update(broadcast_address="::1", out_of_date=True)
    nodes[0]["topics"][0]["tombstoned"] = True
    html = render("nodes.html", nodes=nodes, lookupd_count=2)
    assert 'href="/nodes/%5B::1%5D:14151">[::1]</a>' in html
    assert html.count('class="conns warn"') == 2
    assert 'class="out-of-date"' in html
    assert '<a class="label label-warn" href="/topics/sample_topic" title="this topic is tombstoned' in html


# --- node ---------------------------------------------------------------------------------------------------------

def test_node_page() -> None:
    html = render("node.html", active="nodes")
    assert "<strong>1</strong> Topics" in html
    assert "<strong>7</strong> Messages" in html
    assert "<strong>1</strong> Clients" in html
    assert '<a href="/topics/sample_topic">sample_topic</a>' in html
    assert '<a href="/topics/sample_topic/sample_channel">sample_channel</a>' in html
    assert "vm:36680" in html and ">9s</td>" in html
    assert 'data-url="/api/nodes/127.0.0.1:14151"' in html
    assert '<a href="/nodes">Nodes</a>' in html


def test_node_page_nested_rows_fill_the_table() -> None:
    html = render("node.html", node=reference("node_with_tcp_producer"))
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", html, re.S)
    for row in rows:
        spans = [int(n) for n in re.findall(r'colspan="(\d+)"', row)]
        cells = len(re.findall(r"<t[dh][ >]", row))
        assert cells - len(spans) + sum(spans) == 11, row


def test_node_without_topics() -> None:
    node = copy.deepcopy(reference("node"))
    node.update(topics=[], total_messages=0, total_clients=0)
    assert "No topics exist on this node." in render("node.html", node=node)


# --- counter, lookup, audit, error ----------------------------------------------------------------------------------

def test_counter_page() -> None:
    html = render("counter.html", base_path="/admin", total=1234567)
    assert re.search(r'<div id="counter"[^>]*data-url="/admin/api/counter"[^>]*>1,234,567</div>', html)
    assert 'data-refresh="0"' in html  # the counter polls on its own schedule
    assert "Messages Processed" in html


def test_counter_total_from_sample() -> None:
    assert ">14</div>" in render("counter.html")


def test_lookup_page() -> None:
    html = render("lookup.html", active="lookup")
    assert "<code>127.0.0.1:14161</code>" in html
    topic_delete = re.search(r'<button [^>]*data-url="/api/topics/old_topic"[^>]*>', html)
    channel_delete = re.search(r'<button [^>]*data-url="/api/topics/old_topic/old_channel"[^>]*>', html)
    assert topic_delete and 'data-method="DELETE"' in topic_delete[0] and "data-confirm=" in topic_delete[0]
    assert channel_delete and 'data-method="DELETE"' in channel_delete[0] and "data-confirm=" in channel_delete[0]
    assert "Create Topic/Channel" in html
    assert 'data-url="/api/topics"' in html and 'name="topic"' in html and 'name="channel"' in html


def test_lookup_without_lookupds() -> None:
    html = render("lookup.html", lookupd_addresses=[], inactive={})
    assert "nsqadmin is not configured with nsqlookupd hosts" in html
    assert "Create Topic/Channel" not in html


def test_lookup_without_inactive_topics() -> None:
    assert "No inactive topics or channels." in render("lookup.html", inactive={})


def test_audit_page_newest_first() -> None:
    older = Entry(1_700_000_000.0, "alice", "10.0.0.1:5555", "curl/8", "pause_topic", "sample_topic")
    newer = Entry(1_700_000_060.0, "", "10.0.0.2:5555", "Mozilla", "delete_channel", "sample_topic",
                  "sample_channel", "", "UPSTREAM_ERROR: boom", identity="ops-console")
    html = render("audit.html", active="audit", entries=[older, newer])
    assert "<td>ops-console</td>" in html  # the auth server's name for the admin's secret
    assert html.index("delete_channel") < html.index("pause_topic")
    assert format_datetime(1_700_000_060.0) in html and format_datetime(1_700_000_000.0) in html
    assert '<span class="label label-error">UPSTREAM_ERROR: boom</span>' in html
    assert '<tr class="failed">' in html


def test_audit_empty() -> None:
    assert "No actions recorded yet" in render("audit.html", entries=[])


def test_error_page() -> None:
    html = render("error.html", error="UPSTREAM_ERROR: " + EVIL)
    assert '<div class="banner banner-error" role="alert">UPSTREAM_ERROR: &lt;script&gt;' in html
    assert '<nav class="nav">' in html


# --- helpers ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("base_path", "path", "expected"), [
    ("/", "/topics", "/topics"), ("/", "/", "/"), ("/admin", "/topics", "/admin/topics"),
    ("/admin", "/static/admin.js", "/admin/static/admin.js"), ("/admin", "/", "/admin/"),
    ("/admin", "nodes", "/admin/nodes"),
])
def test_url(base_path: str, path: str, expected: str) -> None:
    assert Pages(base_path, "1.3.0").url(path) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (1234567, "1,234,567"), (0, "0"), (999, "999"), (None, "0"), (12.0, "12"), (1234.5, "1,234.50"),
])
def test_commafy(value: object, expected: str) -> None:
    assert commafy(value) == expected


@pytest.mark.parametrize(("nanos", "expected"), [
    (20_000_000_000, "20s"), (3_723_000_000_000, "1h2m3s"), (240_000_000_000, "4m0s"),
    (3_600_000_000_000, "1h0m0s"), (0, "0s"), (500_000_000, "500.0ms"),
])
def test_duration_ns(nanos: int, expected: str) -> None:
    assert duration_ns(nanos) == expected


@pytest.mark.parametrize(("nanos", "expected"), [
    (1_500_000, "1.5ms"), (800_000, "800.0us"), (2_500_000_000, "2.5s"), (900, "900.0ns"), (1_000_000, "1.0ms"),
])
def test_nanos_to_human(nanos: int, expected: str) -> None:
    assert nanos_to_human(nanos) == expected


@pytest.mark.parametrize(("fraction", "expected"), [(0.99, "99%"), (0.999, "99.9%"), (0.5, "50%"), (1.0, "100%")])
def test_percent(fraction: float, expected: str) -> None:
    assert percent(fraction) == expected


@pytest.mark.parametrize(("segment", "expected"), [
    ("sample_topic", "sample_topic"), ("t#ephemeral", "t%23ephemeral"), ("a/b", "a%2Fb"),
    ("127.0.0.1:4151", "127.0.0.1:4151"), ("a b?", "a%20b%3F"),
])
def test_urlpart(segment: str, expected: str) -> None:
    assert urlpart(segment) == expected


def test_ephemeral_topic_links_are_encoded() -> None:
    html = render("topics.html", **topics_context(["t#ephemeral"]))
    assert '<a href="/topics/t%23ephemeral">t#ephemeral</a>' in html


def test_undefined_context_fails_loudly() -> None:
    context = common()
    with pytest.raises(Exception, match="topics"):
        Pages("/", "1.3.0").render("topics.html", **context)


def test_static_assets_exist() -> None:
    static = Path(__file__).resolve().parents[2] / "services" / "admin" / "static"
    script = (static / "admin.js").read_text()
    assert "X-Live-Fragment" in script and "application/vnd.nsq; version=1.0" in script
    assert (static / "admin.css").stat().st_size > 0


# --- charts -------------------------------------------------------------------------------------------------------

def polyline(svg: str) -> list[tuple[float, float]]:
    match = re.search(r'<polyline [^>]*points="([^"]*)"', svg)
    assert match
    return [(float(x), float(y)) for x, y in (pair.split(",") for pair in match[1].split())]


def test_chart_is_markup_svg_at_about_the_size_it_is_shown() -> None:
    svg = line_chart_svg("Depth", [(1_700_000_000, 0), (1_700_000_060, 10)], unit="messages")
    assert isinstance(svg, Markup)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert 'viewBox="0 0 600 240"' in svg
    assert ">Depth (messages)</text>" in svg  # the unit in the title


@pytest.mark.parametrize("points", [[], [(1_700_000_000.0, 5.0)]])
def test_chart_without_enough_points(points: list[tuple[float, float]]) -> None:
    svg = line_chart_svg("Depth", points)
    assert "no data yet" in svg and "<polyline" not in svg and "data-points" not in svg


def test_chart_points_scale_into_the_plot() -> None:
    points = [(1_700_000_000.0 + 10 * i, float(v)) for i, v in enumerate([0, 5, 10, 5, 0])]
    svg = line_chart_svg("Rate", points, width=300, height=100)
    coords = polyline(svg)
    assert len(coords) == 5
    xs = [x for x, _ in coords]
    assert xs == sorted(xs) and all(0 <= x <= 300 for x in xs)
    ys = [y for _, y in coords]
    assert all(0 <= y <= 100 for y in ys)
    assert ys[2] == min(ys) and ys[0] == ys[4] == max(ys)  # the peak is highest on screen


def test_chart_value_axis_has_round_ticks_and_the_latest_value_reads_exactly() -> None:
    start = 1_700_000_000.0
    svg = line_chart_svg("Rate", [(start, 1.0), (start + 3600, 1234.0)], unit="msg/s")
    labels = re.findall(r'<text class="chart-label" [^>]*text-anchor="end">([^<]*)</text>', svg)
    assert labels == ["0", "500", "1k", "1.5k"]
    assert svg.count('class="chart-gridline"') == 4
    assert ">latest: 1,234 msg/s</text>" in svg


def test_chart_time_axis_has_round_times_in_utc_with_their_timestamps() -> None:
    start = 1_700_000_130.0  # 22:15:30 UTC
    svg = line_chart_svg("Rate", [(start, 1.0), (start + 3600, 2.0)])
    times = re.findall(r'data-ts="([\d.]+)">([^<]*)</text>', svg)
    assert [label for _, label in times] == ["22:20", "22:30", "22:40", "22:50", "23:00", "23:10"]
    assert all(float(ts) % 600 == 0 and label == time.strftime("%H:%M", time.gmtime(float(ts))) for ts, label in times)



def test_chart_carries_its_points_and_geometry_for_the_pointer() -> None:
    svg = line_chart_svg("Depth", [(100.0, 2.0), (160.0, 7.5)], unit="messages")
    found = re.search(r'data-points="([^"]*)"', svg)
    assert found is not None, svg
    points = json.loads(found[1].replace("&#34;", '"'))
    assert points == [[100.0, 2.0], [160.0, 7.5]]
    assert 'data-unit="messages"' in svg and 'data-span="100,160,8"' in svg and 'data-plot="60,34,586,210"' in svg
    assert '<g class="chart-pointer" visibility="hidden">' in svg


@pytest.mark.parametrize(("peak", "ticks"), [
    (0.0, [0.0, 1.0]), (1.0, [0, 0.25, 0.5, 0.75, 1]), (7.0, [0, 2, 4, 6, 8]), (10.0, [0, 2.5, 5, 7.5, 10]),
    (118.0, [0, 50, 100, 150]), (1234.0, [0, 500, 1000, 1500]), (0.03, [0, 0.01, 0.02, 0.03]),
])
def test_value_ticks_are_round(peak: float, ticks: list[float]) -> None:
    assert value_ticks(peak) == ticks


@pytest.mark.parametrize(("value", "text"), [(0, "0"), (2.5, "2.5"), (750, "750"), (1000, "1k"), (12_000, "12k"),
                                             (1_500_000, "1.5M"), (0.125, "0.12")])
def test_axis_labels_are_short(value: float, text: str) -> None:
    assert format_value(value) == text


def test_chart_sorts_points_and_handles_flat_or_equal_times() -> None:
    assert polyline(line_chart_svg("x", [(2.0, 1.0), (1.0, 3.0)]))[0][0] < 60 + 10
    flat = line_chart_svg("x", [(1.0, 0.0), (1.0, 0.0)])
    assert "nan" not in flat and "inf" not in flat


def test_chart_escapes_text() -> None:
    svg = line_chart_svg(EVIL, [(0.0, 1.0), (60.0, 2.0)], unit='<b>"u"</b>')
    assert "<script>" not in svg and "<b>" not in svg
    assert "&lt;script&gt;" in svg and "&#34;u&#34;" in svg


def test_chart_is_deterministic() -> None:
    points = [(1_700_000_000.0 + i, float(i * i)) for i in range(50)]
    assert line_chart_svg("Depth", points) == line_chart_svg("Depth", list(points))
