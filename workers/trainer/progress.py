"""Throughput and ETA from step timings, for the progress reports a run sends each step."""

from __future__ import annotations

import time
from collections.abc import Callable

from loraplex.workers.trainer.config import Progress


class ProgressMeter:
    """Measures tokens/s and ETA over the steps run by this process (not those resumed)."""

    def __init__(self, total_steps: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self._total_steps = total_steps
        self._clock = clock
        self._started = clock()
        self._steps = 0
        self._tokens = 0

    def step_done(
        self,
        step: int,
        loss: float,
        learning_rate: float,
        tokens: int,
        validation_loss: float | None = None,
    ) -> Progress:
        """Record a finished step and return its progress report."""
        self._steps += 1
        self._tokens += tokens
        elapsed = max(self._clock() - self._started, 1e-9)
        per_step = elapsed / self._steps
        return Progress(
            step=step,
            total_steps=self._total_steps,
            loss=loss,
            learning_rate=learning_rate,
            tokens_per_s=self._tokens / elapsed,
            eta_s=per_step * (self._total_steps - step),
            validation_loss=validation_loss,
        )
