"""Observability: Prometheus metrics for the gateway, serving tier and workers."""
