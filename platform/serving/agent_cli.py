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
    help="Bind address; beyond loopback the agent must register itself (--register-with) "
    "or LORAPLEX_AGENT_TOKEN be set.",
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
@click.option(
    "--name",
    default=None,
    help="Engine name, the one the node credential was minted for [default: this host's name].",
)
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
    restart (placement then loads back what it held) and deregisters on shutdown, with its
    own node credential (LORAPLEX_NODE_CREDENTIAL, from `loraplex nodes mint <name>`), which
    may register only that engine name. Callers of the agent (the API processes) must send
    as a bearer token the secret it made at start and registered (only with --register-with),
    or LORAPLEX_AGENT_TOKEN when that is set here; the agent sends LORAPLEX_ENGINE_API_KEY to
    its engine.
    """
    import uvicorn

    from loraplex.auth.agent_token import new_agent_secret
    from loraplex.connections import open_object_store
    from loraplex.serving.agent_app import AgentExposed, check_bind, create_agent_app
    from loraplex.serving.agent_registration import Registrar, Registration
    from loraplex.serving.disk_cache import DiskCache
    from loraplex.serving.engines import make_driver
    from loraplex.serving.live.ops import LocalOps
    from loraplex.serving.registry import EngineHandle
    from loraplex.settings import Settings

    settings = Settings.from_env()
    # Registered, the agent accepts the secret it sends the API (and the shared token if set).
    secret = new_agent_secret() if api_url else ""
    try:
        check_bind(host, settings.agent_token or secret)
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
        driver=make_driver(engine_kind, engine_url, api_key=settings.engine_api_key or None),
        healthy=True,
    )
    registrar = None
    if api_url:
        if not settings.node_credential or not base_model:
            raise click.UsageError(
                "--register-with needs LORAPLEX_NODE_CREDENTIAL (an operator mints it for this "
                "engine's name: `loraplex nodes mint <name>`) and --base-model"
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
            agent_secret=secret,
        )
        registrar = Registrar(
            api_url, settings.node_credential, registration, f"{engine_url.rstrip('/')}/health",
            heartbeat_s=settings.agent_heartbeat_s, on_restart=lambda: handle.loaded.clear(),
        )  # fmt: skip
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per heartbeat
    app = create_agent_app(
        handle, LocalOps(cache), settings.agent_token, registrar,
        node_credential=settings.node_credential, drain_wait_s=settings.total_timeout_s,
    )  # fmt: skip
    uvicorn.run(app, host=host, port=port)
