"""The declarative base every table derives from."""

from __future__ import annotations

from advanced_alchemy.base import UUIDv7AuditBase

# UUIDv7 keys sort by creation time, which keeps B-tree inserts local and lets "newest
# first" listings order by id. The audit base adds created_at / updated_at (UTC).
Base = UUIDv7AuditBase
