"""`loraplex up`: the embedded all-in-one platform (see cli.py)."""

from loraplex.up.cli import up

__all__ = ["up"]
