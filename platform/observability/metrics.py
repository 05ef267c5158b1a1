"""Loraplex's Prometheus metrics, on the default registry so Litestar's `/metrics` shows them.

Label values come from small fixed sets: a tenant becomes a bounded label through
`TenantLabeler`; `model` is the base model a request ran on (adapter names are per tenant and
unbounded, so they never become labels; usage per adapter lives in the usage table instead);
`status` is the HTTP status code as a string; `tier` is one of TIERS.

Cost: `.labels(...)` takes a lock and a dict lookup (about a microsecond), so the gateway
updates metrics once per request or per event, never per streamed chunk.
"""

from __future__ import annotations

from uuid import UUID

from prometheus_client import Counter, Gauge, Histogram

DEFAULT_MAX_TENANT_LABELS = 100
OTHER_TENANT = "other"
NO_TENANT = "none"  # operator keys and unauthenticated requests
TIERS = ("cold", "disk", "loaded", "active")
TOKEN_KINDS = ("prompt", "completion")

# Time to first token: queueing plus prefill, from tens of milliseconds on a warm GPU to tens
# of seconds behind a cold adapter load or a long CPU-engine prefill.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
# Time per output token: ~5-50 ms on GPUs; CPU engines and oversubscribed batches reach 1 s.
TPOT_BUCKETS = (0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1, 0.2, 0.5, 1.0)
# Adapter loads: a GPU swap of a loaded adapter takes milliseconds, a pull from the object
# store of a high-rank adapter takes seconds to minutes.
LOAD_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

# The gateway's own share of TTFT: sub-millisecond on an idle gateway, tens of ms when a
# burst of requests queues on its event loop.
OVERHEAD_BUCKETS = (
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075, 0.1,
    0.25, 0.5, 1.0, 2.5,
)  # fmt: skip

INFERENCE_REQUESTS = Counter(
    "loraplex_inference_requests",
    "Inference requests answered, by tenant, base model and HTTP status.",
    ["tenant", "model", "status"],
)
TTFT_SECONDS = Histogram(
    "loraplex_ttft_seconds",
    "Time from request arrival to the first generated token.",
    ["model"],
    buckets=TTFT_BUCKETS,
)
GATEWAY_OVERHEAD_SECONDS = Histogram(
    "loraplex_gateway_overhead_seconds",
    "Time a request spends in the gateway itself, by phase: admission (authentication to the "
    "engine side: key, body, resolution, sizes, quotas), routing (engine choice, adapter "
    "placement and loads, to the engine request), relay (the engine's first text to the "
    "client's first event). "
    "For a warm adapter their sum (phase total) is what the gateway adds to TTFT.",
    ["phase"],
    buckets=OVERHEAD_BUCKETS,
)
TPOT_SECONDS = Histogram(
    "loraplex_tpot_seconds",
    "Mean time per output token after the first, one observation per request.",
    ["model"],
    buckets=TPOT_BUCKETS,
)
TOKENS = Counter(
    "loraplex_tokens",
    "Tokens processed, by tenant and kind (prompt | completion).",
    ["tenant", "kind"],
)
QUEUE_DEPTH = Gauge(
    "loraplex_engine_queue_depth",
    "Requests the gateway holds for an engine, not yet sent to it.",
    ["engine"],
)
ADMISSION_PLACES = Gauge(
    "loraplex_admission_places",
    "Requests this API process lets run at once on the engines of a base model: the places "
    "its admission core hands out (docs/admission.md).",
    ["base_model"],
)
ADMISSION_IN_FLIGHT = Gauge(
    "loraplex_admission_in_flight",
    "Requests this API process has admitted to the engines of a base model and not finished.",
    ["base_model"],
)
ADMISSION_WAITING = Gauge(
    "loraplex_admission_waiting",
    "Requests waiting in this API process for a place on the engines of a base model.",
    ["base_model"],
)
GC_PAUSE = Histogram(
    "loraplex_gc_pause_seconds",
    "Collections of Python's garbage collector in this process, by generation (1 or 2, the "
    "oldest); the event loop and every stream on it wait meanwhile.",
    ["generation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
EVENT_LOOP_LAG = Histogram(
    "loraplex_event_loop_lag_seconds",
    "How late the API's event loop ran a timer it had set: while it is late, every stream on "
    "the process waits (a check or a parse holding the loop).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
)
ADMISSION_REJECTIONS = Counter(
    "loraplex_admission_rejections",
    "Requests refused at admission, by reason (e.g. rpm, tpm, concurrency, overload).",
    ["reason", "tenant"],
)
# Demand per rank class (an engine's max_lora_rank; a handful of values, "none" where no
# registered engine fits), the autoscaling signal: the gate holds and sheds the excess
# itself, so an engine's own queue stays short however much more the class is asked for.
# Updated by `loraplex.gateway.admission.demand`.
RANK_CLASS_IN_FLIGHT = Gauge(
    "loraplex_rank_class_in_flight",
    "Requests this API process has admitted for a rank class and not yet ended.",
    ["rank_class"],
)
RANK_CLASS_WAITING = Gauge(
    "loraplex_rank_class_waiting",
    "Requests of a rank class waiting at this API process's gate for a place under the "
    "engines' in-flight caps.",
    ["rank_class"],
)
RANK_CLASS_ADMITTED = Counter(
    "loraplex_rank_class_admitted",
    "Requests this API process admitted for a rank class.",
    ["rank_class"],
)
RANK_CLASS_SHED = Counter(
    "loraplex_rank_class_shed",
    "Requests of a rank class this API process shed for load (503), by reason "
    "(engine_busy | waited_too_long | overload).",
    ["rank_class", "reason"],
)
RANK_CLASS_TTFT = Histogram(
    "loraplex_rank_class_ttft_seconds",
    "Time from the engine request's start to its first token, by the engine's rank class.",
    ["rank_class"],
    buckets=TTFT_BUCKETS,
)
RANK_CLASS_TTFT_OVER_TARGET = Counter(
    "loraplex_rank_class_ttft_over_target",
    "First tokens slower than the TTFT SLO admission holds their engines to, "
    "by rank class; over loraplex_rank_class_ttft_seconds_count, the share that missed it.",
    ["rank_class"],
)
# Each `reason` of ADMISSION_REJECTIONS: the status the client got, and why, for the admin UI.
REJECTION_REASONS: dict[str, tuple[int, str]] = {
    "rpm": (429, "over its requests per minute"),
    "tpm": (429, "over its tokens per minute"),
    "daily_tokens": (429, "its daily tokens used up"),
    "concurrency": (429, "at its limit of requests in flight"),
    "streams": (429, "at its limit of open streams"),
    "too_large": (429, "one request larger than its tokens per minute"),
    "budget": (429, "its money budget would be passed (docs/budgets.md)"),
    "engine_busy": (503, "shed for load: no place on the engines for a tenant at its share"),
    "waited_too_long": (503, "shed for load: waited for a place on the engines past its wait"),
    "overload": (503, "shed for load: estimated time to first token over the SLO"),
    "limiter_unavailable": (503, "the quota store (Redis) did not answer"),
    "resume_streams": (429, "at its limit of resumed streams read at once"),
    "resume_limiter_unavailable": (503, "the quota store (Redis) did not answer a resume"),
}
# Every limit that refuses a tenant's request, by the limit's name, so an operator sees who
# tripped what: admission's quotas (the `reason`s above), resume readers, sign-in throttles,
# the Redis connection cap. A refusal with no tenant known (a sign-in) counts as NO_TENANT.
TENANT_LIMIT_REFUSALS = Counter(
    "loraplex_tenant_limit_refusals",
    "Requests refused by a per-tenant or platform limit, by tenant and limit (reason).",
    ["tenant", "reason"],
)


def count_limit_refusal(reason: str, tenant: str = NO_TENANT) -> None:
    """Count one refusal by limit `reason` for `tenant` (a label from `TenantLabeler`)."""
    TENANT_LIMIT_REFUSALS.labels(tenant, reason).inc()


ADAPTER_LOADS = Counter(
    "loraplex_adapter_loads",
    "Adapter loads made, by the tier loaded into (disk: fetched from the object store onto "
    "a node's disk; loaded: read into an engine's host memory; active: swapped into a GPU "
    "slot, as placement models the engine's slots) and result (ok | error). A request that "
    "finds its adapter where it needs it adds none: loraplex_adapter_cache_hits counts requests.",
    ["tier", "result"],
)
ADAPTER_LOAD_SECONDS = Histogram(
    "loraplex_adapter_load_seconds",
    "Time one load into a tier took (loaded: with the fetch when the node's agent made "
    "both), by the engine's rank class (its max LoRA rank).",
    ["tier", "rank_class"],
    buckets=LOAD_BUCKETS,
)
# Engines are few, so an engine label is safe; adapters are not, so they are counted, never
# named (the engines page lists them: serving/live/view.py).
ADAPTERS_WAITING = Gauge(
    "loraplex_adapters_waiting",
    "Adapters with requests routed to an engine by this API process and not yet released to "
    "it, by what they wait for: load (an engine load, or a host slot to load into) or "
    "gpu_slot (loaded, every GPU slot busy with others).",
    ["engine", "waiting_for"],
)
EVICTIONS = Counter(
    "loraplex_adapter_evictions",
    "Adapters evicted from a tier, by the policy's reason.",
    ["tier", "reason"],
)
CACHE_HITS = Counter(
    "loraplex_adapter_cache_hits",
    "Where a request found its adapter: active, loaded, disk, or cold (a miss).",
    ["tier"],
)
STREAM_ABORTS = Counter(
    "loraplex_stream_aborts",
    "Streams ended early, by reason (disconnect, slow_client, timeouts, engine_error).",
    ["reason"],
)
FAILOVERS = Counter(
    "loraplex_stream_failovers",
    "Streams whose engine failed after the first token, by reason (engine_died, "
    "engine_error, silent, or drained: its engine is draining) and outcome (continued, "
    "no_engine, complete, or why the answer could not be continued exactly: "
    "docs/failover.md).",
    ["reason", "outcome"],
)
# The gap a client saw in its stream at a failover: the failure's detection (an idle
# timeout, or an instant for a dropped connection) plus the continuation's prefill.
FAILOVER_GAP_SECONDS = Histogram(
    "loraplex_stream_failover_gap_seconds",
    "Seconds between the last piece of output before a failover and the first after it.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0),
)
FINE_TUNE_JOBS = Gauge(
    "loraplex_fine_tune_jobs",
    "Fine-tune jobs by status, refreshed from the database.",
    ["status"],
)
QUOTA_USAGE = Gauge(
    "loraplex_quota_usage_ratio",
    "Fraction of a tenant's limit in use (1.0 = at the limit), by limit name.",
    ["tenant", "limit"],
)
PROBE_FAILURES = Counter(
    "loraplex_probe_failures",
    "Probe replays whose greedy answers differed from the recorded ones on a majority of "
    "the probes, by engine and scope (adapter | base).",
    ["engine", "scope"],
)
PROBES_FAILING = Gauge(
    "loraplex_probes_failing",
    "Subjects (adapter versions, or the base model) an engine is out of rotation for "
    "because its last probe replay failed.",
    ["engine"],
)


class TenantLabeler:
    """Maps tenant ids to label values: the first `max_tenants` seen keep their id, the rest
    share "other", so a platform with thousands of tenants stays a bounded set of series.

    "First seen" is per process, so two replicas may name different tenants; dashboards
    that need every tenant read the usage API, not Prometheus.
    """

    def __init__(self, max_tenants: int = DEFAULT_MAX_TENANT_LABELS) -> None:
        self.max_tenants = max_tenants
        self._labels: dict[UUID | str, str] = {}  # a UUID and its string both map here
        self._named: set[str] = set()

    def __call__(self, tenant_id: UUID | str | None) -> str:
        """The label value for `tenant_id`."""
        if tenant_id is None:
            return NO_TENANT
        label = self._labels.get(tenant_id)
        if label is not None:
            return label
        label = str(tenant_id)
        if label not in self._named:
            if len(self._named) >= self.max_tenants:
                return OTHER_TENANT
            self._named.add(label)
        self._labels[tenant_id] = label
        return label

    @property
    def num_named(self) -> int:
        """How many tenants have a label of their own."""
        return len(self._named)


def count_adapter_loads(found: str, into: str, result: str = "ok") -> list[str]:
    """Count the loads that brought an adapter from tier `found` up to `into`, one per tier
    passed (none when it was there already); returns those tiers."""
    passed = list(TIERS[TIERS.index(found) + 1 : TIERS.index(into) + 1])
    for tier in passed:
        ADAPTER_LOADS.labels(tier, result).inc()
    return passed


def observe_adapter_load(found: str, into: str, rank_class: str, seconds: float) -> None:
    """Count a finished load from `found` up to `into` and time it under its top tier."""
    passed = count_adapter_loads(found, into)
    if passed:
        ADAPTER_LOAD_SECONDS.labels(passed[-1], rank_class).observe(seconds)


def observe_request(
    tenant: str, model: str, status: int, prompt_tokens: int, completion_tokens: int
) -> None:
    """Count one answered request and its tokens (`tenant` already labelled)."""
    INFERENCE_REQUESTS.labels(tenant, model, str(status)).inc()
    TOKENS.labels(tenant, "prompt").inc(prompt_tokens)
    TOKENS.labels(tenant, "completion").inc(completion_tokens)


def observe_latency(model: str, ttft_s: float, total_s: float, completion_tokens: int) -> None:
    """Record TTFT and the mean time per output token of one finished generation."""
    TTFT_SECONDS.labels(model).observe(ttft_s)
    if completion_tokens > 1:
        TPOT_SECONDS.labels(model).observe((total_s - ttft_s) / (completion_tokens - 1))
