"""The admin's server-rendered pages: the jinja2 environment, the URL helper that applies ``--base-path``, the
filters the templates format numbers with (named and behaving like nsqadmin's template helpers),
``body_preview``, how a peeked message's body is shown, and the columns beyond NSQ's that a table shows only when
some row has them.

Templates only format what the routes hand them (the ``/api/...`` JSON shapes); autoescaping is on and an undefined
name is an error rather than an empty string, so a renamed field fails a test instead of blanking a column.
"""

from __future__ import annotations

import base64
import binascii
import codecs
import re
import time
from typing import Any, Iterable, NamedTuple
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined

from .graphite import GRAPH_WINDOWS

_NANOS_PER_SECOND = 1_000_000_000
PREVIEW_CHARS = 200
# control characters but tab and line breaks: a body with them is not text to print
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


class Column(NamedTuple):
    """A column beyond NSQ's: a counter, or a setting (``setting``: a row without it has none)."""

    key: str
    header: str
    title: str
    setting: bool = False


# what nsqd's /stats has only while the feature behind it is in use (README: Dead letters, Message TTL, Bounded disk
# queues, Retention and replay); a page without those features looks as nsqadmin's
CHANNEL_COLUMNS = (
    Column("expired_count", "Expired", "messages past their TTL when taken: dropped (parked with an attempts limit)"),
    Column("dead_letter_depth", "Dead Letters", "messages waiting in the dead-letter queue"),
    Column("dead_letter_count", "Parked", "messages parked in the dead-letter queue so far"),
    Column("max_attempts", "Max Attempts", "deliveries before a message is parked", setting=True),
    Column("dropped_count", "Dropped", "oldest messages dropped at the --max-bytes-per-queue cap"),
)
TOPIC_COLUMNS = (
    Column("ttl", "TTL", "messages older than this are never delivered", setting=True),
    Column("dropped_count", "Dropped", "oldest messages dropped at the --max-bytes-per-queue cap"),
    Column("retention_time", "Retention", "how long the topic keeps what it published, for rewinds", setting=True),
    Column("retained_count", "Retained", "messages the topic keeps for rewinds"),
)


def present_columns(rows: Iterable[dict[str, Any]], columns: tuple[Column, ...]) -> list[Column]:
    """The ``columns`` some row has."""
    rows = list(rows)
    return [column for column in columns if any(column.key in row for row in rows)]


class Pages:
    """Renders the templates in ``services/admin/templates`` for one base path and version."""

    def __init__(self, base_path: str, version: str) -> None:
        self.base_path = base_path
        self.env = Environment(loader=PackageLoader("services.admin", "templates"), autoescape=True,
                               undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
        self.env.globals.update(url=self.url, version=version, present_columns=present_columns,
                                channel_columns=CHANNEL_COLUMNS, topic_columns=TOPIC_COLUMNS,
                                graph_windows=GRAPH_WINDOWS,
                                # what a page shows of Graphite when the admin has none (web_ui gives the rest)
                                graphite=False, graphs=(), sparklines={})
        self.env.filters.update(commafy=commafy, duration_ns=duration_ns, percent=percent,
                                nanos_to_human=nanos_to_human, urlpart=urlpart, datetime=format_datetime,
                                body_preview=body_preview)

    def url(self, path: str) -> str:
        """``path`` (absolute within the admin) under the base path: ``/topics`` -> ``/admin/topics``."""
        if not path.startswith("/"):
            path = "/" + path
        return self.base_path.rstrip("/") + path

    def render(self, template: str, **context: object) -> str:
        return self.env.get_template(template).render(**context)


def commafy(value: object) -> str:
    """``1234567`` -> ``1,234,567``; a missing value counts as 0, as in nsqadmin."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}"
    if isinstance(value, (int, float)):
        return f"{int(value):,}"
    return "0" if value is None or value == "" else str(value)


def duration_ns(nanos: float) -> str:
    """A Go duration in nanoseconds as Go prints whole seconds: ``1h2m3s``, ``4m0s``, ``20s``."""
    if nanos < _NANOS_PER_SECOND:
        return "0s" if nanos <= 0 else nanos_to_human(nanos)
    minutes, seconds = divmod(int(nanos // _NANOS_PER_SECOND), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes}m{seconds}s"
    return f"{minutes}m{seconds}s" if minutes else f"{seconds}s"


def nanos_to_human(nanos: float) -> str:
    """An e2e latency as nsqadmin's server templates printed it: one decimal, the largest unit that fits."""
    for size, suffix in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if nanos >= size:
            return f"{nanos / size:.1f}{suffix}"
    return f"{float(nanos):.1f}ns"


def percent(fraction: float) -> str:
    """``0.99`` -> ``99%``, ``0.999`` -> ``99.9%`` (quantiles and shares are fractions in the JSON)."""
    return f"{round(fraction * 100, 2):g}%"


def urlpart(segment: object) -> str:
    """One path segment percent-encoded (``#ephemeral`` topics, ``/`` never passes); ``host:port`` stays readable."""
    return quote(str(segment), safe=":@")


def format_datetime(ts: float) -> str:
    """Unix seconds as local ``YYYY-MM-DD HH:MM:SS``."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


class BodyPreview(NamedTuple):
    text: str  # ends with "…" when cut
    binary: bool  # shown as hex
    size: int  # bytes


def body_preview(body: str, limit: int = PREVIEW_CHARS) -> BodyPreview:
    """A message body as nsqd's peek answers it (base64), as the admin shows it: text if it is UTF-8 without
    control characters (tabs and line breaks are text), else hex; cut at ``limit`` characters. Only the start of
    a large body, what can be shown, is looked at."""
    try:
        raw = base64.b64decode(body, validate=True)
    except binascii.Error:
        raw = body.encode()  # not what nsqd answers: shown as it came
    head = raw[:4 * limit + 4]  # enough bytes for more than ``limit`` characters
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) == len(raw))
        binary = _CONTROL.search(text) is not None
    except UnicodeDecodeError:
        binary = True
    if binary:
        text = raw[:limit].hex(" ")
    return BodyPreview(text[:limit] + "…" if len(text) > limit else text, binary, len(raw))
