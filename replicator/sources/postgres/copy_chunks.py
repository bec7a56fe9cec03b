"""Snapshot chunks through ``COPY (SELECT ...) TO STDOUT (FORMAT csv)``, parsed into Arrow.

COPY sends each value as the type's text output (the same text the row-by-row path and
pgoutput get, under the same ``SESSION_OPTIONS``), so the engine values are the same; only
the conversion is vectorised: pyarrow's CSV reader parses every column straight into its
engine Arrow type (``events.types.arrow_type``) where its parser gives exactly what the
per-value converter (``types.py``) gives, else the column is read as text and converted per
value with that converter.

============================  =====================================================
converter (types.py)          how the column is parsed
============================  =====================================================
none (text output kept)       string
int (int, long)               int32 / int64
float (real, double)          float64 (as ``float(text)``; staging narrows ``float``)
to_bool                       bool (``t`` / ``f``)
to_exact_decimal              decimal128(p, s) (the text has the column's scale)
to_date                       date32
to_timestamp                  timestamp[us]
to_timestamptz                timestamp[us, UTC]
anything else (bytea, ...)    text, then the converter per value
============================  =====================================================

CSV keeps NULL (unquoted empty field) apart from the empty string (quoted ``""``); quoted
values may hold commas, quotes, tabs, newlines and backslashes. A chunk with a value the
vectorised parse refuses (``infinity`` dates, BC years, numeric NaN in numeric(p,s), ...) is
parsed again as text: its rows then go the per-row way (``RowConverter``), which names the
bad value and dead-letters its row, exactly as before.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from replicator.events.types import arrow_type
from replicator.sources.postgres.change_block import direct_type
from replicator.sources.postgres.changes import RelState
from replicator.sources.postgres.types import Converter

KEY_TEXT_PREFIX = "__rep_keytext__"  # the key columns again, as text (resume boundaries)
OTHER_COLUMN_CHARS = 20  # size estimate per non-text column (see ``row_sizes``)


@dataclass(frozen=True)
class CopyLayout:
    """How one table's chunks are read and typed."""

    names: tuple[str, ...]  # the table's columns, in select order
    engine_types: tuple[str, ...]
    converters: tuple[Converter | None, ...]
    key_columns: tuple[str, ...]

    @property
    def csv_names(self) -> list[str]:
        return [*self.names, *(KEY_TEXT_PREFIX + k for k in self.key_columns)]

    def _options(self, typed: bool) -> pacsv.ConvertOptions:
        types: dict[str, pa.DataType] = {}
        for name, engine, conv in zip(self.names, self.engine_types, self.converters, strict=True):
            direct = direct_type(conv, engine) if typed else None
            types[name] = direct if direct is not None else pa.large_string()
        for k in self.key_columns:
            types[KEY_TEXT_PREFIX + k] = pa.large_string()
        return pacsv.ConvertOptions(
            column_types=types, null_values=[""], true_values=["t"], false_values=["f"],
            strings_can_be_null=True, quoted_strings_can_be_null=False,
        )  # fmt: skip

    def parse(self, data: bytes, typed: bool = True) -> pa.Table:
        """The chunk as Arrow: typed (engine Arrow types) or every column as text."""
        return pacsv.read_csv(
            io.BytesIO(data),
            # One block for the whole chunk: a value larger than a block (1 MiB by default)
            # with newlines in values would not parse.
            read_options=pacsv.ReadOptions(
                column_names=self.csv_names, use_threads=False,
                block_size=min(max(len(data) + 1, 1 << 20), (1 << 31) - 1),
            ),  # fmt: skip
            parse_options=pacsv.ParseOptions(newlines_in_values=True),
            convert_options=self._options(typed),
        )

    def engine_block(self, parsed: pa.Table) -> pa.Table:
        """The table's columns in their engine Arrow types (per-value converters applied;
        ``float`` stays float64, the value ``float(text)`` gives, as in events); raises ValueError/ArithmeticError when a value does not convert."""
        arrays: list[pa.Array | pa.ChunkedArray] = []
        for name, engine, conv in zip(self.names, self.engine_types, self.converters, strict=True):
            col = parsed.column(name)
            target = arrow_type(engine)
            if col.type == pa.large_string() and target != pa.large_string():
                assert conv is not None
                col = pa.array([None if v is None else conv(v) for v in col.to_pylist()], target)
            arrays.append(col)
        return pa.Table.from_arrays(arrays, names=list(self.names))

    def text_rows(self, parsed_text: pa.Table) -> list[tuple[str | None, ...]]:
        """Rows of text values (the row-by-row path's input) from an all-text parse."""
        cols = [parsed_text.column(n).to_pylist() for n in self.names]
        return list(zip(*cols, strict=True))

    def key_text(self, parsed: pa.Table, row: int) -> tuple[str | None, ...]:
        return tuple(parsed.column(KEY_TEXT_PREFIX + k)[row].as_py() for k in self.key_columns)


def row_sizes(block: pa.Table, engine_types: Sequence[str]) -> pa.Array | None:
    """Approximate text size of each row (``toast.row_chars`` counts the text of every
    value): characters of text columns, hex digits of binary ones, ``OTHER_COLUMN_CHARS`` for
    any other column. None when the table has no text or binary column (no row is big)."""
    total: Any = None
    others = 0
    for i, engine in enumerate(engine_types):
        col = block.column(i)
        if engine == "string":
            n = pc.fill_null(pc.utf8_length(col), 0)
        elif engine == "binary":
            n = pc.fill_null(pc.add(pc.multiply(pc.binary_length(col), 2), 2), 0)
        else:
            others += OTHER_COLUMN_CHARS
            continue
        total = n if total is None else pc.add(total, n)
    if total is None:
        return None
    return pc.add(total, others)


def copy_layout(rel: RelState, key_columns: tuple[str, ...]) -> CopyLayout | None:
    """The layout of a snapshot table from its relation mapping (``changes.build_rel``);
    None (read row by row) when a column's name collides with the key text columns."""
    assert rel.rows is not None and rel.schema is not None
    if any(n.startswith(KEY_TEXT_PREFIX) for n in rel.rows.names):
        return None
    return CopyLayout(
        names=rel.rows.names,
        engine_types=tuple(c.type for c in rel.schema.columns),
        converters=rel.rows.converters,
        key_columns=key_columns,
    )


@dataclass(frozen=True)
class ParsedChunk:
    """One COPY chunk parsed: an Arrow block in engine types, or (a value the vectorised
    parse refuses) its rows as text for the per-row path; the text key of its last row, and
    its big rows (row, text key, size) for the TOAST row cache."""

    block: pa.Table | None
    rows: list[tuple[str | None, ...]]
    last_key: tuple[str | None, ...]
    big_rows: list[tuple[int, tuple[str | None, ...], int]]


def parse_chunk(
    layout: CopyLayout, data: bytes, key_idx: tuple[int, ...], big_row_chars: int
) -> ParsedChunk:
    """Parse one chunk's CSV; pure (no connection, no reader state), so it may run on the
    thread that read the chunk (pyarrow's CSV reader and compute release the GIL)."""
    try:
        parsed = layout.parse(data)
        block = layout.engine_block(parsed)
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, ArithmeticError):
        # A value the vectorised parse refuses: the chunk goes row by row (as text),
        # where the converters name the bad value and its row is dead-lettered.
        rows = layout.text_rows(layout.parse(data, typed=False))
        return ParsedChunk(None, rows, tuple(rows[-1][i] for i in key_idx), [])
    n = block.num_rows
    big: list[tuple[int, tuple[str | None, ...], int]] = []
    sizes = row_sizes(block, layout.engine_types)
    if sizes is not None:
        for i in pc.indices_nonzero(pc.greater_equal(sizes, big_row_chars)).to_pylist():
            big.append((i, layout.key_text(parsed, i), int(sizes[i].as_py())))
    return ParsedChunk(block, [], layout.key_text(parsed, n - 1), big)
