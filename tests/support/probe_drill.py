"""What the probe drills share (tests/integration/probes): the drill's state, its rows in the
database, the prober watching placement, a served version made a fine-tune's output, and what
the engines page shows failing.

The drills differ in their engines (stand-ins answering from their weights, or the real SGLang
CPU engine) and in how they swap an engine's weights behind the platform's back.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from loraplex.adapters.store import ObjectStore
from loraplex.db.models import (
    Adapter,
    AdapterVersion,
    BaseModel,
    DatasetFile,
    FineTuneJob,
    Plan,
    Tenant,
    VersionStatus,
)
from loraplex.serving.live import VersionFacts
from loraplex.serving.probes import ProbeConfig, Prober, ProbeStore
from loraplex.serving.probes.store import failing_probes
from loraplex.serving.registry import EngineHandle
from tests.support.live_cluster import Cluster


@dataclass
class Drill:
    """Engines serving one base model, two versions, the prober watching placement."""

    cluster: Cluster
    prober: Prober
    base_model: str
    adapter_id: uuid.UUID
    engines: list[EngineHandle]
    served: VersionFacts  # the version the drill sabotages
    other: VersionFacts  # its weights are what the sabotaged engine serves instead


def watch_placement(
    cluster: Cluster,
    sessions: async_sessionmaker[AsyncSession],
    probe_every_s: float,
    object_store: ObjectStore | None = None,
) -> Prober:
    """A prober replaying every `probe_every_s`, told by the cluster's placement what it
    loads (its `watcher`); `object_store` holds the training files a fine-tune's probes
    come from."""
    prober = Prober(ProbeStore(sessions), cluster.placement, object_store,
                    ProbeConfig(probe_every_s))  # fmt: skip
    cluster.placement.watcher = prober
    return prober


async def drill_rows(
    sessions: async_sessionmaker[AsyncSession], versions: list[VersionFacts]
) -> tuple[str, uuid.UUID]:
    """A tenant, base model and adapter in the database with `versions` as its versions:
    the base model's name and the adapter's id."""
    tag = secrets.token_hex(4)
    async with sessions() as session:
        plan: Plan = (await session.scalars(select(Plan).limit(1))).one()
        tenant = Tenant(slug=f"probe-{tag}", name=f"probe {tag}", plan_id=plan.id)
        base = BaseModel(
            name=f"probe-base-{tag}", source="test", architecture="llama",
            hidden_size=64, num_layers=2, vocab_size=128, max_context=512,
        )  # fmt: skip
        session.add_all([tenant, base])
        await session.flush()
        adapter = Adapter(tenant_id=tenant.id, name="drill", base_model_id=base.id)
        session.add(adapter)
        await session.flush()
        for number, facts in enumerate(versions, start=1):
            session.add(
                AdapterVersion(
                    id=facts.version_id, adapter_id=adapter.id, tenant_id=tenant.id,
                    number=number, status=VersionStatus.READY, rank=facts.rank,
                )
            )  # fmt: skip
        await session.commit()
        return base.name, adapter.id


async def shown_failing(
    sessions: async_sessionmaker[AsyncSession], engine_id: str, wait_s: float = 2.0
) -> list[str]:
    """What the engines page shows failing on the engine, once the replay is saved (waits
    at most `wait_s` for it)."""
    for _ in range(100):
        async with sessions() as session:
            shown = (await failing_probes(session)).get(engine_id)
        if shown:
            return [p.subject for p in shown]
        await asyncio.sleep(wait_s / 100)
    return []


async def make_fine_tuned(
    drill: Drill, sessions: async_sessionmaker[AsyncSession], rows: list[str]
) -> None:
    """Make the served version the output of a fine-tune on a file of `rows` user prompts."""
    source = drill.cluster.root / "train.jsonl"
    lines = [{"messages": [{"role": "user", "content": r}, {"role": "assistant", "content": "a"}]}
             for r in rows]  # fmt: skip
    source.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    key = f"files/{uuid.uuid4().hex}.jsonl"
    drill.cluster.store.put_file(key, source)
    async with sessions() as session:
        adapter = await session.get_one(Adapter, drill.adapter_id)
        file = DatasetFile(
            tenant_id=adapter.tenant_id, purpose="fine-tune", filename="train.jsonl",
            storage_key=key,
        )  # fmt: skip
        session.add(file)
        await session.flush()
        job = FineTuneJob(
            tenant_id=adapter.tenant_id, base_model_id=adapter.base_model_id,
            model=drill.base_model, training_file_id=file.id, suffix="probe",
        )  # fmt: skip
        session.add(job)
        await session.flush()
        version = await session.get_one(AdapterVersion, drill.served.version_id)
        version.job_id = job.id
        await session.commit()
