"""Serving tier: engine drivers, placement, eviction and dispatch."""
