"""Chart geometry for the console, computed here and drawn as inline SVG by the templates.

Pure functions of the numbers: no JavaScript charting library, nothing to install, and the
shapes are unit-tested like any other code.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bar:
    """One bar: its box in the chart's coordinates, and what its tooltip says."""

    x: float
    y: float
    width: float
    height: float
    label: str
    value: int


@dataclass(frozen=True, slots=True)
class BarChart:
    """Bars scaled so the tallest fills `height`; `peak` is the value at the top."""

    width: int
    height: int
    bars: tuple[Bar, ...]
    peak: int


@dataclass(frozen=True, slots=True)
class Meter:
    """How much of a limit is used: `limit` None means the plan sets none."""

    name: str
    used: int
    limit: int | None

    @property
    def percent(self) -> float:
        """Share of the limit used, 0-100 (capped), 0 without a limit."""
        if not self.limit:
            return 100.0 if self.limit == 0 and self.used else 0.0
        return min(100.0, 100.0 * self.used / self.limit)

    @property
    def level(self) -> str:
        """`ok`, `warn` (80% and over) or `full` (at or over the limit): the bar's colour."""
        if self.limit is None:
            return "ok"
        if self.used >= self.limit:
            return "full"
        return "warn" if self.percent >= 80 else "ok"


def bar_chart(
    points: Sequence[tuple[str, int]], width: int = 720, height: int = 160, gap: float = 2.0
) -> BarChart:
    """Equal-width bars for (label, value) points, left to right; an empty chart if none."""
    peak = max((value for _, value in points), default=0)
    if not points:
        return BarChart(width, height, (), 0)
    step = width / len(points)
    bars = tuple(
        Bar(
            x=round(i * step + gap / 2, 2),
            y=round(height - _scaled(value, peak, height), 2),
            width=round(max(step - gap, 1.0), 2),
            height=round(_scaled(value, peak, height), 2),
            label=label,
            value=value,
        )
        for i, (label, value) in enumerate(points)
    )
    return BarChart(width, height, bars, peak)


def _scaled(value: int, peak: int, height: int) -> float:
    return 0.0 if peak <= 0 else height * value / peak


@dataclass(frozen=True, slots=True)
class LineChart:
    """A polyline through (x, y) points, scaled to fill the box; y grows upwards."""

    width: int
    height: int
    points: str  # the SVG `points` attribute
    x_max: float
    y_min: float
    y_max: float
    last: float | None  # the newest y, to print beside the chart


def line_chart(
    points: Sequence[tuple[float, float]], width: int = 720, height: int = 160, pad: float = 4.0
) -> LineChart:
    """Scale points so the lowest y sits at the bottom and the highest at the top."""
    if not points:
        return LineChart(width, height, "", 0.0, 0.0, 0.0, None)
    xs, ys = [x for x, _ in points], [y for _, y in points]
    x_min, x_max, y_min, y_max = min(xs), max(xs), min(ys), max(ys)
    x_span, y_span = (x_max - x_min) or 1.0, (y_max - y_min) or 1.0
    inner_w, inner_h = width - 2 * pad, height - 2 * pad
    coords = " ".join(
        f"{pad + inner_w * (x - x_min) / x_span:.1f},{pad + inner_h * (y_max - y) / y_span:.1f}"
        for x, y in points
    )
    return LineChart(width, height, coords, x_max, y_min, y_max, ys[-1])
