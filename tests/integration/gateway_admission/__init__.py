"""Admission against the real Redis: limits, leases, replicas and outages."""
