"""Admission for /v1: per-tenant rate limits and concurrency leases in Redis, overload shedding."""

from loraplex.gateway.admission.errors import LimiterUnavailable, Overloaded, RateLimited
from loraplex.gateway.admission.overload import AdmissionController
from loraplex.gateway.admission.policy import EngineLoad, ShedDecision
from loraplex.gateway.admission.service import Admission, FailMode
from loraplex.gateway.admission.ticket import Ticket

__all__ = [
    "Admission",
    "AdmissionController",
    "EngineLoad",
    "FailMode",
    "LimiterUnavailable",
    "Overloaded",
    "RateLimited",
    "ShedDecision",
    "Ticket",
]
