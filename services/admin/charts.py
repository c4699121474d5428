"""Inline SVG line charts for the admin's pages, drawn from the admin's own history (nsqadmin draws graphite images
instead, which needs a graphite server this admin does not require).

Pure: the same points give the same markup (time labels follow the process's local time zone, as the rest of the
pages do). Every piece of text is escaped, so the result can be placed in a template as-is.
"""

from __future__ import annotations

import time

from markupsafe import Markup, escape

# room for the title above, the time labels below and the y labels on the left
_TOP = 22
_BOTTOM = 20
_LEFT = 56
_RIGHT = 10


def line_chart_svg(title: str, points: list[tuple[float, float]], *, unit: str = "", width: int = 600,
                   height: int = 160) -> Markup:
    """An SVG chart of ``(unix_ts, value)`` points; the y axis starts at zero and ends at the largest value."""
    parts = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
             f"<title>{escape(title)}</title>",
             f'<text class="chart-title" x="{_LEFT}" y="14">{escape(title)}</text>']
    plot = (_LEFT, _TOP, width - _RIGHT, height - _BOTTOM)
    parts.append(f'<rect class="chart-frame" x="{plot[0]}" y="{plot[1]}" width="{plot[2] - plot[0]}" '
                 f'height="{plot[3] - plot[1]}"/>')
    if len(points) < 2:
        parts.append(f'<text class="chart-empty" x="{(plot[0] + plot[2]) / 2:g}" y="{(plot[1] + plot[3]) / 2:g}" '
                     f'text-anchor="middle" dominant-baseline="middle">no data yet</text>')
    else:
        parts.extend(_series(sorted(points), plot, unit))
    parts.append("</svg>")
    return Markup("".join(parts))


def _series(points: list[tuple[float, float]], plot: tuple[int, int, int, int], unit: str) -> list[str]:
    left, top, right, bottom = plot
    start, end = points[0][0], points[-1][0]
    peak = max(value for _, value in points)
    # a flat zero line still needs a scale; and equal timestamps must not divide by zero
    y_max = peak if peak > 0 else 1.0
    span = (end - start) or 1.0

    def xy(ts: float, value: float) -> str:
        x = left + (ts - start) / span * (right - left)
        y = bottom - max(value, 0.0) / y_max * (bottom - top)
        return f"{x:.1f},{y:.1f}"

    line = " ".join(xy(ts, value) for ts, value in points)
    area = f"{left:.1f},{bottom:.1f} {line} {right:.1f},{bottom:.1f}"
    suffix = f" {unit}" if unit else ""
    label_y = bottom + 14
    return [
        f'<polygon class="chart-area" points="{area}"/>',
        f'<polyline class="chart-line" fill="none" points="{line}"/>',
        f'<text class="chart-label" x="{left - 4}" y="{top + 4}" text-anchor="end">'
        f"{escape(format_value(peak) + suffix)}</text>",
        f'<text class="chart-label" x="{left - 4}" y="{bottom}" text-anchor="end">0</text>',
        f'<text class="chart-label" x="{left}" y="{label_y}">{_clock(start)}</text>',
        f'<text class="chart-label" x="{right}" y="{label_y}" text-anchor="end">{_clock(end)}</text>',
    ]


def format_value(value: float) -> str:
    """Compact axis label: thousands separators for large values, two decimals at most for small ones."""
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _clock(ts: float) -> str:
    return time.strftime("%H:%M", time.localtime(ts))
