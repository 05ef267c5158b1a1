"""Maps the repository's top-level folders onto the `loraplex` import package.

`platform/` is the root of `loraplex` and deliberately has no `__init__.py`: one there would
shadow the standard library's `platform` module whenever the repository root is on sys.path
(`python -m`, Alembic, Celery, uvicorn all put it there). The README's layout table lists
which folder becomes which subpackage.
"""

from setuptools import find_namespace_packages, setup

PACKAGE_ROOTS = {
    "loraplex": "platform",
    "loraplex.adapters": "adapters",
    "loraplex.workers": "workers",
    "loraplex.web": "web",
    "loraplex.migrations": "migrations",
}


# Folders that are not code: npm's install under web/ and Python's caches.
NOT_PACKAGES = ["node_modules", "node_modules.*", "__pycache__", "*.__pycache__"]


def _packages() -> list[str]:
    """Every folder under the roots, data folders (templates, profiles) included: a data
    folder left out of the list makes setuptools warn on every install."""
    names = []
    for package, folder in PACKAGE_ROOTS.items():
        names.append(package)
        found = find_namespace_packages(folder, exclude=NOT_PACKAGES)
        names.extend(f"{package}.{sub}" for sub in found)
    return sorted(set(names))


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import it
    setup(packages=_packages(), package_dir=PACKAGE_ROOTS)
