"""The in-flight cap of one engine, adapted from its TTFTs: the live gate's before issue #45,
kept for the simulator's baseline "today" (gate.py here).

A gradient concurrency limiter, as Netflix's concurrency-limits: it compares the median TTFT
it sees with a target (an explicit SLO, or learned from requests that found the engine idle)
and moves the cap toward the level where they keep a fixed ratio; slow first tokens in the
tail and a queue on the engine cut it too. How each rule and constant was chosen, run by run
on a 2-core host, and why it was replaced by a profile judged in the simulator:
docs/admission.md, "History: the adaptive cap".
"""

from __future__ import annotations

import heapq
import math
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field

IDLE_MULTIPLE = 2.0  # the multiple of the idle median in the default target (`target_s`)
IDLE_SAMPLES = 32
# idle requests needed before their 90th percentile counts in the target: 10 until idle
# requests had to be warm and alone, which left a run without a tail target for 3 minutes
TAIL_SAMPLES = 5
WINDOW = 16  # the recent first tokens whose median is compared with the target
KEEP_AT_MOST = 0.9  # a cut keeps at most 90% of the cap ...
KEEP_AT_LEAST = 0.5  # ... and at least half of it
RECOVER_BELOW = 0.5  # a median this far from idle toward the target: grow as in slow start
BURST_BOUND_AT_MOST = 0.5  # the cap bound for at most this share of the window: bursts
TAIL_MULTIPLE = 1.75  # first tokens over this x the idle 90th percentile are tail misses
TAIL_WINDOW, TAIL_MISSES = 128, 2  # this many misses among the last ones since a cut cut it
PAYOFF_SHARE = 0.5  # a cut by x must move the median by at least this share of x ...
MULTIPLE_AT_MOST = 2.25  # ... else the idle multiple rises to a plateau this far over idle
DEFAULT_CEILING = 256  # no fixed cap set: the adaptive one stops here
# An idle request is the reference only if the engine was busy this recently: after a quiet
# spell the host's caches and CPUs are cold (docs/admission.md, "A warm reference, alone
# through its prefill").
WARM_WITHIN_S = 0.1


@dataclass(frozen=True, slots=True)
class CapCut:
    """Why the cap last fell, for the engines page and the metrics."""

    reason: str  # "slow_first_tokens" | "slow_tail" | "engine_queue"
    before: float  # the cap's exact level, to a tenth: a cut from 6.9 to 6.2 is shown as one
    after: float
    why: str  # one sentence with the figures behind it


@dataclass
class AdaptiveCap:
    """One engine's cap: a gradient on the median TTFT against a target, and the engine's
    own queue."""

    seed: int
    ceiling: int = DEFAULT_CEILING
    floor: int = 1
    slo_s: float = 0.0  # 0: learned from idle requests' TTFT (`target_s`)
    limit: float = field(init=False)
    idle_ttft_s: float | None = field(default=None, init=False)  # the idle reference
    idle_tail_s: float = field(default=0.0, init=False)  # their 90th percentile, once known
    idle_prompt_tokens: float = field(default=0.0, init=False)  # their mean prompt
    _idle: deque[tuple[float, int]] = field(init=False, repr=False)
    # TTFT / the prompt's allowance of the last `TAIL_WINDOW` admitted since the last cut;
    # the last `WINDOW` of them are the median's window (`_window`)
    _tail: deque[float] = field(init=False, repr=False)
    _waits: deque[tuple[float, float]] = field(init=False, repr=False)  # (admitted, came)
    _bound: deque[bool] = field(init=False, repr=False)  # whether the cap bound, per request
    _queued_probe: int = field(default=-1, init=False, repr=False)  # last probe with a queue
    last_cut_at: float = field(default=-math.inf, init=False)
    last_cut: CapCut | None = field(default=None, init=False)
    cuts_by_reason: Counter[str] = field(default_factory=Counter, init=False)
    multiple: float = field(default=IDLE_MULTIPLE, init=False)  # raised on a plateau
    _judging: tuple[float, float] | None = field(default=None, init=False, repr=False)
    _raised_for_room: bool = field(default=False, init=False, repr=False)  # since a first token

    def __post_init__(self) -> None:
        self.ceiling = max(1, self.ceiling)
        self.floor = min(max(1, self.floor), self.ceiling)
        self.limit = float(min(max(self.floor, self.seed), self.ceiling))
        self._idle = deque(maxlen=IDLE_SAMPLES)
        self._bound = deque(maxlen=WINDOW)
        self._tail = deque(maxlen=TAIL_WINDOW)
        self._waits = deque(maxlen=TAIL_WINDOW)  # the wait of each first token in `_tail`

    @property
    def cuts(self) -> int:
        """Times the cap has been cut, for any reason."""
        return sum(self.cuts_by_reason.values())

    @property
    def value(self) -> int:
        """Requests this engine may have in flight now."""
        return max(1, int(self.limit))

    def target_s(self, prompt_tokens: int = 0) -> float | None:
        """The TTFT the cap holds the median to, for a prompt of `prompt_tokens`; None
        until there is anything to go by."""
        if self.slo_s > 0:
            return self.slo_s
        if self.idle_ttft_s is None:
            return None  # no idle request yet: the cap holds at its seed
        scale = self._allowance(prompt_tokens)
        return max(self.multiple * self.idle_ttft_s, self.idle_tail_s) * scale

    def on_first_token(
        self,
        ttft_s: float,
        *,
        admitted_at: float,
        idle: bool,
        at_cap: bool,
        now: float,
        prompt_tokens: int = 0,
    ) -> None:
        """A request admitted at `admitted_at` got its first token `ttft_s` later; it is `now`.

        `idle`: nothing else was running when it was admitted; `at_cap`: the cap (nearly)
        bound then, so meeting the target says the cap could be higher.
        """
        self._learn_idle(ttft_s, idle, prompt_tokens)
        self._raised_for_room = False
        self._bound.append(at_cap)
        target = self.target_s()
        if target is None or admitted_at <= self.last_cut_at:
            return  # admitted under the cap before the last cut: already acted on
        self._tail.append(ttft_s / self._allowance(prompt_tokens))
        self._waits.append((admitted_at, now))
        window = self._window()
        median = statistics.median(window)
        if len(window) >= WINDOW // 2 and self._judging is not None:
            self._judge_the_last_cut(median)
            target = self.target_s() or target
        tail_miss = self._tail_miss(target)
        if len(window) >= WINDOW // 2 and median > target:
            kept = min(KEEP_AT_MOST, max(KEEP_AT_LEAST, target / median))
            if tail_miss is not None and self._kept_for_the_tail(tail_miss) < kept:
                self._cut_for_the_tail(tail_miss, now)  # the deeper cut of the two
                return
            why = (
                f"median TTFT of the last {len(window)} requests "
                f"{median * 1000:.0f} ms, over the {target * 1000:.0f} ms target"
            )
            before = self.limit
            self._cut(self.limit * kept, now, "slow_first_tokens", why)
            if self.slo_s <= 0:  # a learned target can be wrong; an operator's stands
                self._judging = (median, self.limit / before)
        elif tail_miss is not None:
            self._cut_for_the_tail(tail_miss, now)
        elif at_cap and window[-1] <= target:
            fast = self.cuts == 0 or self._has_clear_room(median, target)
            step = 1.0 if fast else 1.0 / self.limit
            self.limit = min(float(self.ceiling), self.limit + step)

    def raise_for_room(self) -> bool:
        """A request is about to be shed at this cap: raise the cap by one instead, if the
        engine has clear room or the load is a burst the target allows, and there was no
        such raise since the last first token; whether it did."""
        target = self.target_s()
        if self._raised_for_room or target is None or self.value >= self.ceiling:
            return False
        window = self._window()
        if len(window) < WINDOW // 2:
            return False  # too few first tokens since the last cut to go by
        median = statistics.median(window)
        if not (self._has_clear_room(median, target) or self._a_burst(median, target)):
            return False
        self.limit = min(float(self.ceiling), self.limit + 1.0)
        self._raised_for_room = True
        return True

    def over_tail(self, ttft_s: float, prompt_tokens: int = 0) -> bool:
        """Whether a first token is over the tail target, for its prompt's allowance."""
        tail_target = self.tail_target_s()
        return tail_target is not None and ttft_s / self._allowance(prompt_tokens) > tail_target

    def on_engine_load(self, waiting: float, running: float, now: float, *, probe: int) -> None:
        """One probe of the engine's own queue: `waiting` requests not started, `running`.

        A queue in two probes in a row is more than the engine can batch: cut to what it
        runs, keeping between `KEEP_AT_LEAST` and `KEEP_AT_MOST` of the cap (an engine may
        report 0 running for a request that just started). `probe` numbers the probes, so
        two in a row means consecutive numbers. A cut needs two more probes in a row, and
        an engine already running at least the cap is not cut: its queue came from
        elsewhere (requests admitted before a cut, another API process).
        """
        if waiting <= 0:
            return
        if probe == self._queued_probe + 1 and running < self.limit:
            kept = max(running, self.limit * KEEP_AT_LEAST)
            why = f"the engine queued {waiting:.0f} in two probes in a row, running {running:.0f}"
            self._cut(min(self.limit * KEEP_AT_MOST, kept), now, "engine_queue", why)
            probe = -2  # the next cut needs two more queued probes in a row
        self._queued_probe = probe

    def _judge_the_last_cut(self, median: float) -> None:
        """Judge the last cut on the half window admitted after it: where the median moved
        by less than `PAYOFF_SHARE` of the cut's share (it neither fell as latency that
        follows concurrency would, nor rose as it does when the load grows past the cut),
        raise the idle multiple so the target is the median the cut was made at. A median
        over `MULTIPLE_AT_MOST` times idle is not a plateau: as measured, a warm-up's cut
        (89 ms against 28 idle) raised the target to its bound for the whole run, and the
        admitted p99 at 2x load was 3x unloaded."""
        if self._judging is None or self.idle_ttft_s is None:
            return
        (median_at_cut, kept), self._judging = self._judging, None
        band = PAYOFF_SHARE * (1 - kept)
        plateau = median_at_cut / self.idle_ttft_s
        if plateau > MULTIPLE_AT_MOST:
            return  # too far over idle for a plateau: a queue, a stall or a warm-up
        if median_at_cut * (1 - band) <= median <= median_at_cut * (1 + band):
            self.multiple = max(self.multiple, plateau)

    def tail_target_s(self) -> float | None:
        """The TTFT over which a first token is a tail miss (per unit of allowance):
        `TAIL_MULTIPLE` x the idle requests' 90th percentile; None for an operator's
        target (it is a median) or before that percentile is known."""
        if self.slo_s > 0 or self.idle_tail_s <= 0:
            return None
        return TAIL_MULTIPLE * self.idle_tail_s

    def _tail_miss(self, target: float) -> float | None:
        """The `TAIL_MISSES`-th slowest spell of the last `TAIL_WINDOW` first tokens since
        the last cut over the tail target (and over `target`); None while fewer spells
        than `TAIL_MISSES` were over it, or before the tail target is known."""
        tail_target = self.tail_target_s()
        if tail_target is None or len(self._tail) < TAIL_MISSES:
            return None
        spells = self._spells_over(max(tail_target, target))
        return heapq.nlargest(TAIL_MISSES, spells)[-1] if len(spells) >= TAIL_MISSES else None

    def _spells_over(self, over: float) -> list[float]:
        """The slowest first token of each spell over `over` in the tail window. Misses
        whose waits overlapped are one spell: a stall of the host holds every request
        waiting at once, and, as measured beside a noisy tenant, counting each of them cut
        the cap to 5 on stalls that an uncapped engine passed through alike."""
        worst: list[float] = []
        spell_ends = -math.inf
        for ttft, (admitted, came) in zip(self._tail, self._waits, strict=True):
            if ttft <= over:
                continue
            if admitted < spell_ends:  # it waited through the spell before
                worst[-1], spell_ends = max(worst[-1], ttft), max(spell_ends, came)
            else:
                worst.append(ttft)
                spell_ends = came
        return worst

    def _kept_for_the_tail(self, miss: float) -> float:
        """The share of the cap a cut for a tail `miss` keeps: `tail target / miss`."""
        tail_target = self.tail_target_s()
        assert tail_target is not None  # a miss is only found against a known tail target
        return min(KEEP_AT_MOST, max(KEEP_AT_LEAST, tail_target / miss))

    def _cut_for_the_tail(self, miss: float, now: float) -> None:
        why = (
            f"{TAIL_MISSES} spells of the last {len(self._tail)} first tokens at least "
            f"{miss * 1000:.0f} ms, over the {(self.tail_target_s() or 0) * 1000:.0f} ms "
            "tail target"
        )
        self._cut(self.limit * self._kept_for_the_tail(miss), now, "slow_tail", why)

    def _window(self) -> list[float]:
        """The last `WINDOW` first tokens admitted since the last cut, oldest first."""
        return list(self._tail)[-WINDOW:]

    def _has_clear_room(self, median: float, target: float) -> bool:
        """Whether a full enough window's median sits in the lower `RECOVER_BELOW` of the
        span from the idle TTFT to the target, with no tail miss since the last cut (as
        measured, a cap rose from 14 to 22.8 through four tail cuts in one 10-s level,
        growing by one per request between them)."""
        idle = self.idle_ttft_s
        if idle is None or len(self._tail) < WINDOW // 2 or idle >= target:
            return False
        tail_target = self.tail_target_s()
        if tail_target is not None and self._tail and max(self._tail) > tail_target:
            return False
        return median <= idle + RECOVER_BELOW * (target - idle)

    def _a_burst(self, median: float, target: float) -> bool:
        """Whether the load is bursts the target allows: the median meets it and the cap
        bound for at most `BURST_BOUND_AT_MOST` of the recent requests (a flood binds it
        for nearly all)."""
        bound = sum(self._bound) / len(self._bound) if self._bound else 1.0
        return median <= target and bound <= BURST_BOUND_AT_MOST

    def _allowance(self, prompt_tokens: int) -> float:
        """How much longer than an idle request's a prompt of `prompt_tokens` may take."""
        if self.idle_prompt_tokens <= 0:
            return 1.0
        return max(1.0, prompt_tokens / self.idle_prompt_tokens)

    def _learn_idle(self, ttft_s: float, idle: bool, prompt_tokens: int) -> None:
        if not idle:
            return
        self._idle.append((ttft_s, prompt_tokens))
        self.idle_ttft_s = statistics.median(t for t, _ in self._idle)
        self.idle_prompt_tokens = statistics.fmean(p for _, p in self._idle)
        if len(self._idle) >= TAIL_SAMPLES:  # per unit of allowance, as the window is
            per_allowance = [t / self._allowance(p) for t, p in self._idle]
            self.idle_tail_s = statistics.quantiles(per_allowance, n=10, method="inclusive")[-1]

    def _cut(self, to: float, now: float, reason: str, why: str) -> None:
        before = self.limit
        self.limit = max(float(self.floor), to)
        self.last_cut_at = now
        self.cuts_by_reason[reason] += 1
        self.last_cut = CapCut(reason, round(before, 1), round(self.limit, 1), why)
        self._tail.clear()  # the next cut waits for requests admitted under this cap
        self._waits.clear()
        self._judging = None  # judged only when the cut is the last one
