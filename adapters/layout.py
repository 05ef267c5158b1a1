"""Which files an adapter directory may hold: the PEFT pair and an optional README."""

from __future__ import annotations

from collections.abc import Iterable

from loraplex.adapters.errors import AdapterRejected, Rejection

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
README_FILE = "README.md"

REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE)
README_NAMES = frozenset({"README.md", "README"})
# Weights in these formats are Python pickles: loading one can run arbitrary code.
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def canonical_file_name(name: str) -> str:
    """The name an allowed file is kept under; refuse pickles and anything else."""
    if name in REQUIRED_FILES:
        return name
    if name in README_NAMES:
        return README_FILE
    if name.lower().endswith(PICKLE_SUFFIXES):
        raise AdapterRejected(
            Rejection.PICKLE_WEIGHTS,
            f"{name} is a pickle; upload the weights as {WEIGHTS_FILE} (safetensors) instead",
        )
    raise AdapterRejected(
        Rejection.EXTRA_FILE,
        f"unexpected file {name!r}; an adapter holds only {CONFIG_FILE}, {WEIGHTS_FILE} "
        f"and optionally {README_FILE}",
    )


def require_files(present: Iterable[str]) -> None:
    """Refuse a set of file names that lacks the config or the weights."""
    names = set(present)
    for required in REQUIRED_FILES:
        if required not in names:
            raise AdapterRejected(Rejection.MISSING_FILE, f"the upload has no {required}")
