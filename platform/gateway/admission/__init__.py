"""Admission for /v1: whether a request may run now, decided before any engine is touched.

Three parts, each named for what it decides:
- `TenantQuotas` (service.py): the tenant's rate limits, token budgets and concurrency
  leases, in Redis;
- `OverloadShedder` (overload.py): shedding by estimated TTFT when the engines are behind;
- `EngineGate` (loraplex.gateway.gate): a place on the engines, decided by the admission
  core (core/) over each engine's places (places.py), shared fairly between tenants; it
  calls the other two.
An admitted request holds an `AdmissionHandle` (handle.py), and through it its quotas'
`Ticket` (ticket.py), until it ends.
"""

from loraplex.gateway.admission.errors import LimiterUnavailable, Overloaded, RateLimited
from loraplex.gateway.admission.overload import OverloadShedder
from loraplex.gateway.admission.policy import EngineLoad, ShedDecision
from loraplex.gateway.admission.service import FailMode, TenantQuotas
from loraplex.gateway.admission.ticket import Ticket

__all__ = [
    "EngineLoad",
    "FailMode",
    "LimiterUnavailable",
    "OverloadShedder",
    "Overloaded",
    "RateLimited",
    "ShedDecision",
    "TenantQuotas",
    "Ticket",
]
