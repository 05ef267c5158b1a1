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
