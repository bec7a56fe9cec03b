"""A table's batch of plain appends written without the mapper's key map (issue 27 item 3).

A batch of snapshot reads that its policy does not upsert (``MappingPolicy.upsert_reads``
false), whose keys are all distinct, is one the mapper only appends: every row goes to the
data files in order, nothing is deleted, and its key map (a Python dict of every key, about
half of the driver's stage time for such a batch) only proves that. ``append_rows`` checks
the same in Arrow and hands the rows to the file writer, placed in data files by the mapper's
size rule (``ops_mapping.sizing``), so the files hold what the mapper would write. Anything
else (a repeated key: the later row wins there; a key type whose Python equality is not
Arrow's; another op) returns None and goes through the mapper.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from ops_mapping import OP_COLUMN, MappingStats
from ops_mapping.contract import AFTER_KEY_IN_TABLE_COLUMN
from ops_mapping.sizing import FileRoller, RowSizeEstimator
from replicator.storage.file_writer import TableFileWriter, WrittenFile

_READ = pa.scalar("r")


def all_reads(staged: pa.Table) -> bool:
    """Every staged row is a snapshot read (op ``r``)."""
    ops = staged.column(OP_COLUMN)
    return ops.null_count == 0 and bool(pc.all(pc.equal(ops, _READ)).as_py())
# Rows handed to the file writer at once (the mapper's chunks: same row groups).
WRITE_ROWS = 65_536


def _exact_key(t: pa.DataType) -> bool:
    """Arrow tells two values of this type apart exactly when Python's ``==`` does (not
    floats: -0.0 == 0.0 and NaN; not nested types)."""
    return bool(
        pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
        or pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_date(t)
        or pa.types.is_timestamp(t) or pa.types.is_decimal(t) or pa.types.is_boolean(t)
    )  # fmt: skip


def plain_appends(staged: pa.Table, key_columns: tuple[str, ...], upsert_reads: bool) -> bool:
    """The mapper would append every staged row and delete nothing: reads not upserted, of
    distinct (and non-null) keys of exact types."""
    n = staged.num_rows
    if upsert_reads or not key_columns or not n or AFTER_KEY_IN_TABLE_COLUMN in staged.column_names:
        return False
    if not all_reads(staged):
        return False
    keys = staged.select(list(key_columns))
    if any(c.null_count for c in keys.columns) or not all(_exact_key(t) for t in keys.schema.types):
        return False
    if len(key_columns) == 1:
        return bool(pc.count_distinct(keys.column(0)).as_py() == n)
    return bool(keys.group_by(list(key_columns)).aggregate([]).num_rows == n)


def append_rows(
    staged: pa.Table, data_columns: tuple[str, ...], writer: TableFileWriter, target_file_bytes: int
) -> tuple[list[WrittenFile], MappingStats]:
    """Write ``staged`` (in order, ``plain_appends``) as data files: the files and the
    counters the mapper would give."""
    rows = staged.select(list(data_columns))
    n = rows.num_rows
    roller = FileRoller(target_file_bytes, [])
    constant, extra = RowSizeEstimator(rows.schema).estimate(rows)
    for p in roller.place(n, constant, extra):
        for at in range(p.offset, p.offset + p.length, WRITE_ROWS):
            writer.write_data(p.file_index, rows.slice(at, min(WRITE_ROWS, p.offset + p.length - at)))
    files = writer.close()
    stats = MappingStats(events=n, rows_written=n, position_deletes=0, equality_deletes=0,
                         data_files=len(roller.file_rows))  # fmt: skip
    return files, stats
