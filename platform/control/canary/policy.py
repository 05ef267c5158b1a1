"""The canary verdict as a pure function: two versions' figures and a policy in, a decision out.

No I/O and no clock: the analyst (analyst.py) reads the figures, passes how long the canary
has run, and applies what comes back. A canary is rolled back as soon as it has seen its
minimum requests and fails a check (a bad version need not serve the whole window); it is
promoted only once the whole window has passed with every check met.

With a `sample_eval` (the tenant's opt-in to sampling its live prompts), one more check: the
eval is run on the kept prompts against both versions (analyst.py and sample_eval.py do the
I/O), and the canary fails it when its pass rate is more than `max_pass_rate_drop` below
stable's; promotion waits for both runs.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

# A TTFT p95 at most this much above stable's passes whatever the ratio: on a fast adapter
# (a few milliseconds) a scheduling hiccup would otherwise double the ratio.
TTFT_FLOOR_S = 0.05


class Verdict(StrEnum):
    """What the analysis decided."""

    PROMOTE = "promote"
    ROLLBACK = "rollback"
    WAIT = "wait"


@dataclass(frozen=True, slots=True)
class SampleEval:
    """An eval run on a sample of the alias's live prompts against both versions."""

    eval_id: str  # the tenant's own eval (its criteria need no reference answer)
    sample_size: int  # live prompts kept, then evaluated on both versions
    max_pass_rate_drop: float  # canary's pass rate may be this much below stable's, at most
    max_completion_tokens: int = 256  # each answer's bound (greedy: temperature 0)


@dataclass(frozen=True, slots=True)
class CanaryPolicy:
    """When a canary is good enough: the alias's analysis settings."""

    window_s: int  # the canary runs at least this long before it may be promoted
    min_requests: int  # the canary's requests needed before any verdict but "wait"
    max_error_rate_diff: float  # canary's server-error rate minus stable's, at most
    max_ttft_p95_ratio: float  # canary's TTFT p95 over stable's, at most
    sample_eval: SampleEval | None = None  # None: no live prompt is ever kept

    def to_json(self) -> dict[str, Any]:
        """The policy as stored on the alias row (no `sample_eval` key when there is none)."""
        stored = asdict(self)
        if self.sample_eval is None:
            del stored["sample_eval"]
        return stored

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CanaryPolicy:
        """The policy stored on the alias row."""
        sample = data.get("sample_eval")
        return cls(
            int(data["window_s"]),
            int(data["min_requests"]),
            float(data["max_error_rate_diff"]),
            float(data["max_ttft_p95_ratio"]),
            None
            if not sample
            else SampleEval(
                str(sample["eval_id"]),
                int(sample["sample_size"]),
                float(sample["max_pass_rate_drop"]),
                int(sample.get("max_completion_tokens", 256)),
            ),
        )


@dataclass(frozen=True, slots=True)
class VersionStats:
    """One version's requests through the alias since the canary started."""

    requests: int = 0
    server_errors: int = 0  # the platform's and the engine's failures, not the tenant's 4xx
    ttft_p95_s: float | None = None  # None: no request reached a first token

    @property
    def error_rate(self) -> float:
        """Server errors per request (0 with no requests)."""
        return self.server_errors / self.requests if self.requests else 0.0


@dataclass(frozen=True, slots=True)
class RunScore:
    """One version's sample eval run as it stands."""

    run_id: str
    status: str  # queued | in_progress | completed | failed | canceled | deleted
    passed: int = 0
    total: int = 0
    error: str = ""

    @property
    def pass_rate(self) -> float | None:
        """Items passing every criterion over all items (errored ones fail); None: none ran."""
        return self.passed / self.total if self.total else None


@dataclass(frozen=True, slots=True)
class SampleScores:
    """The sample eval so far: prompts kept, then each version's run once started."""

    kept: int = 0
    stable: RunScore | None = None
    canary: RunScore | None = None
    error: str = ""  # why the runs could not be started (the eval deleted, no usable prompt)


DONE_BADLY = ("failed", "canceled", "deleted")


@dataclass(frozen=True, slots=True)
class Decision:
    """A verdict, the reasons for it, and the figures that led to it."""

    verdict: Verdict
    reasons: tuple[str, ...]
    figures: dict[str, Any] = field(default_factory=dict)

    @property
    def waiting_for_traffic(self) -> bool:
        """The canary has not yet seen its minimum requests."""
        return bool(self.figures.get("waiting_for_traffic"))


def decide(
    stable: VersionStats,
    canary: VersionStats,
    policy: CanaryPolicy,
    elapsed_s: float,
    sample: SampleScores | None = None,
) -> Decision:
    """Promote, roll back or wait, with the reasons and figures (`sample`: the sample eval
    so far, read only when the policy has one)."""
    figures = _figures(stable, canary, elapsed_s)
    judged = _sample_judged(sample or SampleScores(), policy.sample_eval, figures)
    if canary.requests < policy.min_requests:
        figures["waiting_for_traffic"] = True
        reason = f"waiting for traffic: {canary.requests} of {policy.min_requests} requests"
        return Decision(Verdict.WAIT, (reason,), figures)
    failures = _failures(stable, canary, policy, figures)
    if judged and judged[0] == "fail":
        failures.append(judged[1])
    if failures:
        return Decision(Verdict.ROLLBACK, tuple(failures), figures)
    if elapsed_s < policy.window_s:
        left = policy.window_s - elapsed_s
        return Decision(Verdict.WAIT, (f"checks met; window open for {left:.0f} s more",), figures)
    if judged and judged[0] == "wait":
        return Decision(Verdict.WAIT, (f"checks met; {judged[1]}",), figures)
    passes = _passes(figures, policy) + ([judged[1]] if judged else [])
    return Decision(Verdict.PROMOTE, tuple(passes), figures)


def _sample_judged(
    sample: SampleScores, policy: SampleEval | None, figures: dict[str, Any]
) -> tuple[str, str] | None:
    """The sample eval's check: ("fail" | "wait" | "pass", why), its figures added; None
    without a sample eval."""
    if policy is None:
        return None
    shown: dict[str, Any] = {
        "eval_id": policy.eval_id,
        "sample_size": policy.sample_size,
        "kept": min(sample.kept, policy.sample_size),
        "max_pass_rate_drop": policy.max_pass_rate_drop,
    }
    figures["sample_eval"] = shown
    if sample.error:
        shown["error"] = sample.error
        return "fail", f"the sample eval could not run: {sample.error}"
    if sample.stable is None or sample.canary is None:
        return "wait", (
            f"waiting for the sample eval: {shown['kept']} of {policy.sample_size} "
            "live prompts kept"
        )
    runs = (("stable", sample.stable), ("canary", sample.canary))
    for side, run in runs:
        shown[side] = {
            "run_id": run.run_id, "status": run.status, "passed": run.passed,
            "total": run.total, "pass_rate": _rounded(run.pass_rate),
        }  # fmt: skip
    for side, run in runs:
        if run.status in DONE_BADLY or (run.status == "completed" and run.pass_rate is None):
            which = f"run {run.run_id}" if run.run_id else "run"
            why = f": {run.error}" if run.error else ""
            return "fail", f"the sample eval {which} of {side} {_ended(run.status)}{why}"
    if any(run.status != "completed" for _, run in runs):
        return "wait", f"sample eval running ({sample.stable.run_id}, {sample.canary.run_id})"
    stable_rate, canary_rate = sample.stable.pass_rate or 0.0, sample.canary.pass_rate or 0.0
    drop = stable_rate - canary_rate
    shown["pass_rate_drop"] = round(drop, 4)
    said = (
        f"sample eval pass rate {canary_rate:.1%} ({sample.canary.passed} of "
        f"{sample.canary.total} live prompts) against stable's {stable_rate:.1%} "
        f"(at most {policy.max_pass_rate_drop * 100:.1f} points lower)"
    )
    # a hair of slack: 0.1 + 0.2 style sums must not fail a drop exactly at the bound
    return ("fail" if drop > policy.max_pass_rate_drop + 1e-9 else "pass"), said


def _ended(status: str) -> str:
    return {"deleted": "was deleted", "completed": "graded no item"}.get(status, status)


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _figures(stable: VersionStats, canary: VersionStats, elapsed_s: float) -> dict[str, Any]:
    return {
        "elapsed_s": round(elapsed_s, 1),
        "stable": {**asdict(stable), "error_rate": round(stable.error_rate, 4)},
        "canary": {**asdict(canary), "error_rate": round(canary.error_rate, 4)},
    }


def _failures(
    stable: VersionStats, canary: VersionStats, policy: CanaryPolicy, figures: dict[str, Any]
) -> list[str]:
    failures = []
    diff = canary.error_rate - stable.error_rate
    figures["error_rate_diff"] = round(diff, 4)
    if diff > policy.max_error_rate_diff:
        failures.append(
            f"server-error rate {canary.error_rate:.1%} against stable's "
            f"{stable.error_rate:.1%} (at most {policy.max_error_rate_diff:.1%} more)"
        )
    ratio = _ttft_ratio(stable, canary)
    figures["ttft_p95_ratio"] = None if ratio is None else round(ratio, 3)
    slower_s = (canary.ttft_p95_s or 0.0) - (stable.ttft_p95_s or 0.0)
    if ratio is not None and ratio > policy.max_ttft_p95_ratio and slower_s > TTFT_FLOOR_S:
        failures.append(
            f"TTFT p95 {canary.ttft_p95_s:.3f} s against stable's {stable.ttft_p95_s:.3f} s "
            f"(x{ratio:.2f}, at most x{policy.max_ttft_p95_ratio:g})"
        )
    return failures


def _ttft_ratio(stable: VersionStats, canary: VersionStats) -> float | None:
    """Canary's TTFT p95 over stable's; None when either has none to compare."""
    if canary.ttft_p95_s is None or not stable.ttft_p95_s:
        return None
    return canary.ttft_p95_s / stable.ttft_p95_s


def _passes(figures: dict[str, Any], policy: CanaryPolicy) -> list[str]:
    ratio = figures["ttft_p95_ratio"]
    return [
        f"{figures['canary']['requests']} requests over {figures['elapsed_s']:.0f} s "
        f"(window {policy.window_s} s)",
        f"server-error rate difference {figures['error_rate_diff']:.1%} "
        f"(at most {policy.max_error_rate_diff:.1%})",
        "no stable TTFT to compare"
        if ratio is None
        else f"TTFT p95 ratio x{ratio:.2f} (at most x{policy.max_ttft_p95_ratio:g})",
    ]
