"""Test helpers: service fixtures and file builders shared by the suites."""
