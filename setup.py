"""Maps the repository's top-level folders onto the `loraplex` import package.

`platform/` is the root of `loraplex` and deliberately has no `__init__.py`: one there would
shadow the standard library's `platform` module whenever the repository root is on sys.path
(`python -m`, Alembic, Celery, uvicorn all put it there). The README's layout table lists
which folder becomes which subpackage.
"""

from setuptools import find_packages, setup

PACKAGE_ROOTS = {
    "loraplex": "platform",
    "loraplex.adapters": "adapters",
    "loraplex.workers": "workers",
    "loraplex.web": "web",
    "loraplex.migrations": "migrations",
}


def _packages() -> list[str]:
    names = []
    for package, folder in PACKAGE_ROOTS.items():
        names.append(package)
        names.extend(f"{package}.{sub}" for sub in find_packages(folder))
    return sorted(set(names))


if __name__ == "__main__":  # setuptools runs this file as __main__; tests import it
    setup(packages=_packages(), package_dir=PACKAGE_ROOTS)
