"""The TTFT a request would get if admitted now, from the engine's step costs.

A calibrated profile (`loraplex bench calibrate`) fits an engine's step time to what the
batch holds; the core reads the same costs, without the simulator, as a `TtftModel`. A
request admitted now waits, at worst, for the step in progress (every running sequence
decoding), then for the steps that prefill every prompt admitted and still without a first
token, its own among them. SGLang runs those prefill steps on their own; vLLM runs the
decoding sequences in the same step (`mixed_steps`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TtftModel:
    """An engine's step costs, in seconds per unit (as a profile's `step`)."""

    base_s: float
    decode_seq_s: float
    prefill_token_s: float
    prefill_seq_s: float = 0.0
    prefill_chunk_tokens: int = 2_048  # prompt tokens one step may prefill (both profiles)
    mixed_steps: bool = False  # vLLM: decodes share the prefill step

    def step_s(self, decode_seqs: int, prefill_tokens: int = 0, prefill_seqs: int = 0) -> float:
        """One step's time."""
        return (
            self.base_s
            + self.decode_seq_s * decode_seqs
            + self.prefill_token_s * prefill_tokens
            + self.prefill_seq_s * prefill_seqs
        )

    def step_in_progress_s(self, decoding: int, in_step: tuple[int, int] = (0, 0)) -> float:
        """The step in progress, whole: a prefill of `in_step` (its prompt tokens and
        prompts) if any, else a decode step of `decoding` (none if idle)."""
        step_tokens, step_prompts = in_step
        if step_prompts:
            return self.step_s(decoding if self.mixed_steps else 0, step_tokens, step_prompts)
        return self.step_s(decoding) if decoding else 0.0

    def first_token_s(
        self,
        decoding: int,
        prompt_tokens: int,
        prompts: int,
        in_step: tuple[int, int] = (0, 0),
        step_left_s: float | None = None,
    ) -> float:
        """Until the last of `prompts` prompts of `prompt_tokens` in all has its first token,
        beside `decoding` running sequences: the step in progress (`step_left_s` of it, when
        the caller knows; else the whole step), then the prefill steps."""
        chunk = max(1, self.prefill_chunk_tokens)
        steps = max(1, math.ceil(prompt_tokens / chunk))
        beside = decoding if self.mixed_steps else 0
        prefill = self.step_s(beside, min(prompt_tokens, chunk), prompts)
        ahead = self.step_in_progress_s(decoding, in_step) if step_left_s is None else step_left_s
        return ahead + steps * prefill

    def unloaded_s(self, prompt_tokens: int) -> float:
        """A request's TTFT alone on an idle engine."""
        return self.first_token_s(0, prompt_tokens, 1)
