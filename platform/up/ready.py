"""What `loraplex up` prints once the platform serves: where to go, how to sign in, what to run."""

from __future__ import annotations

import json
from collections.abc import Callable

from loraplex.serving.engines.launcher import EngineConfig
from loraplex.settings import Settings
from loraplex.up.demo import ADAPTERS, QUESTION, Credentials
from loraplex.up.layout import BASE_MODEL

Say = Callable[[str], None]


def print_ready(
    settings: Settings,
    credentials: Credentials,
    engine: EngineConfig | None,
    timings: dict[str, float],
    total_s: float,
    say: Say,
) -> None:
    """The ready banner: console, logins, key, models and two copy-paste examples."""
    url = f"http://{settings.host}:{settings.port}"
    phases = ", ".join(f"{name} {seconds:.0f}s" for name, seconds in timings.items())
    models = ", ".join(f"{a.model} (rank {a.rank})" for a in ADAPTERS)
    example = ADAPTERS[-1].model
    lines = [
        "",
        f"Loraplex is up, ready in {total_s:.0f}s ({phases})",
        "",
        f"  Console:       {url}/console/",
        f"  Tenant admin:  {credentials.admin_email}  password: {credentials.admin_password}",
        f"  Operator:      {credentials.operator_email}  password: "
        f"{credentials.operator_password}  (admin UI: {url}/admin/)",
        f"  API key:       {credentials.api_key}",
        f"  API base URL:  {url}/v1",
        f"  Models:        {models}, {BASE_MODEL} (the base)",
        f"  Kept in:       {settings.data_dir / 'credentials.json'} (only you can read it)",
    ]
    if engine is None:
        lines.append("  Engine:        none started (--no-engine); LORAPLEX_ENGINES serve")
    # Greedy: the demo adapters give their trained answers; at OpenAI's default temperature
    # of 1 the small generated model samples noise.
    body = {
        "model": example,
        "temperature": 0,
        "stream": True,
        "messages": [{"role": "user", "content": QUESTION}],
    }
    lines += [
        "",
        "Stream an answer with curl:",
        f"  curl -N {url}/v1/chat/completions -H 'Authorization: Bearer {credentials.api_key}' "
        f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'",
        "",
        "or with the openai SDK (pip install openai):",
        "  python3 - <<'EOF'",
        "  from openai import OpenAI",
        f'  client = OpenAI(base_url="{url}/v1", api_key="{credentials.api_key}")',
        f'  for chunk in client.chat.completions.create(model="{example}", stream=True,',
        f'          messages=[{{"role": "user", "content": "{QUESTION}"}}], temperature=0):',
        '      print(chunk.choices[0].delta.content or "", end="", flush=True)',
        "  print()",
        "  EOF",
        "",
        f"Logs: {settings.data_dir / 'logs'}/. Ctrl-C stops everything.",
    ]
    for line in lines:
        say(line)
