"""Adapter library tests against real services (an S3 server on loopback)."""
