"""A stand-in for the job queue: a job created with it stays `validating_files` (active)."""

from __future__ import annotations

from uuid import UUID


class NoQueue:
    """Sends nothing to a worker."""

    def validate(self, job_id: UUID) -> None:
        """Send nothing."""
