"""Correctness probes: recorded greedy answers replayed on engines to catch wrong weights."""

from loraplex.serving.probes.prober import ProbeConfig, Prober
from loraplex.serving.probes.store import ProbeStore, ProbeSubject
from loraplex.serving.probes.verdict import Judgement, Verdict, judge

__all__ = ["Judgement", "ProbeConfig", "ProbeStore", "ProbeSubject", "Prober", "Verdict", "judge"]
