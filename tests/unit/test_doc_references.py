"""Every document a comment or docstring cites is a file in the repository's docs/.

Comments cite `docs/<name>.md`, a numbered section as `docs/<name>.md §N.M`, and a named
one as `docs/<name>.md, '<Heading>'` or `(docs/<name>.md, <Heading>)`. A bare `§N` counts
against the documents the same file names, so a file with a bare `§` must name one. Notes
kept outside the repository (the old design page, the SGLang protocol reference, the CPU
engine notes, the conventions, any path that climbs out of the checkout with `../`) must
not be cited at all: the next engineer would not have them.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

from tests.support.python_ast import parse

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SCANNED = ["platform", "web", "workers", "adapters", "migrations", "deploy", "tests"]
TOP_FILES = ["Makefile", "pyproject.toml", "setup.py"]
SKIPPED_DIRS = {"node_modules", "__pycache__", ".venv", "vendor"}
TEXT_SUFFIXES = {".py", ".yaml", ".yml", ".toml", ".sh", ".html", ".cfg", ".ini", ".example"}
THIS = Path(__file__).resolve()

DOC = re.compile(r"\bdocs/([\w.-]+?\.md)\b")
SECTION = re.compile(r"§\s?(\d+(?:\.\d+)*)")
CITED_NUMBER = re.compile(r"\bdocs/([\w.-]+?\.md),? (?:its )?§\s?(\d+(?:\.\d+)*)")
QUOTED_HEADING = re.compile(r"\bdocs/([\w.-]+?\.md), '([^']+)'")
PAREN_HEADING = re.compile(r"\(docs/([\w.-]+?\.md), ([A-Z][^()'§]*?)\)")
OUTSIDE = re.compile(
    r"\bDESIGN\.md\b|sglang-lora-reference|cpu-engine-notes|\bconventions\.md\b"
    r"|(?<![\w.])\.\./[\w-]+/[\w.-]+\.md\b"  # a document beside the checkout, not in it
    r"|(?i:\bdesign doc(?:ument)?\b|\bsection \d+(?:\.\d+)* of the design\b)"
)
NUMBERED_HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
MD_LINK = re.compile(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)")


def python_prose(source: str) -> str:
    """The comments and docstrings of a Python source, one per line."""
    parts: list[str] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    parts.extend(t.string for t in tokens if t.type == tokenize.COMMENT)
    try:
        tree = parse(source)
    except SyntaxError:
        return source
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                parts.append(doc)
    return "\n".join(parts)


def prose(path: Path) -> str:
    """What a reader takes as prose in `path`: comments and docstrings of Python, else all."""
    text = path.read_text(encoding="utf-8", errors="replace")
    return python_prose(text) if path.suffix == ".py" else text


def scanned_files() -> Iterator[Path]:
    for name in TOP_FILES:
        if (ROOT / name).is_file():
            yield ROOT / name
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*")):
            if SKIPPED_DIRS.intersection(path.relative_to(ROOT).parts) or not path.is_file():
                continue
            if path.resolve() == THIS:
                continue
            if path.suffix in TEXT_SUFFIXES or path.name.startswith("Dockerfile"):
                yield path


def headings(doc: str, docs: Path) -> tuple[set[str], set[str]]:
    """The section numbers and the heading texts (lower case, no markup) of one document."""
    text = (docs / doc).read_text(encoding="utf-8")
    names = {re.sub(r"[`*]", "", h).strip().lower() for h in HEADING.findall(text)}
    names |= {re.sub(r"^\d+(?:\.\d+)*\.?\s+", "", n) for n in names}
    return set(NUMBERED_HEADING.findall(text)), names


def problems_in(where: str, text: str, docs: Path = DOCS) -> list[str]:
    """What is wrong with the document references in `text` (prose of the file `where`)."""
    found = [
        f"{where}: cites a document outside the repository: {m.group(0)!r}"
        for m in OUTSIDE.finditer(text)
    ]
    named = sorted(set(DOC.findall(text)))
    missing = [d for d in named if not (docs / d).is_file()]
    found += [f"{where}: cites docs/{d}, which is not in the repository" for d in missing]
    present = [d for d in named if d not in missing]
    known = {d: headings(d, docs) for d in present}

    for doc, number in CITED_NUMBER.findall(text):
        if doc in known and number not in known[doc][0]:
            found.append(f"{where}: docs/{doc} has no section {number}")
    for pattern in (QUOTED_HEADING, PAREN_HEADING):
        for doc, title in pattern.findall(text):
            if doc in known and title.strip().lower() not in known[doc][1]:
                found.append(f"{where}: docs/{doc} has no section '{title}'")

    numbers = set(SECTION.findall(text))
    if numbers and not named:
        found.append(f"{where}: cites {sorted(numbers)} without naming the document in docs/")
    elif numbers and known:
        every = set().union(*(numbered for numbered, _ in known.values()))
        found += [f"{where}: § {n} is in none of {sorted(known)}" for n in sorted(numbers - every)]
    return found


def test_every_cited_document_is_in_the_repository() -> None:
    found: list[str] = []
    for path in scanned_files():
        found += problems_in(str(path.relative_to(ROOT)), prose(path))
    assert not found, "\n".join(found)


def test_the_docs_link_only_to_documents_in_the_repository() -> None:
    found: list[str] = []
    for page in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        found += [f"{page.name}: {m.group(0)!r}" for m in OUTSIDE.finditer(text)]
        for link in MD_LINK.findall(text):
            if "://" not in link and not (page.parent / link).is_file():
                found.append(f"{page.name}: links to {link}, which does not exist")
    assert not found, "\n".join(found)


def test_the_check_catches_bad_references(tmp_path: Path) -> None:
    (tmp_path / "real.md").write_text("# Real\n\n## 1. One\n\n### 1.2 Two\n\n## Named part\n")
    good = (
        "# see docs/real.md §1.2 and (docs/real.md, Named part)\n"
        "# docs/real.md, 'Named part'; a bare §1 is fine here\n"
    )
    assert problems_in("good.py", good, tmp_path) == []

    bad = {
        "# see docs/nowhere.md": "not in the repository",
        "# as ../notes/design.md says": "outside the repository",
        "# see sglang-lora-reference §4.2": "outside the repository",
        "# section 6 of the design": "outside the repository",
        "# docs/real.md §7": "no section 7",
        "# docs/real.md, 'Missing part'": "no section 'Missing part'",
        "# a bare §4.4 with no document": "without naming the document",
        "# docs/real.md, and a bare §3": "§ 3 is in none of",
    }
    for text, expected in bad.items():
        found = problems_in("bad.py", python_prose(text + "\nx = 1\n"), tmp_path)
        assert any(expected in f for f in found), (text, found)


def test_python_prose_is_comments_and_docstrings_only() -> None:
    source = '"""Module doc: docs/a.md."""\nx = "docs/b.md"  # docs/c.md\n'
    text = python_prose(source)
    assert "docs/a.md" in text and "docs/c.md" in text and "docs/b.md" not in text
