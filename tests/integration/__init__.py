"""Integration tests: real services on loopback."""
