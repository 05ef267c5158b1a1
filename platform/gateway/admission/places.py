"""How many requests each engine takes at once: the places the admission core hands out.

An engine's places come from, in order:
0. none at all with `LORAPLEX_ENGINE_ADMISSION=false` (a bench's baseline);
1. `LORAPLEX_ENGINE_MAX_IN_FLIGHT` when it is set: a fixed number per engine;
2. the engine profile named for its kind in `LORAPLEX_ADMISSION_PROFILES`
   (`sglang=sglang-cpu,vllm=/etc/loraplex/h100-vllm.json`), as the simulator gives it to the
   core (docs/admission.md, "Overload in the simulator"): an engine is told what it holds
   at once and the profile's TTFT model paces its prefills, alone or in a pool whose
   engines share its profile (the core predicts per engine); in a pool of different
   profiles, the requests in flight at each profile's capacity and the prefills one step
   takes within its SLO pace it. An operator writes a profile for a GPU with
   `loraplex bench calibrate`;
3. otherwise `max(LORAPLEX_ADMISSION_PARALLELISM, the engine's GPU slots)`.

Nothing here learns from live TTFTs: a host that stalls (as this project's 2-core CI does)
cannot tell a policy's effect from its own noise, so the numbers are decided from a profile
measured once, not tuned per request.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from loraplex.gateway.admission.core import CoreConfig
from loraplex.serving.registry import EngineHandle

log = logging.getLogger("loraplex.gateway.admission")

UNLIMITED = 1_000_000  # the places of an engine with admission off


@dataclass(frozen=True, slots=True)
class EnginePlaces:
    """What one engine takes: places, prefill places (None: no limit) and where the numbers
    came from. With a profile, also the core's bounds for it, without and with the profile's
    TTFT model, and what the engine holds at once (its places when the model paces it)."""

    places: int
    prefill_places: int | None
    source: str  # "setting" | "profile <name>" | "slots" | "off"
    config: CoreConfig | None = None  # the profile's bounds, places paced by prefill places
    paced_config: CoreConfig | None = None  # the same with the profile's TTFT model
    holds: int = 0  # requests the engine holds at once (the places under the TTFT model)


def parse_profiles(text: str) -> dict[str, str]:
    """`kind=profile,kind=profile` -> {kind: profile name or path}; refuses a malformed entry."""
    named: dict[str, str] = {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        kind, sep, profile = entry.partition("=")
        if not sep or not kind.strip() or not profile.strip():
            raise ValueError(f"LORAPLEX_ADMISSION_PROFILES: {entry!r} is not kind=profile")
        named[kind.strip()] = profile.strip()
    return named


class PlaceBook:
    """Each engine's places, by the rules in the module docstring."""

    def __init__(
        self,
        *,
        fixed: int = 0,
        parallelism: int = 1,
        profiles: dict[str, EnginePlaces] | None = None,
        off: bool = False,
    ):
        self.fixed, self.parallelism, self.off = fixed, max(1, parallelism), off
        self.profiles = profiles or {}  # engine kind -> its places from a profile

    @classmethod
    def sized(
        cls, fixed: int, parallelism: int, profiles_setting: str, off: bool = False
    ) -> PlaceBook:
        """A book whose profiles are searched now (about half a second each, on a thread
        at start-up: the search runs the simulator)."""
        profiles = {
            kind: places_of_profile(name) for kind, name in parse_profiles(profiles_setting).items()
        }
        for kind, places in profiles.items():
            log.info(
                "admission: %s engines take %d places (%s)", kind, places.places, places.source
            )
        return cls(fixed=fixed, parallelism=parallelism, profiles=profiles, off=off)

    def of(self, engine: EngineHandle) -> EnginePlaces:
        """The places of one engine."""
        if self.off:
            return EnginePlaces(UNLIMITED, None, "off")
        if self.fixed > 0:
            return EnginePlaces(self.fixed, None, "setting")
        profiled = self.profiles.get(engine.kind)
        if profiled is not None:
            return profiled
        return EnginePlaces(max(self.parallelism, engine.gpu_slots), None, "slots")


def places_of_profile(name_or_path: str) -> EnginePlaces:
    """An engine profile's places and core bounds, as the simulator's overload scenario
    gives them to the core (`scenario.core_config_for`, `places_told`)."""
    from loraplex.serving.simulator.engine_profile import load_profile
    from loraplex.serving.simulator.overload import scenario
    from loraplex.serving.simulator.overload.capacity import yardstick

    profile = load_profile(name_or_path)
    yard = yardstick(profile)
    return EnginePlaces(
        yard.places,
        yard.prefill_places,
        f"profile {profile.name}",
        config=scenario.core_config_for(profile, yard, with_model=False),
        paced_config=scenario.core_config_for(profile, yard, with_model=True),
        holds=scenario.places_told("core", profile, yard).places,
    )
