"""Chart geometry: bars scale to the tallest, meters colour by how much of a limit is used."""

from __future__ import annotations

import itertools
import math

from loraplex.web.charts import Meter, bar_chart, line_chart


def test_the_tallest_bar_fills_the_chart_and_the_others_scale_to_it() -> None:
    chart = bar_chart([("00:00", 50), ("01:00", 100), ("02:00", 0)], width=300, height=100)
    heights = [bar.height for bar in chart.bars]
    assert heights == [50.0, 100.0, 0.0]
    assert [bar.y + bar.height for bar in chart.bars] == [100.0] * 3  # all stand on the axis
    assert chart.peak == 100


def test_bars_share_the_width_left_to_right_without_overlapping() -> None:
    bars = bar_chart([(str(i), 1) for i in range(24)], width=720).bars
    assert all(a.x + a.width < b.x for a, b in itertools.pairwise(bars))
    assert bars[-1].x + bars[-1].width <= 720


def test_no_points_or_no_traffic_draws_no_bars_above_the_axis() -> None:
    assert bar_chart([]).bars == ()
    assert all(bar.height == 0 for bar in bar_chart([("a", 0), ("b", 0)]).bars)


def test_meters_warn_from_80_percent_and_are_full_at_the_limit() -> None:
    assert (Meter("t", 10, 100).level, Meter("t", 80, 100).level) == ("ok", "warn")
    assert Meter("t", 100, 100).level == Meter("t", 150, 100).level == "full"
    assert Meter("t", 150, 100).percent == 100.0


def test_a_meter_without_a_limit_is_never_full() -> None:
    meter = Meter("t", 10**9, None)
    assert (meter.level, meter.percent) == ("ok", 0.0)


def test_a_loss_curve_spans_the_box_with_the_highest_loss_at_the_top() -> None:
    chart = line_chart([(1, 2.0), (2, 1.0), (3, 0.5)], width=108, height=58, pad=4)
    coords = [tuple(map(float, p.split(","))) for p in chart.points.split()]
    expected = [(4.0, 4.0), (54.0, 4.0 + 50 * (1.0 / 1.5)), (104.0, 54.0)]
    assert all(
        math.isclose(a, b, abs_tol=0.05)
        for p, q in zip(coords, expected, strict=True)
        for a, b in zip(p, q, strict=True)
    )
    assert (chart.y_min, chart.y_max, chart.last) == (0.5, 2.0, 0.5)


def test_one_point_or_none_still_draws() -> None:
    assert line_chart([]).points == ""
    assert line_chart([(5, 1.0)]).points.count(",") == 1
