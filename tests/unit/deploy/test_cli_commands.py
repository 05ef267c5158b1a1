"""Every `loraplex` command line in the deployment files parses with the real CLI.

The command lines are collected from the rendered Kubernetes objects (containers of our
images without a `command` run the image's `loraplex` entrypoint with their `args`; shell
scripts given to `sh -c` are split into their commands), the interpolated Compose file, the
Dockerfiles' CMD/RUN, the shell scripts under deploy/ and the fenced shell blocks of
docs/deploy.md. Each is parsed by click itself, from `loraplex.cli.main` down: unknown
subcommands and flags, bad values (types, choices) and missing required options fail.
Path arguments are not checked for existence (the paths exist only inside the containers)
and prompts are not shown.
"""

from __future__ import annotations

import copy

import click
import pytest

from loraplex.cli import main
from tests.unit.deploy import support

# The agent flags of self-registration (`loraplex agent --register-with ...`); their absence
# from the CLI is a failure of this test, not a skip.
AGENT_REGISTRATION_FLAGS = {
    "--register-with",
    "--advertise-url",
    "--engine-advertise-url",
    "--name",
    "--base-model",
    "--max-lora-rank",
    "--gpu-slots",
    "--host-slots",
}


def _offline_copy(command: click.Command) -> click.Command:
    """`command` with Path checks and prompts switched off, for parsing only."""
    clone = copy.copy(command)
    params = []
    for param in command.params:
        param = copy.copy(param)
        if isinstance(param.type, click.Path):
            param.type = click.STRING
        if isinstance(param, click.Option):
            param.prompt = None
        params.append(param)
    clone.params = params
    return clone


def parse_loraplex(args: list[str]) -> str:
    """Parse `loraplex <args>` with the real command tree; the command's path, or raise."""
    command: click.Command = main
    path = ["loraplex"]
    rest = list(args)
    while isinstance(command, click.Group):
        if not rest or rest[0].startswith("-"):
            raise click.UsageError(f"`{' '.join(path)}` needs a subcommand, got {rest!r}")
        name = rest.pop(0)
        sub = command.get_command(click.Context(command), name)
        if sub is None:
            raise click.UsageError(f"`{' '.join(path)}` has no subcommand {name!r}")
        command, path = sub, [*path, name]
    leaf = _offline_copy(command)
    leaf.make_context(" ".join(path), rest)
    return " ".join(path)


def _compose_run_invocation(argv: list[str]) -> list[str] | None:
    """`docker compose run|exec [opts] SERVICE ARGS` on one of our images: the loraplex args."""
    if argv[:3] not in (["docker", "compose", "run"], ["docker", "compose", "exec"]):
        return None
    rest = argv[3:]
    while rest and rest[0].startswith("-"):
        rest = rest[1:]
    if not rest:
        return None
    service = support.compose_model()["services"].get(rest[0])
    if service is None or support.image_name(service.get("image", "")) not in (
        support.LORAPLEX_IMAGES
    ):
        return None
    args = rest[1:]
    return args[1:] if args[:1] == ["loraplex"] else args


def collected() -> list[tuple[str, list[str]]]:
    found = []
    for invocation in support.every_command():
        args = support.loraplex_invocations(invocation.argv)
        if args is None:
            args = _compose_run_invocation(invocation.argv)
        if args is not None:
            found.append((invocation.where, args))
    return found


def test_command_lines_are_collected_from_every_source() -> None:
    wheres = " ".join(where for where, _ in collected())
    sources = ["compose service", "Dockerfile", "docs/deploy.md"]
    if support.kubectl_available():
        sources += ["dev:", "prod:"]
    for source in sources:
        assert source in wheres, f"no loraplex command line found in {source}"
    commands = {" ".join(args[:2]) for _, args in collected()}
    for expected in ("api --host", "db upgrade", "beat", "agent --engine-url", "worker -Q"):
        assert any(c.startswith(expected) for c in commands), f"no `loraplex {expected}`"


@pytest.mark.parametrize(
    ("where", "args"),
    [pytest.param(w, a, id=f"{w}: loraplex {' '.join(a[:2])}") for w, a in collected()],
)
def test_loraplex_command_line_parses(where: str, args: list[str]) -> None:
    try:
        parse_loraplex(args)
    except click.ClickException as exc:
        pytest.fail(f"{where}: `loraplex {' '.join(args)}`: {exc.format_message()}")


def test_agent_has_the_registration_flags() -> None:
    agent = main.get_command(click.Context(main), "agent")
    assert agent is not None
    have = {opt for param in agent.params for opt in param.opts}
    missing = AGENT_REGISTRATION_FLAGS - have
    assert not missing, f"`loraplex agent` lacks {sorted(missing)} (deploy/ uses them)"


def test_parser_rejects_what_it_should() -> None:
    for bad in (
        ["agent", "--engine-url", "http://x", "--no-such-flag"],
        ["agent"],  # --engine-url is required
        ["worker", "-c", "two"],
        ["simulate", "--scenario", "nope"],
        ["no-such-command"],
        ["db"],
    ):
        with pytest.raises(click.ClickException):
            parse_loraplex(bad)
    assert (
        parse_loraplex(["base-models", "register", "/models/x"]) == "loraplex base-models register"
    )
