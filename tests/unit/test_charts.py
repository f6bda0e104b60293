"""The portal's SVG bar charts: one bar per point scaled to the tallest, values and labels
escaped, an empty series drawn as a frame, and a title for assistive technology."""

from __future__ import annotations

import re

from portal.charts import HEIGHT, Point, bar_chart


def _bars(svg: str) -> list[float]:
    return [float(h) for h in re.findall(r'<rect class="chart-bar"[^>]* height="([0-9.]+)"', svg)]


def test_each_point_is_a_bar_scaled_to_the_tallest() -> None:
    svg = str(bar_chart("c", "Claims per day", [Point("1 Dec", 10), Point("2 Dec", 5), Point("3 Dec", 0)]))
    tallest, half, none = _bars(svg)
    assert tallest > 0 and abs(half - tallest / 2) < 0.2 and none == 0
    assert tallest <= HEIGHT
    assert 'role="img"' in svg and '<title id="c-title">Claims per day</title>' in svg


def test_labels_and_titles_are_escaped() -> None:
    svg = str(bar_chart("x", "<script>", [Point("rule <b>&", 3)]))
    assert "<script>" not in svg and "&lt;script&gt;" in svg and "rule &lt;b&gt;&amp;" in svg


def test_an_empty_series_or_negative_values_draw_no_bars_and_no_error() -> None:
    assert _bars(str(bar_chart("e", "Nothing", []))) == []
    assert _bars(str(bar_chart("n", "Negative", [Point("a", -4)]))) == [0.0]


def test_crowded_labels_are_thinned() -> None:
    svg = str(bar_chart("m", "Many", [Point(f"d{i}", i) for i in range(60)]))
    assert len(re.findall(r'class="chart-label"', svg)) < 60
