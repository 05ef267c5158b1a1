"""Unit tests of the adapter library (no services)."""
