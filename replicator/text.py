"""Plain-text tables for people (``status``, ``status --health``, ``diff``): the one home of
their column alignment."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def text_table(head: Sequence[str], rows: Sequence[Sequence[str]], *, right: Collection[int] = ()) -> list[str]:
    """The lines of ``head``, a rule of dashes and ``rows``: each column as wide as its widest
    cell, two spaces apart; the columns whose index is in ``right`` (numbers) right-aligned,
    the others left-aligned; no trailing spaces."""
    widths = [max(len(cell) for cell in col) for col in zip(head, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)]
