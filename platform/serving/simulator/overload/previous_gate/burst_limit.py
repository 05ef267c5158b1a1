"""How many requests may wait for their first token on one engine at once, for a heavy tenant.

The in-flight cap (`adaptive_cap`) limits what runs on an engine. It does not limit how many
requests arrive within a few milliseconds while there is room under it, and the engine
prefills those together: as measured on SGLang on CPU at 2x load, three requests sent
within 1 ms took 82 ms each, where one alone took 33 and the SLO was 80. A load level
admits about 180 requests, so its p99 is its second slowest, and one such burst decides
it (docs/admission.md, "Bursts that share a prefill").

So the gate also counts an engine's requests that have not had their first token yet (its
prefills). From a tenant the cap shed within the last second (it offers more than the
engines take), or its own quota refused (more than its plan allows), it refuses a request
that would make them more than `limit`, unless the tenant is below its fair share of
those places. A tenant refused by neither is never refused for a burst: its parallel calls
on a quiet platform, or its Poisson bursts, go in and share their prefill.

The limit is learned, as the cap is:
- None at first: a burst of any size goes in until one is seen to be too slow. An engine
  that prefills a batch for little more than one prompt (as a GPU should) never sets it.
- A first token over the cap's tail target, from a request that waited beside others for
  its first token (`peak`: the most requests waiting at once in its wait, itself
  included), sets the limit to `peak - 1`, but never under `FLOOR`.
- `GROW_AFTER` first tokens in a row within the tail target, each from a request that
  waited with `limit` requests at once, raise the limit by one: a load that changed may
  take larger bursts. The count is long (four tail windows), because the try costs a
  miss where bursts are still too slow, and a p99 allows few.

Pure: the gate counts the prefills and feeds each first token.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Two requests prefilled together are not refused: a floor of one would make every request
# that arrives during another's prefill wait its turn or be shed (at 2x load, most of them).
FLOOR = 2
GROW_AFTER = 512  # first tokens in time at the limit before it is raised by one


@dataclass
class BurstLimit:
    """One engine's limit on requests waiting for their first token at once, for a tenant
    the cap just shed."""

    limit: int | None = None  # None: not learned, no limit
    _in_time_at_limit: int = field(default=0, init=False, repr=False)

    def on_first_token(self, *, over_tail: bool, peak: int) -> None:
        """A first token came: over the tail target or not, for a request that waited
        beside at most `peak - 1` others for it."""
        if over_tail and peak > FLOOR:
            lowered = peak - 1
            if self.limit is None or lowered < self.limit:
                self.limit = lowered
            self._in_time_at_limit = 0
        elif over_tail:
            return  # a pair or a lone request over the tail: a stall, not a burst
        elif self.limit is not None and peak >= self.limit:
            self._in_time_at_limit += 1
            if self._in_time_at_limit >= GROW_AFTER:
                self.limit += 1
                self._in_time_at_limit = 0
