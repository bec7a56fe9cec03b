"""Input column names, the mapping policy and the frozen result types of ``BatchMapper``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from ops_mapping.errors import OpsMappingError

SEQ_COLUMN = "__rep_seq"
OP_COLUMN = "__rep_op"
BEFORE_KEY_PREFIX = "__rep_bk__"
# Optional bool column: for a 'u' that changes the key, whether its AFTER key had a live row in
# the table before this batch (null: not known, taken as no). Under a deferrable primary key
# a transaction may move a row onto a key whose old row is moved away only later
# (``UPDATE t SET id = 3 - id``: u 1->2, u 2->1); the mapper then needs to know that the
# later 'u 2->...' removes the table's old row 2, not the row this batch just wrote.
AFTER_KEY_IN_TABLE_COLUMN = "__rep_ak_in_table"
RESERVED_PREFIX = "__rep_"

OPS = ("c", "r", "u", "d")

MIB = 1024 * 1024

# Iceberg's reserved field ids for position delete files (spec, "Position Delete Files").
POSITION_DELETE_FILE_PATH_ID = 2147483546
POSITION_DELETE_POS_ID = 2147483545
_FILE_PATH_FIELD_ID = str(POSITION_DELETE_FILE_PATH_ID).encode()
_POS_FIELD_ID = str(POSITION_DELETE_POS_ID).encode()

# ``BatchMapper(table_rows=...)`` (``delete_mode: position``): the live rows earlier batches
# wrote for keys this batch may delete: the key columns plus where the row is.
TABLE_ROW_PATH_COLUMN = "__rep_file_path"
TABLE_ROW_POS_COLUMN = "__rep_pos"

# ``MultisetMapper(table_rows=...)`` (tables without a primary key): the rows are named by
# their whole-row fingerprint (``row_identity``), two uint64 words, instead of key columns.
ROW_ID_HI_COLUMN = "__rep_row_hi"
ROW_ID_LO_COLUMN = "__rep_row_lo"

POSITION_DELETE_INDEX_SCHEMA = pa.schema(
    [pa.field("file_index", pa.int32(), nullable=False), pa.field("pos", pa.int64(), False)]
)
POSITION_DELETE_PATH_SCHEMA = pa.schema(
    [
        pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": _FILE_PATH_FIELD_ID}),
        pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": _POS_FIELD_ID}),
    ]
)


def before_key_column(key_column: str) -> str:
    """Name of the input column that carries the BEFORE value of ``key_column``."""
    return BEFORE_KEY_PREFIX + key_column


@dataclass(frozen=True, slots=True)
class MappingPolicy:
    """How one table's batch is mapped.

    ``upsert_creates`` / ``upsert_reads``: a 'c' / 'r' event whose key was not written earlier
    in this batch also equality-deletes its key, so replaying it (or a snapshot read that
    overlaps streamed changes) cannot leave a second live row. Reads default to upsert because
    snapshot overlap is expected; creates default to plain appends because a valid source never
    creates a present key and an equality delete per insert costs reads at query time.
    """

    target_file_bytes: int = 128 * MIB
    upsert_creates: bool = False
    upsert_reads: bool = True

    def __post_init__(self) -> None:
        if self.target_file_bytes <= 0:
            raise ValueError(f"target_file_bytes must be > 0, got {self.target_file_bytes}")


@dataclass(frozen=True, slots=True)
class DataSlice:
    """Rows to append to data file ``file_index`` of this batch, the first one at ``first_pos``.

    Slices of one file arrive in order and are contiguous: a slice's ``first_pos`` equals the
    number of rows the earlier slices put in that file.
    """

    file_index: int
    first_pos: int
    rows: pa.Table

    @property
    def num_rows(self) -> int:
        return int(self.rows.num_rows)


@dataclass(frozen=True, slots=True)
class MappedChunk:
    """What one input RecordBatch produced: rows to write and new equality deletes.

    ``equality_deletes`` holds only the key columns (data-schema types), each key at most once
    per batch, in event order. Position deletes are only known at ``finish`` because a later
    event may still delete a row written now.
    """

    data: tuple[DataSlice, ...]
    equality_deletes: pa.Table

    @property
    def rows_written(self) -> int:
        return sum(s.num_rows for s in self.data)


@dataclass(frozen=True, slots=True)
class MappingStats:
    """Counters of one whole batch."""

    events: int
    rows_written: int
    position_deletes: int
    equality_deletes: int
    data_files: int
    table_position_deletes: int = 0  # rows of earlier batches deleted by position
    # Tables without a key: updates/deletes whose old row image matched no live row.
    unmatched_deletes: int = 0

    @property
    def live_rows_written(self) -> int:
        """Rows of this batch still live after its own position deletes."""
        return self.rows_written - self.position_deletes


@dataclass(frozen=True, slots=True)
class MappedTail:
    """End of a batch: its position deletes and per-file totals.

    ``position_deletes`` has columns ``file_index`` (int32) and ``pos`` (int64), sorted by
    (file_index, pos), no duplicates, each pointing at a row written by this batch.
    ``file_rows[i]`` / ``file_estimated_bytes[i]`` describe data file ``i``.
    ``table_position_deletes`` (``delete_mode: position`` only): rows of earlier batches this
    batch deletes, as (file_path, pos) sorted by both, in place of equality deletes.
    """

    position_deletes: pa.Table
    stats: MappingStats
    file_rows: tuple[int, ...]
    file_estimated_bytes: tuple[int, ...]
    table_position_deletes: pa.Table = field(default_factory=POSITION_DELETE_PATH_SCHEMA.empty_table)

    def position_delete_table(self, file_paths: Sequence[str]) -> pa.Table:
        """Position deletes as Iceberg wants them: (file_path, pos) sorted by path then pos.

        ``file_paths[i]`` is the path the caller wrote data file ``i`` to. Sorting here (not by
        index) keeps the output valid whatever naming scheme the caller uses.
        """
        if len(file_paths) != len(self.file_rows):
            raise OpsMappingError(
                f"got {len(file_paths)} file paths for {len(self.file_rows)} data files"
            )
        paths = pa.array(list(file_paths), pa.string())
        table = pa.table(
            {
                "file_path": pc.take(paths, self.position_deletes.column("file_index")),
                "pos": self.position_deletes.column("pos"),
            }
        )
        table = table.sort_by([("file_path", "ascending"), ("pos", "ascending")])
        return table.cast(POSITION_DELETE_PATH_SCHEMA)
