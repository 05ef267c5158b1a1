"""Base classes for request and response bodies."""

from __future__ import annotations

import msgspec


class Input(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A request body: unknown fields are refused rather than silently ignored."""


class Output(msgspec.Struct, kw_only=True):
    """A response body."""
