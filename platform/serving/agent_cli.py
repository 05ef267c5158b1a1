"""`loraplex agent`: the per-node placement agent for multi-node deployments."""

from __future__ import annotations

import logging
import socket
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
@click.option(
    "--register-with",
    "api_url",
    default=None,
    help="API base URL to register this engine with (and heartbeat to); without it, "
    "register the engine by hand with agent_url pointing here.",
)
@click.option("--name", default=None, help="Engine name [default: this host's name].")
@click.option(
    "--advertise-url",
    default=None,
    help="This agent's URL as API processes reach it [default: http://HOST:PORT].",
)
@click.option(
    "--engine-advertise-url",
    default=None,
    help="The engine's URL as API processes reach it [default: --engine-url].",
)
@click.option("--base-model", default=None, help="The base model the engine serves.")
@click.option("--max-lora-rank", type=int, default=64, show_default=True, help="Rank class.")
@click.option(
    "--gpu-slots",
    type=int,
    default=8,
    show_default=True,
    help="SGLang --max-loras-per-batch / vLLM --max-loras.",
)
@click.option(
    "--host-slots",
    type=int,
    default=32,
    show_default=True,
    help="SGLang --max-loaded-loras / vLLM --max-cpu-loras.",
)
def agent(
    engine_url: str,
    engine_kind: str,
    host: str,
    port: int,
    cache_dir: Path | None,
    cache_bytes: int | None,
    api_url: str | None,
    name: str | None,
    advertise_url: str | None,
    engine_advertise_url: str | None,
    base_model: str | None,
    max_lora_rank: int,
    gpu_slots: int,
    host_slots: int,
) -> None:
    """Serve /load, /unload and /adapters for this node's engine; own its disk cache.

    The object store comes from the usual LORAPLEX_* settings. With --register-with, the
    agent registers its engine with the API, heartbeats, re-registers after an engine
    restart (placement then loads back what it held) and deregisters on shutdown. Callers
    must send LORAPLEX_AGENT_TOKEN as a bearer token, and so does the agent to the API.
    """
    import uvicorn

    from loraplex.connections import open_object_store
    from loraplex.serving.agent_app import AgentExposed, check_bind, create_agent_app
    from loraplex.serving.agent_registration import Registrar, Registration
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
    registrar = None
    if api_url:
        if not settings.agent_token or not base_model:
            raise click.UsageError(
                "--register-with needs LORAPLEX_AGENT_TOKEN (the API's) and --base-model"
            )
        registration = Registration(
            name=name or socket.gethostname().lower(),
            url=engine_advertise_url or engine_url,
            kind=engine_kind,
            base_model=base_model,
            agent_url=advertise_url or f"http://{host}:{port}",
            max_lora_rank=max_lora_rank,
            gpu_slots=gpu_slots,
            host_slots=host_slots,
        )
        registrar = Registrar(
            api_url, settings.agent_token, registration, f"{engine_url.rstrip('/')}/health",
            heartbeat_s=settings.agent_heartbeat_s, on_restart=lambda: handle.loaded.clear(),
        )  # fmt: skip
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per heartbeat
    app = create_agent_app(handle, LocalOps(cache), settings.agent_token, registrar)
    uvicorn.run(app, host=host, port=port)
