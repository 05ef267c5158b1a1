"""The configuration reference in docs/deploy.md, generated from `loraplex.settings.Settings`.

Every field of the settings dataclass is one `LORAPLEX_*` environment variable. This renders
them as a markdown table (variable, type, default, the comment written beside the field in
platform/settings.py) between the marker lines of docs/deploy.md:

    .venv/bin/python deploy/config_reference.py          # rewrite the table in docs/deploy.md
    .venv/bin/python deploy/config_reference.py --check  # exit 1 if it is out of date

tests/unit/deploy/test_config_reference.py fails when the table is stale.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import io
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_type_hints

from loraplex.settings import PREFIX, Settings

DOC = Path(__file__).resolve().parents[1] / "docs" / "deploy.md"
BEGIN = "<!-- settings:begin -->"
END = "<!-- settings:end -->"


@dataclass(frozen=True)
class Entry:
    """One setting as the reference shows it."""

    variable: str
    type: str
    default: str
    comment: str
    section: str
    section_note: str = ""


def _comments_by_line(source: str) -> dict[int, str]:
    """Comment text (without `#`) by 1-based line number."""
    found: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found[token.start[0]] = token.string.lstrip("#").strip()
    return found


def _field_notes(cls: type) -> dict[str, tuple[str, str, str]]:
    """For each annotated field of `cls`: (its section, the section's note, its comment).

    A comment block after a blank line opens a section: its first sentence is the title (e.g.
    "Storage."), the rest a note on the section. A block right above a field, and comments on
    the field's own lines, describe that field.
    """
    source = inspect.getsource(cls)
    comments = _comments_by_line(source)
    lines = source.splitlines()
    (class_node,) = ast.parse(source).body
    assert isinstance(class_node, ast.ClassDef)
    notes: dict[str, tuple[str, str, str]] = {}
    section = note = ""
    for node in class_node.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1  # the line before the field, 1-based
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        opens_section = bool(above) and line >= 1 and not lines[line - 1].strip()
        if opens_section:
            title, _, note = " ".join(above).partition(". ")
            section = title.rstrip(".")
            above = []
        last = node.end_lineno or node.lineno
        own = [comments[n] for n in range(node.lineno, last + 1) if comments.get(n)]
        notes[node.target.id] = (section, note, " ".join([*above, *own]).strip())
    return notes


def _type_name(hint: Any, name: str) -> str:
    if name == "engines":
        return "JSON list"
    if hint is bool:
        return "bool"
    return getattr(hint, "__name__", str(hint)).lower()


def entries() -> list[Entry]:
    """Every setting, in the order of the dataclass."""
    hints = get_type_hints(Settings)
    notes = _field_notes(Settings)
    defaults = Settings().to_env()
    result = []
    for f in dataclasses.fields(Settings):
        variable = PREFIX + f.name.upper()
        section, note, comment = notes.get(f.name, ("", "", ""))
        kind = _type_name(hints[f.name], f.name)
        result.append(Entry(variable, kind, defaults[variable], comment, section, note))
    return result


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    """The markdown table, one sub-heading row per section of platform/settings.py."""
    out = [
        "| variable | type | default | what it does |",
        "|---|---|---|---|",
    ]
    section = None
    for entry in entries():
        if entry.section != section:
            section = entry.section
            if section:
                out.append(f"| **{_cell(section)}** | | | {_cell(entry.section_note)} |")
        default = f"`{_cell(entry.default)}`" if entry.default else "(empty)"
        out.append(f"| `{entry.variable}` | {entry.type} | {default} | {_cell(entry.comment)} |")
    return "\n".join(out) + "\n"


def splice(document: str, table: str) -> str:
    """`document` with the text between the marker lines replaced by `table`."""
    head, found_begin, rest = document.partition(BEGIN + "\n")
    _old, found_end, tail = rest.partition(END)
    if not found_begin or not found_end:
        raise ValueError(f"{DOC} needs the lines {BEGIN!r} and {END!r}")
    return f"{head}{BEGIN}\n{table}{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Render the settings table in docs/deploy.md.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the table is stale")
    parser.add_argument("--doc", type=Path, default=DOC)
    args = parser.parse_args(argv)
    current = args.doc.read_text(encoding="utf-8")
    updated = splice(current, render())
    if args.check:
        if updated != current:
            print(f"{args.doc} is stale: run deploy/config_reference.py", file=sys.stderr)
            return 1
        return 0
    if updated != current:
        args.doc.write_text(updated, encoding="utf-8")
        print(f"updated {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
