"""Per-row byte estimates and the data-file rolling they drive.

The estimate is the row's share of Arrow buffers (in-memory size, not Parquet size: the caller
picks ``target_file_bytes`` accordingly). It is computed with Arrow kernels, never per row in
Python, and is the same for a row however the batch was chunked, except for nested columns
(list/struct/map), which are charged their chunk's average.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc


def _offset_bytes(t: pa.DataType) -> int | None:
    """Offset width of a variable-width binary-like type, None for any other type."""
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return 8
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return 4
    if pa.types.is_string_view(t) or pa.types.is_binary_view(t):
        return 16  # one view struct per value
    return None


class RowSizeEstimator:
    """Estimates bytes per row of tables with one fixed schema."""

    def __init__(self, schema: pa.Schema) -> None:
        fixed_bits = 0
        self._var: list[tuple[int, bool]] = []  # (column index, needs cast to binary)
        self._nested: list[int] = []
        for i, field in enumerate(schema):
            t = field.type
            fixed_bits += 1  # validity bit
            offset = _offset_bytes(t)
            if offset is not None:
                fixed_bits += 8 * offset
                self._var.append((i, pa.types.is_string_view(t) or pa.types.is_binary_view(t)))
                continue
            if pa.types.is_null(t):
                continue
            try:
                fixed_bits += t.bit_width
            except ValueError:
                self._nested.append(i)
        self.fixed_row_bytes = -(-fixed_bits // 8)

    def estimate(self, table: pa.Table) -> tuple[int, pa.Array | None]:
        """(constant bytes of every row, int64 extra bytes per row or None if all constant)."""
        constant = self.fixed_row_bytes
        n = table.num_rows
        for i in self._nested:
            column = table.column(i)
            constant += -(-column.nbytes // n) if n else 0
        extra: pa.Array | None = None
        for i, is_view in self._var:
            column = table.column(i)
            if is_view:  # binary_length has no view kernel
                column = column.cast(pa.large_binary())
            lengths = pc.fill_null(pc.binary_length(column), 0).cast(pa.int64())
            extra = lengths if extra is None else pc.add(extra, lengths)
        if isinstance(extra, pa.ChunkedArray):
            extra = extra.combine_chunks()
        return constant, extra


@dataclass(frozen=True, slots=True)
class Placement:
    """Rows ``[offset, offset + length)`` of a chunk go to ``file_index`` from ``first_pos``."""

    file_index: int
    first_pos: int
    offset: int
    length: int


class FileRoller:
    """Assigns written rows to data files 0, 1, 2, ... by estimated size.

    A row goes to the current file unless that would push the file past ``target_bytes`` and
    the file already has a row (so one oversized row still gets a file of its own).
    ``file_starts`` (batch ordinal of each file's first row) is shared with ``KeyPositionMap``.
    """

    def __init__(self, target_bytes: int, file_starts: list[int]) -> None:
        self.target_bytes = target_bytes
        self.file_starts = file_starts
        self.file_rows: list[int] = []
        self.file_bytes: list[int] = []
        self.rows = 0

    def _open(self) -> None:
        self.file_starts.append(self.rows)
        self.file_rows.append(0)
        self.file_bytes.append(0)

    def place(self, n: int, constant: int, extra: pa.Array | None) -> list[Placement]:
        """Place the next ``n`` rows (sizes ``constant + extra[i]``); returns their slices."""
        if n == 0:
            return []
        if not self.file_rows:
            self._open()
        total = constant * n + ((pc.sum(extra).as_py() or 0) if extra is not None else 0)
        if self.file_bytes[-1] + total <= self.target_bytes:  # the common case: no roll
            return [self._fill(0, n, total)]
        # cum[j] = bytes of chunk rows 0..j inclusive; range() is a bisectable sequence.
        cum: Sequence[int]
        if extra is None:
            cum = range(constant, constant * (n + 1), constant) if constant else [0] * n
        else:
            cum = pc.cumulative_sum(pc.add(extra, constant)).to_pylist()
        placements: list[Placement] = []
        start, before = 0, 0  # first chunk row not yet placed; cum bytes before it
        while start < n:
            room = self.target_bytes - self.file_bytes[-1]
            stop = bisect_right(cum, before + room, lo=start)  # first row that does not fit
            if stop == start and self.file_rows[-1] == 0:
                stop = start + 1  # an oversized row alone in a file
            if stop > start:
                placements.append(self._fill(start, stop - start, cum[stop - 1] - before))
                before = cum[stop - 1]
                start = stop
            if start < n:
                self._open()
        return placements

    def _fill(self, offset: int, length: int, nbytes: int) -> Placement:
        placement = Placement(len(self.file_rows) - 1, self.file_rows[-1], offset, length)
        self.file_rows[-1] += length
        self.file_bytes[-1] += nbytes
        self.rows += length
        return placement
