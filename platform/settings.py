"""One typed settings object, read from `LORAPLEX_*` environment variables.

Nothing here runs at import time: call `Settings.from_env()` where settings are needed
(the app factory, the CLI, the Celery app) and pass the object down.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, get_type_hints

from loraplex.auth.sso.config import OidcProvider, providers_from_json, providers_to_json

PREFIX = "LORAPLEX_"
DEV_SECRET_KEY = "dev-only-change-me"  # fine for the embedded default, never for production


class SettingsError(ValueError):
    """An environment variable holds a value its setting cannot take."""


@dataclass(frozen=True, slots=True)
class EngineEndpoint:
    """An inference engine the platform should use, as listed in settings."""

    name: str
    url: str
    kind: str = "vllm"  # "vllm" | "sglang"
    base_model: str = ""
    max_lora_rank: int = 64
    gpu_slots: int = 8
    host_slots: int = 32


@dataclass(frozen=True, slots=True)
class Settings:
    """Every knob of a Loraplex process. Field `foo_bar` reads `LORAPLEX_FOO_BAR`."""

    # Storage. The embedded default is a SQLite file and a local directory object store.
    database_url: str = "sqlite+aiosqlite:///./var/loraplex.db"
    # PostgreSQL connections one process keeps open, and how many more it may open at once
    # under load: every replica, worker and agent holds its own, against the server's
    # `max_connections` (100 by default).
    db_pool_size: int = 10
    db_max_overflow: int = 20
    redis_url: str = ""  # empty: in-process stand-ins (embedded mode only)
    # Celery's broker; empty: Redis when `redis_url` is set, else files under data_dir/broker.
    broker_url: str = ""
    # Put before every key the broker writes in Redis, so deployments sharing one Redis
    # database never take each other's tasks (a worker takes any task on its queue's key).
    broker_key_prefix: str = ""
    data_dir: Path = Path("./var")
    object_store: str = "local"  # "local" | "s3"
    s3_endpoint_url: str = ""
    s3_bucket: str = "loraplex"
    s3_region: str = "us-east-1"
    s3_access_key_id: str = ""
    s3_secret_access_key: str = ""

    # HTTP server.
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    keep_alive_s: int = 75
    debug: bool = False
    # Kernel send buffer per client connection. Bounds the memory a slow reader can pin and
    # makes backpressure reach the stream buffer (and `slow_client`) sooner; 0 = OS default.
    socket_sndbuf_bytes: int = 0
    max_json_body_bytes: int = 1_048_576
    max_upload_bytes: int = 512 * 1024 * 1024
    max_training_file_bytes: int = 512 * 1024 * 1024
    # Checks of tenant files (archives, adapter weights, training files) run in this many
    # worker processes, each capped at this much memory and this long a check, so no upload
    # can hold the API's event loop or its memory (loraplex.cpu_pool).
    cpu_pool_workers: int = 1
    cpu_pool_memory_bytes: int = 1024 * 1024 * 1024  # a worker idles at ~200 MB of address space
    cpu_pool_timeout_s: float = 300.0
    # Uploads one API process receives at once, per tenant and in all (429 past either).
    uploads_per_tenant: int = 2
    uploads_in_progress: int = 16
    # An event-loop tick later than this is logged with what the loop was late for.
    event_loop_lag_warn_s: float = 0.25

    # Security.
    secret_key: str = DEV_SECRET_KEY  # signs the console's session and CSRF cookies
    api_key_prefix: str = "lpx"
    # Mark the console's session and CSRF cookies `Secure` (and send HSTS): "auto" does
    # outside local mode (`is_local`), "true" always, "false" never (plain HTTP on a
    # trusted network, the test suite).
    secure_cookies: str = "auto"
    # Bearer token Prometheus sends to scrape `/metrics` (per-tenant series). Empty: open
    # in local mode, refused (401) otherwise.
    metrics_token: str = ""
    # Console logins per email and per client address per minute, before 429.
    login_attempts_per_minute: int = 10
    # Single sign-on: the console's OpenID Connect providers, a JSON list (docs/sso.md).
    oidc_providers: tuple[OidcProvider, ...] = field(default_factory=tuple)
    # How often a signed-in SSO session asks its provider again whether the user has access.
    oidc_recheck_s: float = 300.0
    # The console's public URL, for the providers' redirect URIs (empty: each request's URL).
    public_url: str = ""
    # Shared bearer token API processes send to `loraplex agent`s (load, unload) that did not
    # register a secret of their own (operator-registered ones, agents of older releases);
    # an agent accepts it only where it is set. A self-registered agent needs none (it
    # accepts its own secret only: docs/security.md); without either an agent serves
    # loopback only. Agents register with a node credential, never with this token.
    agent_token: str = ""
    # This agent's node credential (`loraplex nodes mint <engine>`), sent when it registers.
    node_credential: str = ""
    # The key engines are started with (`--api-key`); the API sends it on every engine call.
    engine_api_key: str = ""
    # Self-registered engines (`loraplex agent --register-with`): how often agents heartbeat,
    # after how long without one an engine leaves the rotation, and when it is forgotten.
    agent_heartbeat_s: float = 5.0
    agent_stale_after_s: float = 20.0
    agent_forget_after_s: float = 300.0

    # Serving.
    engines: tuple[EngineEndpoint, ...] = field(default_factory=tuple)
    engine_health_interval_s: float = 2.0
    # The largest rank class engines are provisioned for, used when no engine is registered
    # for a base model yet: adapters above it could never be served.
    max_lora_rank: int = 64
    download_url_ttl_s: int = 900
    disk_cache_bytes: int = 10 * 2**30  # this node's adapter cache (agent), under data_dir/cache
    # A version that becomes ready (upload, fine-tune, import) is fetched onto an engine of
    # its rank class before its first request, and into that engine's memory where a slot
    # is free (docs/many-adapters.md, "Loads ahead of need").
    warm_on_upload: bool = True
    # Correctness probes: how often every engine replays its recorded greedy answers (0: only
    # after each adapter load), and how many tokens each probe answer has (docs/security.md).
    probe_every_s: float = 300.0
    probe_max_tokens: int = 32

    # Adapter import (`POST .../versions` with a source): where hub repositories are fetched
    # from (the Hugging Face Hub's HTTP API shape), the networks an import may reach besides
    # public addresses (comma-separated CIDRs; private, loopback and link-local addresses
    # are refused otherwise), a PEM bundle of extra CAs to trust (empty: the system's), and
    # how long one import may take to fetch. The size cap is `max_upload_bytes`.
    hub_endpoint: str = "https://huggingface.co"
    import_allow_networks: str = ""
    import_ca_file: str = ""
    import_timeout_s: float = 600.0

    # Streaming (see loraplex.gateway.pump.StreamLimits).
    stream_buffer_bytes: int = 256 * 1024
    stream_heartbeat_s: float = 5.0
    queue_timeout_s: float = 30.0
    ttft_timeout_s: float = 60.0
    idle_timeout_s: float = 30.0
    total_timeout_s: float = 600.0
    # How long a stream whose engine failed after the first token may look for another
    # engine to continue on (loraplex.gateway.failover) before it ends with the error.
    failover_timeout_s: float = 10.0
    resume_window_s: float = 30.0
    # Streams in flight hold their next write up to this long while a new request is being
    # admitted, so it reaches its engine first (loraplex.gateway.lane); 0 turns it off.
    relay_yield_to_new_s: float = 0.02
    # Once more than 16 streams are open in one API process, a stream that has sent its
    # first token writes at most once per this interval; what arrives between goes in the
    # same write (loraplex.gateway.lane: a third of the gateway's CPU at 64 streams was one
    # socket write per stream per engine step). Tokens per second are unchanged; a client
    # sees ~7 updates a second instead of one per token. At 64 streams on SGLang (CPU)
    # 0.15 s cut added TTFT from 77-79 to 35-55 ms; 0.1 s and 0.05 s changed nothing
    # measurable (a token came every ~48 ms). 0 turns it off.
    relay_pace_s: float = 0.15

    # Money (docs/budgets.md): the one currency of every price, spend and budget (ISO 4217
    # code, shown beside amounts), and a URL that gets a JSON POST when a budget's spend
    # passes its alert share (empty: the audit log and the console's banner only).
    currency: str = "USD"
    budget_webhook_url: str = ""

    # Admission (see loraplex.gateway.admission).
    ratelimit_fail_mode: str = "closed"  # Redis unreachable: "closed" answers 503, "open" admits
    admission_ttft_budget_s: float = (
        2.0  # shed priority 0 past 1x this estimate, 1 past 2x, 2 past 4x
    )
    # Admission's places on an engine without a profile or a fixed number: max(this, its GPU
    # slots) requests at once (loraplex.gateway.admission.places).
    admission_parallelism: int = 8
    # A fixed number of places per engine (0: from its profile, else its slots).
    engine_max_in_flight: int = 0
    # The engine profile per engine kind that sizes its places and TTFT SLO, as
    # "sglang=sglang-cpu,vllm=/etc/loraplex/h100-vllm.json" (a reference profile's name or a
    # file `loraplex bench calibrate` wrote); empty: none (docs/admission.md).
    admission_profiles: str = ""
    # False: no places, every request goes to the engines (quotas still apply): a bench's
    # baseline, or an operator's way out.
    engine_admission: bool = True
    # A request from a tenant at or over its fair share waits this long for a place before it
    # is shed; one below its share waits what the TTFT SLO leaves over an idle TTFT (it gets
    # the next place freed). 0: 0.15x the profile's idle TTFT (the simulator's choice:
    # docs/admission.md), 5 ms without a profile.
    engine_queue_wait_s: float = 0.0
    # The TTFT SLO admission cuts waits to; 0: the profile's (3x its idle TTFT), none without.
    engine_ttft_slo_s: float = 0.0
    concurrency_lease_s: float = 15.0  # a crashed API process frees its slots within this
    # How long an admission decision may wait for Redis before `ratelimit_fail_mode` applies.
    # 0.1 s was too tight on a busy 2-core host (spurious 503s at 64 streams).
    ratelimit_redis_timeout_s: float = 0.5
    # Connections in each of this process's Redis pools. A call that finds them all busy
    # waits up to `ratelimit_redis_timeout_s` for one, then fails (admission: 503), never hangs.
    redis_max_connections: int = 64
    # Readers of resumable streams block in XREAD on a Redis pool of their own, this large,
    # so however many there are, admission keeps its connections (loraplex.connections).
    redis_reader_connections: int = 128
    # Resume readers (`GET .../{id}/events`) this API process follows at once; past it, 503.
    # Each also holds a place under its tenant's `concurrent_streams` (resume_readers.py).
    resume_max_readers: int = 64

    # Fine-tuning workers.
    job_heartbeat_timeout_s: float = 60.0  # a running job silent this long lost its worker
    job_reap_interval_s: float = 15.0
    job_max_attempts: int = 3
    job_progress_interval_s: float = 2.0  # at most one progress event this often
    # Training states kept per job: resuming needs only the newest, the rest cost storage
    # that counts against the tenant's `max_storage_bytes`.
    job_checkpoints_kept: int = 3
    # The API address workers send eval runs' requests to (as the tenant, with a key minted
    # for the run, so its quotas and usage apply); empty: `host`:`port` (loopback for 0.0.0.0).
    eval_api_url: str = ""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from `environ` (default: the process environment)."""
        env = os.environ if environ is None else environ
        hints = get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = _parse(f.name, hints[f.name], raw, env)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """These settings as `LORAPLEX_*` variables, to start another process with them."""
        env = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "engines":
                value = json.dumps([{k: getattr(e, k) for k in e.__slots__} for e in value])
            elif f.name == "oidc_providers":
                value = providers_to_json(value)
            elif isinstance(value, bool):
                value = "true" if value else "false"
            env[PREFIX + f.name.upper()] = str(value)
        return env

    @property
    def is_local(self) -> bool:
        """Local mode: the embedded all-in-one on one machine, where the secrets may be the
        development defaults and the console is served over plain HTTP."""
        return self.is_embedded

    @property
    def cookies_secure(self) -> bool:
        """Whether cookies are `Secure` and HSTS is sent (`secure_cookies`)."""
        choice = self.secure_cookies.strip().lower()
        if choice == "auto":
            return not self.is_local
        return choice in {"1", "true", "yes", "on"}

    @property
    def is_embedded(self) -> bool:
        """True when running without external services (SQLite, no Redis)."""
        return self.database_url.startswith("sqlite") or not self.redis_url

    def __repr__(self) -> str:
        """The settings with secrets and URL passwords hidden: a repr ends up in logs and
        tracebacks, and `redis://user:password@host` is a credential."""
        shown = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in SECRET_FIELDS and value:
                value = "***"
            elif f.name.endswith("_url") and isinstance(value, str):
                value = redact_url(value)
            shown.append(f"{f.name}={value!r}")
        return f"Settings({', '.join(shown)})"


# Fields whose whole value is a secret (URLs are shown with their password hidden).
SECRET_FIELDS = frozenset({"secret_key", "s3_secret_access_key", "agent_token",
                           "node_credential", "engine_api_key"})  # fmt: skip


def redact_url(url: str) -> str:
    """`url` with the password of its user-info replaced by `***` (for logs)."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}"


def _parse(name: str, hint: Any, raw: str, env: Mapping[str, str]) -> Any:
    """Convert one environment string to the setting's type, naming the setting on error."""
    try:
        if hint is bool:
            if raw.lower() in {"1", "true", "yes", "on"}:
                return True
            if raw.lower() in {"0", "false", "no", "off", ""}:
                return False
            raise ValueError(f"not a boolean: {raw!r}")
        if hint is int:
            return int(raw)
        if hint is float:
            return float(raw)
        if hint is Path:
            return Path(raw)
        if name == "engines":
            return tuple(EngineEndpoint(**item) for item in json.loads(raw or "[]"))
        if name == "oidc_providers":
            return providers_from_json(raw, env)
        return raw
    except (ValueError, TypeError, OSError) as exc:  # a provider's entry: ValueError
        raise SettingsError(f"{PREFIX}{name.upper()}: {exc}") from exc
