"""Shared fixtures for the adapter library's unit tests."""

from __future__ import annotations

import pytest

from loraplex.adapters.validation import ValidationLimits


@pytest.fixture
def limits() -> ValidationLimits:
    """Generous limits: rank 16, 10 MB."""
    return ValidationLimits(max_rank=16, max_bytes=10 * 1024 * 1024)
