"""Inline SVG line charts for the admin's pages, drawn from the admin's own history: what the pages show unless
``--graphite-url`` names a Graphite to draw them (``graphite``), as nsqadmin's need one.

A chart is drawn at about the size it is shown (600 x 240, two to a row on a laptop's screen), so its labels read
at the size of the page's text: a title with the unit, a y axis of round values with grid lines, a time axis of
round times. Each chart carries its points and its plot's geometry (``data-*``), from which the pages' script shows
the value under the pointer and relabels the time axis in the viewer's time zone; without the script the times
read in UTC (the charts' section says which).

Pure: the same points give the same markup. Every piece of text is escaped, so the result can be placed in a
template as-is.
"""

from __future__ import annotations

import json
import math
import time

from markupsafe import Markup, escape

WIDTH, HEIGHT = 600, 240
# room for the title above, the time labels below and the value labels on the left
_TOP, _BOTTOM, _LEFT, _RIGHT = 34, 30, 60, 14
# the time axis' steps in seconds; the first that gives at most _MAX_TIME_LABELS labels is used
_TIME_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 3 * 3600, 6 * 3600, 12 * 3600, 86400)
_MAX_TIME_LABELS = 6
_VALUE_TICKS = 4


def line_chart_svg(title: str, points: list[tuple[float, float]], *, unit: str = "", width: int = WIDTH,
                   height: int = HEIGHT) -> Markup:
    """An SVG chart of ``(unix_ts, value)`` points, titled ``title (unit)``; the y axis starts at zero."""
    heading = f"{title} ({unit})" if unit else title
    plot = (_LEFT, _TOP, width - _RIGHT, height - _BOTTOM)
    points = sorted(points)
    attributes = ""
    if len(points) >= 2:
        span = ",".join(_plain(number) for number in (points[0][0], points[-1][0],
                                                        value_ticks(max(v for _, v in points))[-1]))
        data = json.dumps([[round(ts, 3), round(value, 3)] for ts, value in points], separators=(",", ":"))
        attributes = (f' data-unit="{escape(unit)}" data-plot="{",".join(map(str, plot))}" data-span="{span}" '
                      f'data-points="{escape(data)}"')
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="{escape(heading)}"{attributes}>',
             f"<title>{escape(heading)}</title>",
             f'<text class="chart-title" x="{_LEFT}" y="20">{escape(heading)}</text>',
             f'<rect class="chart-frame" x="{plot[0]}" y="{plot[1]}" width="{plot[2] - plot[0]}" '
             f'height="{plot[3] - plot[1]}"/>']
    if len(points) < 2:
        parts.append(f'<text class="chart-empty" x="{(plot[0] + plot[2]) / 2:g}" y="{(plot[1] + plot[3]) / 2:g}" '
                     f'text-anchor="middle" dominant-baseline="middle">no data yet</text>')
    else:
        parts.extend(_series(points, plot, unit))
    parts.append("</svg>")
    return Markup("".join(parts))


def _series(points: list[tuple[float, float]], plot: tuple[int, int, int, int], unit: str) -> list[str]:
    left, top, right, bottom = plot
    start, end = points[0][0], points[-1][0]
    ticks = value_ticks(max(value for _, value in points))
    y_max, span = ticks[-1], (end - start) or 1.0  # equal timestamps must not divide by zero

    def x_of(ts: float) -> float:
        return left + (ts - start) / span * (right - left)

    def y_of(value: float) -> float:
        return bottom - max(value, 0.0) / y_max * (bottom - top)

    parts = []
    for tick in ticks:
        y = y_of(tick)
        parts.append(f'<line class="chart-gridline" x1="{left}" x2="{right}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="chart-label" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{format_value(tick)}</text>")
    times, step = time_ticks(start, end)
    for ts in times:
        x = x_of(ts)
        # a label at either end of the axis lines up with it rather than overhanging the chart's edge
        anchor = "start" if x < left + 30 else "end" if x > right - 30 else "middle"
        seconds = ' data-seconds="1"' if step < 60 else ""
        parts.append(f'<text class="chart-label chart-time" x="{x:.1f}" y="{bottom + 18}" '
                     f'text-anchor="{anchor}" data-ts="{ts:.0f}"{seconds}>{_utc_clock(ts, step < 60)}</text>')
    line = " ".join(f"{x_of(ts):.1f},{y_of(value):.1f}" for ts, value in points)
    latest = f"latest: {format_exact(points[-1][1])}{' ' + unit if unit else ''}"
    parts += [
        f'<polygon class="chart-area" points="{left:.1f},{bottom:.1f} {line} {right:.1f},{bottom:.1f}"/>',
        f'<polyline class="chart-line" fill="none" points="{line}"/>',
        f'<g class="chart-pointer" visibility="hidden"><line x1="0" x2="0" y1="{top}" y2="{bottom}"/>'
        f'<circle r="4" cx="0" cy="0"/></g>',
        f'<text class="chart-readout" x="{right}" y="20" text-anchor="end">{escape(latest)}</text>',
    ]
    return parts


def value_ticks(peak: float) -> list[float]:
    """Round values from 0 to at least ``peak``, about ``_VALUE_TICKS`` steps of 1, 2, 2.5 or 5 times a power of
    ten."""
    if peak <= 0:
        return [0.0, 1.0]
    rough = peak / _VALUE_TICKS
    magnitude = 10 ** math.floor(math.log10(rough))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= rough)
    count = math.ceil(peak / step - 1e-9)
    return [round(step * i, 12) for i in range(count + 1)]


def time_ticks(start: float, end: float) -> tuple[list[float], int]:
    """The round times between ``start`` and ``end`` to label, and their step in seconds."""
    step = next((step for step in _TIME_STEPS if (end - start) / step <= _MAX_TIME_LABELS), _TIME_STEPS[-1])
    first = math.ceil(start / step) * step
    return [float(ts) for ts in range(int(first), int(end) + 1, step)], step


def format_value(value: float) -> str:
    """An axis label: short (``750``, ``2.5``, ``12k``, ``1.5M``)."""
    for size, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            return f"{value / size:.1f}".rstrip("0").rstrip(".") + suffix
    return f"{value:.2f}".rstrip("0").rstrip(".")


def format_exact(value: float) -> str:
    """A value to read: thousands separators, two decimals at most (``1,234``, ``0.25``)."""
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _plain(number: float) -> str:
    """A number as JavaScript reads it back, without an exponent: ``1700000130.5``, ``8``."""
    return f"{number:.3f}".rstrip("0").rstrip(".")


def _utc_clock(ts: float, seconds: bool) -> str:
    return time.strftime("%H:%M:%S" if seconds else "%H:%M", time.gmtime(ts))
