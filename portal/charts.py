"""Server-rendered bar charts: small SVG, no script (the template marks it safe: every text
in it is escaped here), each drawn from the same points as the
table the page shows beside it for screen readers (the chart itself is an image with a title)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

__all__ = ["BAR_GAP", "HEIGHT", "WIDTH", "Point", "bar_chart"]

WIDTH = 640  # SVG user units; the chart scales to its container
HEIGHT = 200
BAR_GAP = 4  # units between two bars
_AXIS = 32  # units below the bars for the labels
_TOP = 24  # units above the tallest bar for its value


@dataclass(frozen=True)
class Point:
    label: str
    value: float


def bar_chart(chart_id: str, title: str, points: Sequence[Point], *, unit: str = "") -> str:
    """A bar per point, its value above it and its label below (every other label when they
    would crowd). Negative values are drawn as zero; no points draws an empty frame."""
    top = max((p.value for p in points), default=0.0)
    inner = HEIGHT - _AXIS - _TOP
    width = (WIDTH - BAR_GAP * (len(points) + 1)) / max(len(points), 1)
    step = 1 if width >= 90 else 2 if width >= 40 else 4 if width >= 16 else 8  # labels ~18 units high
    parts = [
        f'<svg class="chart" id="{escape(chart_id)}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-labelledby="{escape(chart_id)}-title" preserveAspectRatio="xMidYMid meet">',
        f'<title id="{escape(chart_id)}-title">{escape(title)}</title>',
        f'<line class="chart-axis" x1="0" y1="{HEIGHT - _AXIS}" x2="{WIDTH}" y2="{HEIGHT - _AXIS}"/>',
    ]
    for i, point in enumerate(points):
        value = max(point.value, 0.0)
        height = 0.0 if top <= 0 else inner * value / top
        x = BAR_GAP + i * (width + BAR_GAP)
        y = HEIGHT - _AXIS - height
        shown = f"{value:,.0f}{unit}" if value == int(value) else f"{value:,.1f}{unit}"
        parts.append(f'<rect class="chart-bar" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" '
                     f'height="{height:.1f}"><title>{escape(point.label)}: {escape(shown)}</title></rect>')
        if value > 0:
            parts.append(f'<text class="chart-value" x="{x + width / 2:.1f}" y="{y - 4:.1f}" '
                         f'text-anchor="middle">{escape(shown)}</text>')
        if i % step == 0:
            parts.append(f'<text class="chart-label" x="{x + width / 2:.1f}" y="{HEIGHT - 8}" '
                         f'text-anchor="middle">{escape(point.label)}</text>')
    parts.append("</svg>")
    return "".join(parts)  # safe to mark safe in a template: every interpolated text is escaped
