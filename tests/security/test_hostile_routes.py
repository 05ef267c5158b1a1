"""Tenant A sends hostile bodies and files to every other route that takes one, while B streams.

The other files attack the routes whose parsers cost the most (chat bodies, adapter and
training-file uploads, sign-in, resume readers). This one covers the rest of the routes a
tenant can reach with a body or a file, with the same builders (`hostile.py`), and the routes
it cannot reach (an operator's, a node's), which must refuse A before reading its body:

| route | attacks |
|---|---|
| `POST /v1/completions`, `POST /v1/responses` | deep, huge numbers, wide, 9 MB, deep and 10^9-long schemas |
| `POST /v1/fine_tuning/jobs` | deep, huge numbers, 1 MB of integrations, odd suffixes and alias |
| `POST /v1/files` (purpose `evals`) | one 48 MB line, a line nested 30k deep |
| `POST /v1/files`, `POST …/versions` (multipart) | 100k parts in one body |
| `POST /v1/evals`, `POST /v1/evals/{id}/runs` | deep, huge numbers, too large, deep schema, 200k items |
| `POST …/adapters/{name}/versions` as JSON (import) | deep, a `file://` source, too large |
| `PUT …/aliases/{alias}`, `…/canary` | deep, huge version and weight, odd alias names |
| `POST …/api-keys`, `…/users`, `…/budgets`, `PATCH …/budgets/{id}` | deep, wide, odd names and emails, huge amounts, a role above A's |
| the console: adapter versions, training files (multipart) | big-integer header, zip of 200k entries, one 48 MB line |
| the console's forms, playground, password change | 120k-field forms, Unicode digits, a deep body, a 900 kB password |
| `POST /login`, before signing in | 64 different 1 MB forms |
| operators' and nodes' routes, by A | 1 MB deep bodies |

Each case is one measured attack of several requests; every request must be refused with a
4xx that names its own problem (`check_each`), besides the suite's usual bounds. The routes
without a body (cancel, rollback, pin, archive, delete, sign-out) take nothing to attack.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.security import hostile
from tests.security.conftest import Outcome, Target, check_each
from tests.security.test_hostile_bodies import HOSTILE_NAMES

JSON = "application/json"
FORM = "application/x-www-form-urlencoded"
TOO_DEEP = ("deep", "nesting", "recursion", "'{' and '[' characters", "characters; at most")
TOO_LARGE = ("bytes", "too large", "large")
# A string check an eval's runs are graded with; the item schema every item must match.
CRITERION = {
    "type": "string_check", "name": "c", "operation": "eq",
    "input": "{{sample.output_text}}", "reference": "x",
}  # fmt: skip
ITEM_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


@dataclass(frozen=True)
class Send:
    """One hostile request of tenant A's: with its key, or (`console`) its console session."""

    method: str
    path: str
    names: tuple[str, ...]  # one of these must be in the refusal's message
    body: bytes = b""
    content_type: str = JSON
    files: tuple[Path, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()
    console: bool = False


@dataclass(frozen=True)
class Context:
    """What the cases send to: the target and tenant A's eval and a folder for files."""

    target: Target
    eval_id: str
    folder: Path

    @property
    def tenant(self) -> str:
        return f"/api/v1/tenants/{self.target.a.id}"

    @property
    def model(self) -> str:
        return self.target.model


def _generation(route: str) -> Callable[[Context], list[Send]]:
    """Every body attack of the chat route, shaped for another /v1 generation route."""

    def sends(ctx: Context) -> list[Send]:
        prompt = hostile.PROMPTS[route].split(":", 1)[0]  # "prompt" or "input"
        return [
            Send("POST", route, TOO_DEEP, hostile.deep_json_body()),
            Send("POST", route, ("out of range", hostile.MAX_TOKENS[route]),
                 hostile.huge_numbers_for(route, ctx.model)),
            Send("POST", route, (*TOO_LARGE, "'{' and '['", prompt.strip('"')),
                 hostile.wide_list(f'{{"model":"{ctx.model}",{prompt}:{{wide}}}}',
                                   '{"role":"user","content":"a"}' if route.endswith("responses")
                                   else '"a"', 200_000)),
            Send("POST", route, TOO_LARGE, b" " * (9 * 2**20) + b"{}"),
            Send("POST", route, ("deep", "depth"),
                 hostile.schema_for(route, ctx.model, hostile.deep_schema())),
            Send("POST", route, ("minitems",),
                 hostile.schema_for(route, ctx.model, hostile.REPETITION_SCHEMA)),
        ]  # fmt: skip

    return sends


def _fine_tuning_jobs(ctx: Context) -> list[Send]:
    route, job = "/v1/fine_tuning/jobs", f'"model":"{ctx.model}","training_file":"file-x"'
    sends = [
        Send("POST", route, TOO_DEEP, hostile.deep_in(f'{{{job},"integrations":[{{"a":{{deep}}}}]}}')),
        Send("POST", route, ("n_epochs", "out of range"),
             f'{{{job},"hyperparameters":{{"n_epochs":{hostile.HUGE_INTEGER}}}}}'.encode()),
        Send("POST", route, ("integrations", "'{' and '['", *TOO_LARGE),
             hostile.wide_list(f'{{{job},"integrations":{{wide}}}}', "{}", 340_000)),
        Send("POST", route, ("alias",), json.dumps({"model": ctx.model, "training_file": "file-x",
                                                    "alias": "prod\n"}).encode()),
    ]  # fmt: skip
    for name in HOSTILE_NAMES:
        body = {"model": ctx.model, "training_file": "file-x", "suffix": name}
        sends.append(Send("POST", route, ("suffix",), json.dumps(body).encode()))
    return sends


def _eval_files(ctx: Context) -> list[Send]:
    long_line = hostile.jsonl_one_long_line(ctx.folder / "long")
    # 30k deep (60 kB): under the 64 kB an item line may hold, so it reaches the decoder
    deep_line = hostile.jsonl_deep_line(ctx.folder / "deep", depth=30_000)
    evals = (("purpose", "evals"),)
    return [
        Send("POST", "/v1/files", ("line 1 is over",), files=tuple(long_line), fields=evals),
        Send("POST", "/v1/files", ("line 1 is not",), files=tuple(deep_line), fields=evals),
    ]


def _many_parts(ctx: Context) -> list[Send]:
    body, kind = hostile.many_parts(), "multipart/form-data; boundary=x"
    return [
        Send("POST", "/v1/files", ("parts",), body, kind),
        Send("POST", f"{ctx.tenant}/adapters/target/versions", ("parts",), body, kind),
    ]


def _evals(ctx: Context) -> list[Send]:
    config = f'"data_source_config":{{"type":"custom","item_schema":{json.dumps(ITEM_SCHEMA)}}}'
    similarity = {
        "type": "text_similarity", "name": "s", "input": "a", "reference": "b",
        "evaluation_metric": "fuzzy_match", "pass_threshold": 0.5,
    }  # fmt: skip
    huge = json.dumps(similarity).replace("0.5", hostile.HUGE_INTEGER)
    deep_schema = f'{{"type":"custom","item_schema":{hostile.deep_schema()}}}'
    return [
        Send("POST", "/v1/evals", TOO_DEEP, hostile.deep_in(
            f'{{"data_source_config":{{"type":"custom","item_schema":{{"a":{{deep}}}}}},'
            f'"testing_criteria":[{json.dumps(CRITERION)}]}}', depth=100_000)),
        Send("POST", "/v1/evals", ("pass_threshold", "out of range"),
             f'{{{config},"testing_criteria":[{huge}]}}'.encode()),
        Send("POST", "/v1/evals", TOO_LARGE, b'{"name":"' + b"a" * 300_000 + b'"}'),
        Send("POST", "/v1/evals", ("deep", "depth"), (
            f'{{"data_source_config":{deep_schema},"testing_criteria":[{json.dumps(CRITERION)}]}}'
        ).encode()),
        Send("POST", "/v1/evals", ("name", "length"), json.dumps({
            "data_source_config": {"type": "custom", "item_schema": ITEM_SCHEMA},
            "testing_criteria": [CRITERION], "name": "e" * 10_000}).encode()),
    ]  # fmt: skip


def _eval_runs(ctx: Context) -> list[Send]:
    route = f"/v1/evals/{ctx.eval_id}/runs"
    template = '{"type":"template","template":[{"role":"user","content":"{{item.q}}"}]}'

    def run(source: str, extra: str = "") -> str:
        return (
            f'{{"data_source":{{"type":"completions","model":"{ctx.model}",'
            f'"input_messages":{template},"source":{source}{extra}}}}}'
        )

    one_item = '{"type":"file_content","content":[{"item":{"q":"hi"}}]}'
    return [
        Send("POST", route, TOO_DEEP, hostile.deep_in(
            run('{"type":"file_content","content":[{"item":{"q":{deep}}}]}'))),
        Send("POST", route, ("seed", "out of range"), run(
            one_item, f',"sampling_params":{{"seed":{hostile.HUGE_INTEGER}}}').encode()),
        Send("POST", route, ("content", "1000", "length", "'{' and '['"), hostile.wide_list(
            run('{"type":"file_content","content":{wide}}'), '{"item":{}}', 200_000)),
        Send("POST", route, TOO_LARGE, run(one_item).replace(
            '"hi"', '"' + "a" * (5 * 2**20) + '"').encode()),
    ]  # fmt: skip


def _imports(ctx: Context) -> list[Send]:
    route = f"{ctx.tenant}/adapters/target/versions"
    return [
        # typed to the leaf: refused at the first `[`, where a string must be
        Send("POST", route, ("source.url",),
             hostile.deep_in('{"source":{"url":{deep}}}', depth=5_000)),
        Send("POST", route, ("https",),
             json.dumps({"source": {"url": "file:///etc/passwd"}}).encode()),
        Send("POST", route, ("bytes",),
             json.dumps({"source": {"url": "https://x/" + "a" * 40_000}}).encode()),
    ]  # fmt: skip


def _aliases(ctx: Context) -> list[Send]:
    alias = f"{ctx.tenant}/adapters/warm/aliases"
    sends = [
        Send("PUT", f"{alias}/prod", TOO_DEEP, hostile.deep_in('{"version":{deep}}')),
        Send("PUT", f"{alias}/prod", ("version", "out of range"),
             f'{{"version":{hostile.HUGE_INTEGER}}}'.encode()),
        Send("PUT", f"{alias}/prod/canary", ("weight",),
             f'{{"version":1,"weight":{hostile.HUGE_INTEGER}}}'.encode()),
        Send("PUT", f"{alias}/prod/canary", ("window_s",),
             f'{{"version":1,"weight":5,"analysis":{{"window_s":{hostile.LONG_FLOAT}9}}}}'.encode()),
    ]  # fmt: skip
    for name in HOSTILE_NAMES:
        # `../bot` is another path once its `%2F` is decoded: no route has it
        names = ("not found",) if "/" in name else ("alias",)
        sends.append(Send("PUT", f"{alias}/{quote(name, safe='')}", names, b'{"version":1}'))
    return sends


def _keys_users_budgets(ctx: Context) -> list[Send]:
    keys, users, budgets = (f"{ctx.tenant}/{p}" for p in ("api-keys", "users", "budgets"))
    budget = {"scope": "tenant", "period": "month"}
    amounts = ("1e999999999", "NaN", "-1", "0.0000001", hostile.HUGE_INTEGER)
    return [
        Send("POST", keys, TOO_DEEP, hostile.deep_in('{"name":"k","scopes":{deep}}')),
        Send("POST", keys, ("scopes", "'{' and '['", *TOO_LARGE),
             hostile.wide_list('{"name":"k","scopes":{wide}}', '"admin"', 100_000)),
        Send("POST", keys, ("name", "length"), json.dumps({"name": "k" * 10_000}).encode()),
        Send("POST", keys, ("name", "nul", "\\u0000"), json.dumps({"name": "k\x00"}).encode()),
        Send("POST", keys, ("expires_at", "date"),
             json.dumps({"name": "k", "expires_at": "99999-12-31T00:00:00Z"}).encode()),
        Send("POST", users, TOO_DEEP, hostile.deep_in('{"email":{deep}}')),
        *(Send("POST", users, ("email",), json.dumps({"email": email}).encode())
          for email in ("a@b.co\n", "a\u202e@b.co", "a@" + "b" * 10_000 + ".co", "a\x00@b.co")),
        Send("POST", users, ("password",), json.dumps(
            {"email": "p@example.com", "password": "p" * 900_000}).encode()),
        Send("POST", users, ("operator", "role"), json.dumps(
            {"email": "o@example.com", "role": "operator"}).encode()),
        Send("POST", budgets, TOO_DEEP, hostile.deep_in('{"scope":"tenant","amount":{deep}}')),
        *(Send("POST", budgets, ("amount",), json.dumps({**budget, "amount": a}).encode())
          for a in amounts),
        Send("PATCH", f"{budgets}/{uuid.uuid4()}", TOO_DEEP, hostile.deep_in('{"amount":{deep}}')),
    ]  # fmt: skip


def _console_uploads(ctx: Context) -> list[Send]:
    header = hostile.big_integer_dimensions(ctx.folder / "dims")
    entries = hostile.zip_with_many_entries(ctx.folder / "zip")
    line = hostile.jsonl_one_long_line(ctx.folder / "line")
    versions = "/console/adapters/target/versions"
    return [
        Send("POST", versions, ("dimension",), files=tuple(header), console=True),
        Send("POST", versions, ("entries",), files=tuple(entries), console=True),
        Send("POST", "/console/fine-tunes/files", ("longer than",), files=tuple(line),
             console=True),
    ]  # fmt: skip


def _console_forms(ctx: Context) -> list[Send]:
    def form(path: str, names: tuple[str, ...], fields: dict[str, str]) -> Send:
        return Send("POST", path, names, httpx.QueryParams(fields).__str__().encode(), FORM,
                    console=True)  # fmt: skip

    chat = "/console/playground/chat"
    return [
        Send("POST", "/console/keys", ("scopes", "name", "field"), hostile.wide_form(), FORM,
             console=True),
        Send("POST", "/console/adapters", ("name", "field"), hostile.wide_form(), FORM,
             console=True),
        form("/console/adapters/warm/aliases", ("version",), {"alias": "prod", "version": "\u00b2"}),
        form("/console/fine-tunes/", ("n_epochs", "number"),
             {"model": ctx.model, "training_file": "file-x", "n_epochs": "\u0663"}),
        form("/console/fine-tunes/", ("lora_r", "number", "range"),
             {"model": ctx.model, "training_file": "file-x", "lora_r": hostile.HUGE_INTEGER}),
        Send("POST", chat, TOO_DEEP, hostile.deep_json_body(), console=True),
        form("/account/password", ("password",),
             {"current": "p" * 900_000, "new": "n" * 16, "confirm": "n" * 16}),
    ]  # fmt: skip


def _sign_in_forms(ctx: Context) -> list[Send]:
    """Before anyone signs in: the CSRF check parses each form, then refuses it."""
    return [Send("POST", "/login", ("csrf",), hostile.sign_in_form(i), FORM) for i in range(64)]


def _not_a_tenants(ctx: Context) -> list[Send]:
    """Routes of operators and nodes: A's key is refused before its 1 MB body is read."""
    deep = hostile.deep_json_body()
    tenant = ctx.tenant
    operator = ("operator", "permission", "scope", "forbidden", "not allowed")
    node = ("node", "credential", "agent", "forbidden", "unauthorized")
    return [
        *(Send(m, p, operator, deep) for m, p in (
            ("POST", "/api/v1/tenants"), ("PATCH", tenant), ("PUT", f"{tenant}/quota"),
            ("POST", f"{tenant}/suspend"), ("PUT", "/api/v1/plans"), ("POST", "/api/v1/engines"),
            ("POST", "/api/v1/base-models"), ("PUT", f"/api/v1/prices/{ctx.model}"),
            ("POST", "/api/v1/node-credentials"),
            ("PUT", f"/api/v1/placement/pins/{uuid.uuid4()}"),
        )),
        Send("PUT", "/api/v1/agents/engines/rogue", node, deep),
        *(Send("POST", p, operator, deep, console=True) for p in (
            f"/admin/tenants/{ctx.target.a.id}/quota", "/admin/plans/", "/admin/engines/",
        )),
    ]  # fmt: skip


ROUTE_CASES: list[tuple[str, str, Callable[[Context], list[Send]]]] = [
    ("JSON body", "/v1/completions bodies", _generation("/v1/completions")),
    ("JSON body", "/v1/responses bodies", _generation("/v1/responses")),
    ("JSON body", "fine-tuning job bodies and names", _fine_tuning_jobs),
    ("eval file", "eval items: 48 MB line, 30k deep", _eval_files),
    ("multipart", "100k parts in one upload", _many_parts),
    ("JSON body", "eval bodies and schemas", _evals),
    ("JSON body", "eval run bodies, 200k items", _eval_runs),
    ("JSON body", "adapter import bodies", _imports),
    ("names", "alias bodies and names", _aliases),
    ("JSON body", "key, user and budget bodies", _keys_users_budgets),
    ("console", "console uploads", _console_uploads),
    ("console", "console forms, 120k fields", _console_forms),
    ("forms", "64 different 1 MB sign-in forms", _sign_in_forms),
    ("privilege", "operator and node routes, by A", _not_a_tenants),
]


def _send_all(target: Target, sends: list[Send]) -> Outcome:
    """Each request in turn; its status and message are the outcome's."""
    outcome = Outcome()
    with (
        httpx.Client(base_url=target.url, headers=target.a.headers, timeout=300) as api,
        httpx.Client(base_url=target.url, cookies=target.console, timeout=300) as console,
    ):
        for send in sends:
            http = console if send.console else api
            headers = target.console_headers() if send.console else {}
            if send.files:
                handles = [p.open("rb") for p in send.files]
                try:
                    parts = [("file", (p.name, h, "application/octet-stream"))
                             for p, h in zip(send.files, handles, strict=True)]  # fmt: skip
                    answer = http.request(
                        send.method, send.path, files=parts, data=dict(send.fields),
                        headers=headers,
                    )  # fmt: skip
                finally:
                    for handle in handles:
                        handle.close()
            else:
                headers["Content-Type"] = send.content_type
                answer = http.request(send.method, send.path, content=send.body, headers=headers)
            outcome.add(answer)
            if answer.status_code < 400:  # keep the messages aligned with the requests
                outcome.messages.append(answer.text[:600])
    return outcome


@pytest.fixture(scope="module")
def eval_id(target: Target) -> str:
    """An eval of tenant A's, for the run cases."""
    body = {
        "data_source_config": {"type": "custom", "item_schema": ITEM_SCHEMA},
        "testing_criteria": [CRITERION],
    }
    made = httpx.post(f"{target.url}/v1/evals", json=body, headers=target.a.headers, timeout=30)
    assert made.status_code == 200, made.text
    return str(made.json()["id"])


@pytest.mark.parametrize(
    ("attack_class", "case", "sends_of"), ROUTE_CASES, ids=[c[1] for c in ROUTE_CASES]
)
def test_every_route_with_a_body_refuses_a_hostile_one_and_b_never_notices(
    target: Target,
    eval_id: str,
    tmp_path: Path,
    attack_class: str,
    case: str,
    sends_of: Callable[[Context], list[Send]],
) -> None:
    sends = sends_of(Context(target, eval_id, tmp_path / secrets.token_hex(2)))
    measured = target.measure(case, attack_class, lambda: _send_all(target, sends))
    check_each(measured, [s.names for s in sends])
