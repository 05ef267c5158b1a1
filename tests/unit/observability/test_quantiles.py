"""Quantiles from histogram buckets, as PromQL's histogram_quantile estimates them."""

from __future__ import annotations

import math

from loraplex.observability.quantiles import quantile


def test_a_quantile_is_interpolated_within_its_bucket() -> None:
    buckets = {0.1: 50.0, 0.2: 100.0, math.inf: 100.0}
    assert math.isclose(quantile({}, buckets, 0.5), 0.1)
    assert math.isclose(quantile({}, buckets, 0.75), 0.15)


def test_only_observations_between_the_two_reads_count() -> None:
    before = {0.1: 100.0, 0.2: 100.0, math.inf: 100.0}
    after = {0.1: 100.0, 0.2: 200.0, math.inf: 200.0}
    assert 0.1 < quantile(before, after, 0.5) <= 0.2


def test_no_observations_is_nan_and_past_the_last_bound_is_that_bound() -> None:
    assert math.isnan(quantile({}, {0.1: 0.0, math.inf: 0.0}, 0.5))
    assert quantile({}, {0.1: 0.0, math.inf: 10.0}, 0.99) == 0.1
