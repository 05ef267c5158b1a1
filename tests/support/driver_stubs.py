"""The `EngineDriver` calls a gateway pump test does not exercise, answered as an idle,
healthy engine with nothing loaded would answer them."""

from __future__ import annotations

from pathlib import Path

from loraplex.serving.engines import EngineHealth
from loraplex.serving.engines.reported_facts import ReportedFacts


class IdleEngineCalls:
    """Healthy, nothing loaded, loads and unloads that do nothing; a subclass streams."""

    kind = "vllm"
    continues_by_token_ids = False  # a subclass that answers from token ids says so

    async def health(self) -> EngineHealth:
        """Healthy at once."""
        return EngineHealth(True, 0.0)

    async def list_loaded(self) -> set[str]:
        """Nothing loaded."""
        return set()

    async def reported_facts(self) -> ReportedFacts:
        """Only the kind."""
        return ReportedFacts(kind=self.kind)

    async def load(self, name: str, path: Path, pinned: bool = False) -> None:
        """Nothing to do."""

    async def unload(self, name: str) -> None:
        """Nothing to do."""

    async def metrics(self) -> dict[str, float]:
        """No samples."""
        return {}

    async def aclose(self) -> None:
        """Nothing to close."""
