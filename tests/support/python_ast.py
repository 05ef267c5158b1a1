"""Parsing the repository's Python in tests that read code as data."""

from __future__ import annotations

import ast


def parse(source: str, tries: int = 5) -> ast.Module:
    """`ast.parse`, tried again on CPython 3.11's "AST constructor recursion depth mismatch".

    That SystemError (CPython gh-106905) is raised when another thread of the test process
    builds AST objects at the same moment: the depth counter is shared between threads.
    """
    for _ in range(tries - 1):
        try:
            return ast.parse(source)
        except SystemError:
            continue
    return ast.parse(source)
