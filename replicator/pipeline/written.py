"""What the stage wrote for one table of a batch, as the commit takes it: Iceberg ``DataFile``
descriptions of its data and delete files (footers only), and on a format-v3 table the
positions it deletes per data file, committed as deletion vectors instead of its
position-delete Parquet files (``iceberg.table_commit``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from replicator.iceberg.files import (
    data_file_from_parquet,
    equality_delete_file_from_parquet,
    position_delete_file_from_parquet,
)
from replicator.iceberg.partitions import global_spec_id
from replicator.iceberg.roaring import Positions as VectorPositions
from replicator.iceberg.table_commit import add_positions, position_files_as_vectors, uses_vectors
from replicator.storage.file_writer import (
    CONTENT_DATA,
    CONTENT_EQUALITY_DELETES,
    CONTENT_POSITION_DELETES,
)
from spark.apply_stage import StageResult


@dataclass
class Written:
    data: list[DataFile] = field(default_factory=list)
    deletes: list[DataFile] = field(default_factory=list)
    # format v3: the positions the batch deletes, per data file (written at commit time as
    # deletion vectors, merged with each file's live one)
    vectors: dict[str, VectorPositions] = field(default_factory=dict)
    # rows the stage wrote, by kind (the table's totals)
    rows_written: int = 0
    position_deletes: int = 0
    equality_deletes: int = 0

    @property
    def paths(self) -> list[str]:
        return [f.file_path for f in [*self.data, *self.deletes]]


def describe(table: Table, result: StageResult) -> Written:
    """Iceberg DataFiles for the files the stage wrote (footers only)."""
    key_ids = list(table.schema().identifier_field_ids)
    # The stage wrote with the default spec (``apply._stage_spec``, same table object);
    # equality deletes go under the unpartitioned spec, which reaches every partition.
    spec_id, global_id = table.metadata.default_spec_id, global_spec_id(table)
    out = Written()
    vectors = uses_vectors(table)
    if not vectors and any(f.rows is not None for f in result.files):
        raise AssertionError("position deletes kept in memory for a table without deletion vectors")
    for f in result.files:
        if f.content == CONTENT_DATA:
            out.data.append(data_file_from_parquet(table, f.path, file_size=f.size, spec_id=spec_id,
                                                   partition=f.partition, footer=f.footer))  # fmt: skip
            out.rows_written += f.records
        elif f.content == CONTENT_POSITION_DELETES and vectors:
            out.position_deletes += f.records  # as deletion vectors, below
        elif f.content == CONTENT_POSITION_DELETES:
            # A delete of an earlier batch's row goes to the spec of the file it names.
            home = spec_id if f.spec_id is None else f.spec_id
            out.deletes.append(position_delete_file_from_parquet(
                table, f.path, file_size=f.size, spec_id=home, partition=f.partition, footer=f.footer))
            out.position_deletes += f.records
        elif f.content == CONTENT_EQUALITY_DELETES:
            out.deletes.append(equality_delete_file_from_parquet(
                table, f.path, key_ids, file_size=f.size, spec_id=global_id, footer=f.footer))
            out.equality_deletes += f.records
    if vectors:  # v3: the stage's position-delete files become vectors (never committed)
        positions = [f for f in result.files if f.content == CONTENT_POSITION_DELETES]
        out.vectors = position_files_as_vectors(table, [f.path for f in positions if f.rows is None])
        for f in positions:
            if f.rows is not None:  # kept in memory: no file was written
                add_positions(out.vectors, f.rows)
    return out


def discard(table: Table, written: Written) -> None:
    """Delete files of an attempt the catalog did not take (never referenced)."""
    io = table.io
    for path in written.paths:
        with contextlib.suppress(Exception):  # best effort: orphan cleanup catches the rest
            io.delete(path)
