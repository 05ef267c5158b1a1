"""`loraplex agent`: the per-node placement agent for multi-node deployments."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("agent")
@click.option("--engine-url", required=True, help="This node's engine, e.g. http://127.0.0.1:8100")
@click.option(
    "--engine-kind", type=click.Choice(["vllm", "sglang"]), default="sglang", show_default=True
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Bind address; beyond loopback LORAPLEX_AGENT_TOKEN must be set.",
)
@click.option("--port", type=int, default=8200, show_default=True)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Adapter cache directory [default: LORAPLEX_DATA_DIR/cache].",
)
@click.option(
    "--cache-bytes", type=int, default=None, help="Cache budget [default: disk_cache_bytes]."
)
def agent(
    engine_url: str,
    engine_kind: str,
    host: str,
    port: int,
    cache_dir: Path | None,
    cache_bytes: int | None,
) -> None:
    """Serve /load, /unload and /adapters for this node's engine; own its disk cache.

    The object store comes from the usual LORAPLEX_* settings. Register the engine with
    `agent_url` pointing here and the gateway loads and unloads through this agent; callers
    must send LORAPLEX_AGENT_TOKEN as a bearer token.
    """
    import uvicorn

    from loraplex.api.deps import open_object_store
    from loraplex.serving.agent_app import AgentExposed, check_bind, create_agent_app
    from loraplex.serving.disk_cache import DiskCache
    from loraplex.serving.engines import make_driver
    from loraplex.serving.live.ops import LocalOps
    from loraplex.serving.registry import EngineHandle
    from loraplex.settings import Settings

    settings = Settings.from_env()
    try:
        check_bind(host, settings.agent_token)
    except AgentExposed as exc:
        raise click.UsageError(str(exc)) from exc
    cache = DiskCache(
        cache_dir or settings.data_dir / "cache",
        cache_bytes or settings.disk_cache_bytes,
        open_object_store(settings),
    )
    handle = EngineHandle(
        id="local",
        name="local",
        url=engine_url,
        kind=engine_kind,
        base_model="",
        max_lora_rank=0,
        gpu_slots=0,
        host_slots=0,
        driver=make_driver(engine_kind, engine_url),
        healthy=True,
    )
    app = create_agent_app(handle, LocalOps(cache), settings.agent_token)
    uvicorn.run(app, host=host, port=port)
