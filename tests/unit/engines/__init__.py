"""Unit tests of the engine drivers and launcher."""
