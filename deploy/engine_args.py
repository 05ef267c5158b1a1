"""Writes the engines' command lines in the deployment files from the engine recipes.

Every engine command line in Compose and the Kubernetes manifests sits between a marker and
an end marker:

    # engine-args: kind=sglang model=Llama-3.1-8B-Instruct rank=16 gpu-slots=16 host-slots=64
    args:
      - ...
    # end engine-args

The marker states what the engine serves (model, rank class, slots; `argv=full` when the
list is the whole command line, module included); this script replaces the list with what
`loraplex engine start` passes for them (loraplex.serving.engines.recipes, the launchers).
Kubernetes placeholders (RANK, ...) pass through for kustomize to fill in. To change a model
or a class, edit the marker (and the agent's flags beside it) and run:

    .venv/bin/python deploy/engine_args.py           # rewrite
    .venv/bin/python deploy/engine_args.py --check   # exit 1 if a file is stale (the tests)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from loraplex.serving.engines.launch_sglang import SERVER_MODULE as SGLANG_MODULE
from loraplex.serving.engines.launch_vllm import VllmCpuRecipe
from loraplex.serving.engines.launcher import EngineConfig
from loraplex.serving.engines.recipes import require_recipe, sglang_args

ROOT = Path(__file__).resolve().parents[1]
FILES = [
    ROOT / "deploy" / "compose" / "compose.yaml",
    ROOT / "deploy" / "k8s" / "rank-classes" / "engine" / "engine.yaml",
    ROOT / "deploy" / "k8s" / "overlays" / "dev" / "engine-cpu.yaml",
]
HOST, PORT = "0.0.0.0", "30000"  # noqa: S104 (in a container: the pod's or node's address)
# Where the engine's --api-key comes from: Compose interpolates .env; the kubelet expands
# $(VAR) from the container's env (a secretKeyRef), so the key is in no manifest.
COMPOSE_API_KEY = "${LORAPLEX_ENGINE_API_KEY:?set LORAPLEX_ENGINE_API_KEY in .env}"
K8S_API_KEY = "$(LORAPLEX_ENGINE_API_KEY)"

MARKER = re.compile(r"^(?P<indent>\s*)# engine-args: (?P<params>.*)$")
END = "# end engine-args"
PLAIN = re.compile(r"[A-Za-z/_.-][A-Za-z0-9/_.-]*")
YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "y", "n"}


def engine_argv(params: dict[str, str], api_key: str) -> list[str]:
    """The engine's arguments after `python3 -m MODULE` (or with it, `argv=full`)."""
    model = params["model"]
    if params["kind"] == "sglang":
        module = SGLANG_MODULE
        args = sglang_args(
            require_recipe(model),
            model_path=f"/models/{model}",
            rank=params["rank"],
            gpu_slots=params["gpu-slots"],
            host_slots=params["host-slots"],
            host=HOST,
            port=PORT,
            api_key=api_key,
        )
    else:  # vllm reads its key from VLLM_API_KEY (not shown by `ps`), set beside the command
        require_recipe(model)
        config = EngineConfig(
            kind="vllm",
            model_dir=Path("/models", model),
            host=HOST,
            port=int(PORT),
            max_lora_rank=int(params["rank"]),
            max_loras=int(params["gpu-slots"]),
            max_cpu_loras=int(params["host-slots"]),
        )
        full = VllmCpuRecipe().server_command(config)
        module, args = full[2], full[3:]
    return ["python3", "-m", module, *args] if params.get("argv") == "full" else args


def yaml_scalar(value: str) -> str:
    """`value` as a YAML string: plain when it reads back as that string, else quoted."""
    if PLAIN.fullmatch(value) and value.lower() not in YAML_WORDS:
        return value
    return f"'{value}'" if "'" not in value else json.dumps(value)


def regenerate(text: str, api_key: str) -> str:
    """`text` with every marked engine list rewritten."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        match = MARKER.match(line)
        i += 1
        if not match:
            continue
        params = dict(item.split("=", 1) for item in match["params"].split())
        key_line = lines[i]  # `args:` or `command:`
        out.append(key_line)
        item_indent = " " * (len(key_line) - len(key_line.lstrip()) + 2)
        out.extend(f"{item_indent}- {yaml_scalar(a)}\n" for a in engine_argv(params, api_key))
        while lines[i].strip() != END:
            i += 1
            if i >= len(lines):
                raise SystemExit(f"an engine-args marker without '{END}'")
    return "".join(out)


def main() -> int:
    """Rewrite the files, or with --check report the stale ones."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="only report stale files")
    stale = []
    check = parser.parse_args().check
    for path in FILES:
        text = path.read_text()
        api_key = COMPOSE_API_KEY if path.name == "compose.yaml" else K8S_API_KEY
        new = regenerate(text, api_key)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not check:
                path.write_text(new)
    for path in stale:
        print(f"{'stale' if check else 'rewrote'}: {path}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
