"""Tests for the dev model and adapter generators."""
