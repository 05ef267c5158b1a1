"""The drill table: each drill adds a row of figures, printed when the topology closes."""

from __future__ import annotations

ROWS: list[dict[str, str]] = []
COLUMNS = ("fault", "client saw", "stored", "recovery")


def record(fault: str, client_saw: str, stored: str, recovery: str) -> None:
    """Add one drill's figures (shown by `pytest -s` at the end of tests/system)."""
    ROWS.append(dict(zip(COLUMNS, (fault, client_saw, stored, recovery), strict=True)))
    print(f"\n[drill] {fault} | {client_saw} | {stored} | {recovery}")


def table() -> str:
    """Every recorded row as a plain-text table."""
    if not ROWS:
        return ""
    widths = [max(len(c), *(len(r[c]) for r in ROWS)) for c in COLUMNS]
    line = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    rule = "-+-".join("-" * w for w in widths)
    return "\n".join([line(COLUMNS), rule, *(line([r[c] for c in COLUMNS]) for r in ROWS)])
