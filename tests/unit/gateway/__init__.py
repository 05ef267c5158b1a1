"""Unit tests of the inference gateway."""
