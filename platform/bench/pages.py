"""`loraplex bench pages`: how long each console and admin page takes to render, on a
running `loraplex up` (its demo data and the logins it kept in `<data dir>/credentials.json`).

Every page is fetched `--rounds` times, interleaved, signed in as the demo's tenant admin or
its operator, over loopback. Baseline in the same run: `GET /healthz` (no session, no
database), so the last column is what the page itself costs.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path

import click
import httpx

from loraplex.settings import Settings
from loraplex.up.demo import Credentials
from loraplex.up.layout import Layout

CONSOLE = [
    "/console/",
    "/console/keys",
    "/console/users",
    "/console/adapters",
    "/console/fine-tunes/",
    "/console/playground",
    "/console/audit",
    "/account/",
]
POLLED = [  # the parts of pages that refresh themselves, asked for every 2-3 s per open tab
    "/admin/live/figures",
    "/admin/live/traffic",
    "/admin/live/placement",
    "/admin/live/tenants",
    "/admin/engines/live",
]
HTMX = {"hx-request": "true"}  # what htmx sends with a poll
ADMIN = [
    "/admin/",
    "/admin/tenants",
    "/admin/audit",
    "/admin/adapters",
    "/admin/engines/",
    "/admin/plans/",
    "/admin/jobs",
]


def signed_in(url: str, email: str, password: str) -> httpx.Client:
    """A client holding a console session, signed in as a browser signs in."""
    client = httpx.Client(base_url=url, timeout=30)
    client.get("/login")
    form = {"email": email, "password": password, "_csrf_token": client.cookies["csrftoken"]}
    answer = client.post("/login", data=form)
    if answer.status_code != 303 and answer.status_code != 302:
        raise click.ClickException(f"signing in as {email} failed ({answer.status_code})")
    return client


def _linked(client: httpx.Client, page: str, pattern: str, limit: int = 2) -> list[str]:
    """Up to `limit` distinct links matching `pattern` on `page` (the demo's own objects)."""
    found = dict.fromkeys(re.findall(pattern, client.get(page).text))
    return list(found)[:limit]


def percentile(values: list[float], share: float) -> float:
    """The `share` quantile by the nearest-rank method (share in 0..1)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, round(share * len(ordered)) - 1))]


@click.command("pages")
@click.option("--url", default="http://127.0.0.1:8000", show_default=True, help="`up`'s API")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None, help="`up`'s data dir")
@click.option("--rounds", default=30, show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=Path("var/bench/pages.json"))
def bench_pages(url: str, data_dir: Path | None, rounds: int, out: Path) -> None:
    """p50 and p95 time of every console and admin page on `loraplex up`'s demo data."""
    root = data_dir or Settings().data_dir
    credentials_file = Layout(Path(root)).credentials
    if not credentials_file.exists():
        raise click.ClickException(f"no {credentials_file}: start `make run` first")
    kept = Credentials.load_or_make(credentials_file)
    tenant = signed_in(url, kept.admin_email, kept.admin_password)
    operator = signed_in(url, kept.operator_email, kept.operator_password)
    console = CONSOLE + _linked(tenant, "/console/adapters", r'href="(/console/adapters/[\w.-]+)"')
    console += _linked(tenant, "/console/fine-tunes/", r'href="(/console/fine-tunes/ftjob-\w+)"')
    console += [
        f"{page}/placement" for page in console if page.count("/") == 3 and "adapters/" in page
    ]
    admin = ADMIN + _linked(operator, "/admin/tenants", r'href="(/admin/tenants/[0-9a-f-]{36})"')
    admin += POLLED
    plan = [(None, "/healthz")] + [(tenant, p) for p in console] + [(operator, p) for p in admin]
    times: dict[str, list[float]] = {path: [] for _, path in plan}
    bare = httpx.Client(base_url=url, timeout=30)
    for _ in range(rounds):
        for client, path in plan:
            started = time.perf_counter()
            polled = path.endswith(("/placement", "/live")) or "/live/" in path
            answer = (client or bare).get(path, headers=HTMX if polled else None)
            times[path].append((time.perf_counter() - started) * 1000)
            if answer.status_code != 200:
                raise click.ClickException(f"{path} answered {answer.status_code}")
    baseline = percentile(times["/healthz"], 0.95)
    rows = [
        {
            "page": path,
            "p50_ms": round(statistics.median(ms), 1),
            "p95_ms": round(percentile(ms, 0.95), 1),
            "p95_over_healthz_ms": round(percentile(ms, 0.95) - baseline, 1),
        }
        for path, ms in times.items()
    ]
    click.echo(f"{rounds} rounds, each page once per round, interleaved\n")
    click.echo("| page | p50 | p95 | p95 minus /healthz's |")
    click.echo("|---|---|---|---|")
    for row in rows:
        click.echo(
            f"| `{row['page']}` | {row['p50_ms']} ms | {row['p95_ms']} ms "
            f"| {row['p95_over_healthz_ms']} ms |"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"rounds": rounds, "rows": rows}, indent=2))
    click.echo(f"\nwritten to {out}")
