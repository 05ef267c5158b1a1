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
ENGINE_IN_FLIGHT_CAP = Gauge(
    "loraplex_engine_in_flight_cap",
    "Requests this API process lets run on an engine at once (its adaptive admission cap).",
    ["engine"],
)
ENGINE_CAP_TARGET = Gauge(
    "loraplex_engine_ttft_target_seconds",
    "The median TTFT this API process's adaptive cap holds an engine to (learned from idle "
    "requests unless LORAPLEX_ENGINE_TTFT_SLO_S is set).",
    ["engine"],
)
GC_PAUSE = Histogram(
    "loraplex_gc_pause_seconds",
    "Collections of Python's garbage collector in this process, by generation (1 or 2, the "
    "oldest); the event loop and every stream on it wait meanwhile.",
    ["generation"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
ENGINE_CAP_TAIL_TARGET = Gauge(
    "loraplex_engine_ttft_tail_target_seconds",
    "The TTFT over which this API process's adaptive cap counts a first token as a tail "
    "miss (1.75x the idle requests' 90th percentile; unset with LORAPLEX_ENGINE_TTFT_SLO_S).",
    ["engine"],
)
ENGINE_BURST_LIMIT = Gauge(
    "loraplex_engine_prefill_burst_limit",
    "How many requests this API process lets wait for their first token on an engine at "
    "once for a tenant its cap just shed (learned from bursts too slow; unset until one is).",
    ["engine"],
)
ENGINE_CAP_CUTS = Counter(
    "loraplex_engine_in_flight_cap_cuts",
    "Times this API process cut an engine's adaptive cap, by reason "
    "(slow_first_tokens | slow_tail | engine_queue).",
    ["engine", "reason"],
)
ADMISSION_REJECTIONS = Counter(
    "loraplex_admission_rejections",
    "Requests refused at admission, by reason (e.g. rpm, tpm, concurrency, overload).",
    ["reason", "tenant"],
)
# Each `reason` of ADMISSION_REJECTIONS: the status the client got, and why, for the admin UI.
REJECTION_REASONS: dict[str, tuple[int, str]] = {
    "rpm": (429, "over its requests per minute"),
    "tpm": (429, "over its tokens per minute"),
    "daily_tokens": (429, "its daily tokens used up"),
    "concurrency": (429, "at its limit of requests in flight"),
    "streams": (429, "at its limit of open streams"),
    "too_large": (429, "one request larger than its tokens per minute"),
    "engine_concurrency": (503, "shed for load: the engines at their in-flight cap"),
    "engine_burst": (503, "shed for load: a burst from a tenant the cap just shed"),
    "overload": (503, "shed for load: estimated time to first token over the SLO"),
    "limiter_unavailable": (503, "the quota store (Redis) did not answer"),
}
ADAPTER_LOADS = Counter(
    "loraplex_adapter_loads",
    "Adapter loads into a tier (disk | loaded | active), by result (ok | failed).",
    ["tier", "result"],
)
ADAPTER_LOAD_SECONDS = Histogram(
    "loraplex_adapter_load_seconds",
    "Time to bring an adapter into a tier.",
    ["tier"],
    buckets=LOAD_BUCKETS,
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
