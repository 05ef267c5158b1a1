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
    redis_url: str = ""  # empty: in-process stand-ins (embedded mode only)
    # Celery's broker; empty: Redis when `redis_url` is set, else files under data_dir/broker.
    broker_url: str = ""
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

    # Security.
    secret_key: str = DEV_SECRET_KEY  # signs the console's session and CSRF cookies
    api_key_prefix: str = "lpx"
    # Mark the console's session and CSRF cookies `Secure`: set true when served over HTTPS.
    secure_cookies: bool = False
    # Console logins per email and per client address per minute, before 429.
    login_attempts_per_minute: int = 10
    # Shared bearer token between API processes and `loraplex agent`s; empty: the agent
    # serves loopback only (see serving/agent_app.py).
    agent_token: str = ""
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

    # Streaming (see loraplex.gateway.pump.StreamLimits).
    stream_buffer_bytes: int = 256 * 1024
    stream_heartbeat_s: float = 5.0
    queue_timeout_s: float = 30.0
    ttft_timeout_s: float = 60.0
    idle_timeout_s: float = 30.0
    total_timeout_s: float = 600.0
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

    # Admission (see loraplex.gateway.admission).
    ratelimit_fail_mode: str = "closed"  # Redis unreachable: "closed" answers 503, "open" admits
    admission_ttft_budget_s: float = (
        2.0  # shed priority 0 past 1x this estimate, 1 past 2x, 2 past 4x
    )
    admission_parallelism: int = 8  # requests an engine serves at once at full speed
    # Requests in flight per engine before new ones are shed (0: no cap). For engines that run
    # every request at once (vLLM on CPU) this is what keeps admitted requests' TTFT.
    engine_max_in_flight: int = 0
    # At the cap, a request from a tenant at or above its fair share waits this long for a
    # place before it is shed (one below its share waits up to half the engine's TTFT
    # target, at least 0.1 s: it gets the next place freed). Without a wait, a slot freed
    # between two arrivals stays idle and goodput drops; every millisecond of it is added to
    # an admitted request's TTFT. Measured at 2x capacity on SGLang (CPU, adaptive cap, two
    # rounds each): 0.005 s gave p99 90-100 ms at 19-22 requests/s, 0.03 s p99 100-125 ms
    # at 17-21/s.
    engine_queue_wait_s: float = 0.005
    # The cap adapts per engine (loraplex.gateway.admission.engine_cap): it starts at the
    # engine's batch slots and grows while the median TTFT meets its target, is cut in
    # proportion when it does not or when the engine keeps a queue; `engine_max_in_flight`
    # then only bounds it from above.
    engine_adaptive_cap: bool = True
    # The TTFT the adaptive cap holds the median of recent requests to; 0: learned, the
    # larger of 2x the median and the 90th percentile (from 10 of them) of the TTFT of
    # requests that found the engine idle, and the tail (docs/admission.md) cuts it too.
    engine_ttft_slo_s: float = 0.0
    concurrency_lease_s: float = 15.0  # a crashed API process frees its slots within this
    # How long an admission decision may wait for Redis before `ratelimit_fail_mode` applies.
    # 0.1 s was too tight on a busy 2-core host (spurious 503s at 64 streams).
    ratelimit_redis_timeout_s: float = 0.5

    # Fine-tuning workers.
    job_heartbeat_timeout_s: float = 60.0  # a running job silent this long lost its worker
    job_reap_interval_s: float = 15.0
    job_max_attempts: int = 3
    job_progress_interval_s: float = 2.0  # at most one progress event this often

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Build settings from `environ` (default: the process environment)."""
        env = os.environ if environ is None else environ
        hints = get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(PREFIX + f.name.upper())
            if raw is not None:
                values[f.name] = _parse(f.name, hints[f.name], raw)
        return cls(**values)

    def to_env(self) -> dict[str, str]:
        """These settings as `LORAPLEX_*` variables, to start another process with them."""
        env = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "engines":
                value = json.dumps([{k: getattr(e, k) for k in e.__slots__} for e in value])
            elif isinstance(value, bool):
                value = "true" if value else "false"
            env[PREFIX + f.name.upper()] = str(value)
        return env

    @property
    def is_embedded(self) -> bool:
        """True when running without external services (SQLite, no Redis)."""
        return self.database_url.startswith("sqlite") or not self.redis_url


def _parse(name: str, hint: Any, raw: str) -> Any:
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
        return raw
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"{PREFIX}{name.upper()}: {exc}") from exc
