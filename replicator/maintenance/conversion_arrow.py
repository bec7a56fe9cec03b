"""The positions an equality-delete conversion names, found in this process with Arrow.

Same rule as the Spark path (``replicator.maintenance.conversion``): a row of a data file with
data sequence number ``d`` is hit iff one of the converted equality-delete files holding its
key has a sequence number ``e > d``. Only the key columns are read, and only of the data files
that can hold a hit:

* data files with ``d`` below the newest converted equality delete (younger ones are out of
  every converted delete's reach);
* for a single integer key column, data files whose key range (the manifest's lower/upper
  bounds) meets the range of the delete keys that reach them.

A conversion step goes this way when those candidate files hold at most ``max_rows`` rows
(``LOCAL_MAX_ROWS``): no Spark job (planning, shuffles, a Python worker) for the few thousand
rows a steady stream of small batches leaves between slices, the common case; bigger inputs
go to Spark. Key columns with a null anywhere (Iceberg identifier fields are required, so
only a foreign table could have them) or types Arrow cannot join also go to Spark, which
compares null-safely.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.types import IntegerType, LongType, NestedField

__all__ = ["LOCAL_MAX_ROWS", "candidate_data_files", "local_positions"]

# Candidate data-file rows up to which a conversion step matches keys in this process (only
# the key columns are read: a few bytes a row, well under what one compaction step reads).
LOCAL_MAX_ROWS = 2_000_000

_SEQ = "_conv_eq_seq"
_POS = "_conv_pos"


def candidate_data_files(
    equality_deletes: Sequence[tuple[DataFile, int]],
    data_files: Sequence[tuple[DataFile, int]],
) -> list[tuple[DataFile, int]]:
    """The data files (with their data sequence numbers) some converted delete can reach."""
    newest = max((seq for _f, seq in equality_deletes), default=0)
    return [(f, seq) for f, seq in data_files if seq < newest]


def local_positions(
    table: Table,
    equality_deletes: Sequence[tuple[DataFile, int]],
    data_files: Sequence[tuple[DataFile, int]],
) -> pa.Table | None:
    """(file_path, pos) of every row the equality deletes hit, sorted, each once; None when
    this path cannot decide exactly (nulls in key columns, key types Arrow cannot join)."""
    schema = table.schema()
    groups: dict[tuple[int, ...], list[tuple[DataFile, int]]] = defaultdict(list)
    for delete_file, seq in equality_deletes:
        groups[tuple(delete_file.equality_ids or ())].append((delete_file, seq))
    parts: list[pa.Table] = []
    for equality_ids, deletes in groups.items():
        fields = [schema.find_field(i) for i in equality_ids]
        if not fields:
            raise ValueError(f"equality ids {equality_ids} are not columns of the table")
        try:
            found = _group_positions(table, fields, deletes, data_files)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            return None
        if found is None:
            return None
        parts.append(found)
    out = pa.concat_tables(parts) if parts else _empty()
    if len(parts) > 1:  # a row hit through two key sets is named once
        out = out.group_by(["file_path", "pos"]).aggregate([])
    return out.sort_by([("file_path", "ascending"), ("pos", "ascending")])


def _group_positions(
    table: Table,
    fields: list[NestedField],
    deletes: Sequence[tuple[DataFile, int]],
    data_files: Sequence[tuple[DataFile, int]],
) -> pa.Table | None:
    names = [f.name for f in fields]
    types = [schema_to_pyarrow(f.field_type) for f in fields]
    keyed = []
    for delete_file, seq in deletes:
        keys = _read_keys(table, delete_file.file_path, names, types)
        if keys is None:
            return None
        keyed.append(keys.append_column(_SEQ, pa.array(np.full(keys.num_rows, seq, dtype=np.int64))))
    # Highest sequence number per key: a row is hit iff it is above the row's data file's.
    delete_keys = pa.concat_tables(keyed).group_by(names).aggregate([(_SEQ, "max")])
    seq_column = delete_keys.column(f"{_SEQ}_max")
    bounded = len(fields) == 1 and isinstance(fields[0].field_type, (IntegerType, LongType))
    found: list[pa.Table] = []
    for data_file, data_seq in sorted(data_files, key=lambda fs: fs[0].file_path):
        reaching = delete_keys.filter(pc.greater(seq_column, data_seq))
        if reaching.num_rows == 0:
            continue
        if bounded and not _may_hold(data_file, fields[0], reaching.column(names[0])):
            continue
        keys = _read_keys(table, data_file.file_path, names, types)
        if keys is None:
            return None
        rows = keys.append_column(_POS, pa.array(np.arange(keys.num_rows, dtype=np.int64)))
        hit = rows.join(reaching.select(names), names, join_type="inner")
        if hit.num_rows:
            pos = pc.sort_indices(hit.column(_POS))
            positions = hit.column(_POS).take(pos)
            found.append(pa.table({
                "file_path": pa.array([data_file.file_path] * hit.num_rows, pa.string()),
                "pos": positions.cast(pa.int64()),
            }))  # fmt: skip
    return pa.concat_tables(found) if found else _empty()


def _may_hold(data_file: DataFile, field: NestedField, keys: pa.ChunkedArray) -> bool:
    """False only when the data file's key range (manifest bounds) misses every key."""
    lower = (data_file.lower_bounds or {}).get(field.field_id)
    upper = (data_file.upper_bounds or {}).get(field.field_id)
    if lower is None or upper is None:
        return True
    ftype = field.field_type
    if not isinstance(ftype, (IntegerType, LongType)):
        return True
    if len(lower) != len(upper) or len(lower) not in (4, 8):
        return True
    # Bounds written while the column was an int read as one (int -> long promotion).
    kind = ftype if len(lower) == 8 else IntegerType()
    low, high = from_bytes(kind, lower), from_bytes(kind, upper)
    span = pc.min_max(keys)
    kmin, kmax = span["min"].as_py(), span["max"].as_py()
    if kmin is None or kmax is None:
        return True
    return not (high < kmin or low > kmax)


def _read_keys(table: Table, path: str, names: list[str], types: list[pa.DataType]) -> pa.Table | None:
    """The key columns of a Parquet file, in row order, cast to the table's types; None if a
    key is null."""
    with table.io.new_input(path).open() as stream:
        keys = pq.ParquetFile(stream).read(columns=names)  # no dataset set-up per small file
    cols = []
    for name, type_ in zip(names, types, strict=True):
        col = keys.column(name)
        if col.null_count:
            return None
        cols.append(col.cast(type_) if col.type != type_ else col)
    return pa.Table.from_arrays(cols, names=names)


def _empty() -> pa.Table:
    return pa.table({"file_path": pa.array([], pa.string()), "pos": pa.array([], pa.int64())})
