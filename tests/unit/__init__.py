"""Unit tests: pure code, no services."""
