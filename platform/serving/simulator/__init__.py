"""Discrete-event simulator of the serving tier, driving the same policy core as the gateway."""
