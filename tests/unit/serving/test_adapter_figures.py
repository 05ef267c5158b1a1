"""Per-adapter figures stay bounded and keep the busiest adapters."""

from __future__ import annotations

from loraplex.serving.live.adapter_figures import AdapterFigures, quantile


def test_a_full_table_keeps_the_busy_adapters_and_lets_one_offs_churn() -> None:
    figures = AdapterFigures(max_adapters=3)
    for _ in range(5):
        figures.first_token("busy", 0.1)
        figures.first_token("steady", 0.2)
    for one_off in range(100):
        figures.first_token(f"scan-{one_off}", 1.0)
    assert len(figures) == 3
    assert [f.version_id for f in figures.busiest(2)] == ["busy", "steady"]


def test_quantiles_come_from_the_recent_first_tokens() -> None:
    figures = AdapterFigures()
    for ms in range(1, 101):
        figures.first_token("a", ms / 1000)
    figure = figures.of("a")
    assert figure is not None
    assert (figure.ttft(0.5), figure.ttft(0.99)) == (0.051, 0.1)
    assert quantile([], 0.5) is None
