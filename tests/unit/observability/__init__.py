"""Unit tests of metrics."""
