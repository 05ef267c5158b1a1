"""Admission as a pure core: events in (arrival, quota refusal, first token, finish, engine
report, the engine a request went to, clock tick), decisions out (admit, wait, shed with a
reason and Retry-After).

The simulator (`loraplex simulate --scenario overload`) and the live gate
(`gateway/gate.py`) drive the same code. Quotas stay in Redis: the core decides about
engine capacity and fairness, and refuses a tenant's request beyond its plan's concurrent
requests that it already runs here (the gate answers that with the quota's 429).
"""

from loraplex.gateway.admission.core.core import AdmissionCore, CoreConfig, run
from loraplex.gateway.admission.core.events import (
    OVER_CONCURRENCY,
    Admit,
    Arrival,
    Decision,
    EngineReport,
    Event,
    Finished,
    FirstToken,
    PoolEngine,
    QuotaRefused,
    Routed,
    Shed,
    Tick,
    Wait,
)
from loraplex.gateway.admission.core.limits import PlanLimits
from loraplex.gateway.admission.core.snapshot import CoreSnapshot, TenantView
from loraplex.gateway.admission.core.ttft import TtftModel

__all__ = [
    "OVER_CONCURRENCY",
    "AdmissionCore",
    "Admit",
    "Arrival",
    "CoreConfig",
    "CoreSnapshot",
    "Decision",
    "EngineReport",
    "Event",
    "Finished",
    "FirstToken",
    "PlanLimits",
    "PoolEngine",
    "QuotaRefused",
    "Routed",
    "Shed",
    "TenantView",
    "Tick",
    "TtftModel",
    "Wait",
    "run",
]
