"""Equality deletes -> position deletes, with exactly the same meaning, in ONE snapshot.

An equality-delete file with data sequence number ``e`` deletes every row whose key columns
(its ``equality_ids``) equal one of its rows, in data files with a data sequence number ``< e``
(Iceberg spec, "Scan planning"). Conversion finds those rows with Iceberg Java in Spark and
names them by position:

1. plan (pyiceberg, the head's manifests): the live equality-delete files, oldest first (at most
   ``max_files``), and the data sequence number of every live data file;
2. the rows the converted deletes hit, found in this process with Arrow when the data files
   they can reach are small enough (``replicator.maintenance.conversion_arrow``: key columns
   of those files only), else with Spark: the rows the head deletes, read with Iceberg's ``_file``/``_pos`` metadata columns
   where ``_deleted`` (selecting ``_deleted`` makes Iceberg return deleted rows too, flagged,
   instead of dropping them; rows our equality deletes hit are among them), joined with each
   data file's sequence number and with the delete keys, each key carrying the highest sequence
   number of the converted files that hold it: a row is hit iff ``data_seq < max(eq_seq)``;
3. the positions, range-partitioned and sorted by (file_path, pos) as the spec requires, are
   written by Spark tasks with the engine's file writer (``replicator.storage.file_writer``);
4. ``commit_rewrite``: one ``replace`` snapshot removing the converted equality-delete files
   and adding the position-delete files, based on the planned head (``CommitConflictError`` if
   another commit came first).

Same meaning: a position delete names one row of one data file, and every named row is one the
equality delete hit, in a file older than the equality delete; rows written at or after its
sequence number are never named. The new position deletes get the new snapshot's (higher)
sequence number, which still reaches those older files. Rows already deleted by other files
may be named again: deleting a row twice changes nothing.

Equality-delete files are matched to table columns by name (the engine writes them with the
table's column names and never renames key columns).

Crash points: ``conversion-planned`` (nothing written), ``conversion-files-written`` (position
deletes written, not committed: orphans for orphan cleanup), ``conversion-committed``.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial, reduce
from typing import TYPE_CHECKING

import pyarrow as pa
from pyiceberg.manifest import DataFile, DataFileContent
from pyiceberg.table import Table

from replicator.iceberg.files import position_delete_arrow_schema, position_delete_file_from_parquet
from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.iceberg.partitions import partition_key
from replicator.iceberg.table_commit import commit_replace, position_files_as_vectors, uses_vectors
from replicator.maintenance import MAINTENANCE_SUMMARY_KEY
from replicator.maintenance.conversion_arrow import (
    LOCAL_MAX_ROWS,
    candidate_data_files,
    local_positions,
)
from replicator.storage.file_writer import (
    WRITTEN_FILE_DDL,
    TableFileWriter,
    WriterSpec,
    write_position_delete_partition,
)
from replicator.storage.fileio import file_io_properties
from replicator.storage.partitioning import PartitionKey
from spark.s3a import configure_spark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["KIND", "ConversionResult", "convert_equality_deletes"]

log = logging.getLogger(__name__)

KIND = "conversion"

# Positions per written position-delete file (about 10-20 bytes each once compressed).
POSITIONS_PER_FILE = 4_000_000


@dataclass(frozen=True)
class ConversionResult:
    equality_delete_files: int  # removed
    position_delete_files: int  # added
    rows: int  # positions written
    snapshot_id: int | None  # None: nothing to do
    path: str = ""  # where the positions were found: "arrow" (this process) or "spark"


NOTHING = ConversionResult(0, 0, 0, None)


@dataclass(frozen=True)
class _Plan:
    snapshot_id: int
    equality_deletes: list[tuple[DataFile, int]]  # (file, data sequence number), oldest first
    data_files: list[tuple[DataFile, int]]  # live data files, with their data sequence numbers

    @property
    def data_sequence(self) -> dict[str, int]:
        return {f.file_path: seq for f, seq in self.data_files}


def plan_conversion(table: Table, max_files: int | None = None) -> _Plan | None:
    """The oldest live equality-delete files of the head (None: there are none)."""
    head = table.current_snapshot()
    if head is None:
        return None
    equality: list[tuple[DataFile, int]] = []
    data_files: list[tuple[DataFile, int]] = []
    for manifest in read_manifests(head, table.io):
        for entry in manifest_entries(manifest, table.io, live_only=True):
            seq = entry.sequence_number
            if seq is None:  # pragma: no cover - inherited on read for v2 manifests
                raise ValueError(f"{entry.data_file.file_path}: no data sequence number")
            if entry.data_file.content == DataFileContent.EQUALITY_DELETES:
                equality.append((entry.data_file, seq))
            elif entry.data_file.content == DataFileContent.DATA:
                data_files.append((entry.data_file, seq))
    if not equality:
        return None
    equality.sort(key=lambda fs: (fs[1], fs[0].file_path))
    if max_files is not None:
        equality = equality[: max(1, max_files)]
    return _Plan(head.snapshot_id, equality, data_files)


def convert_equality_deletes(
    spark: SparkSession,
    table: Table,
    *,
    max_files: int | None = None,
    local_max_rows: int = LOCAL_MAX_ROWS,
    crash: Callable[[str], None] | None = None,
) -> ConversionResult:
    """Replace the head's equality-delete files (the oldest ``max_files``) by position deletes.

    The positions are found in this process with Arrow when the data files the deletes can
    reach hold at most ``local_max_rows`` rows (``conversion_arrow``), else with Spark.

    ``table`` is advanced to the new snapshot. Raises ``CommitConflictError`` if the table's
    head moved while converting (the written files are then orphans; nothing else changed).
    """
    crash = crash or (lambda _point: None)
    plan = plan_conversion(table, max_files)
    if plan is None:
        return NOTHING
    started = time.perf_counter()
    crash("conversion-planned")

    io_properties = file_io_properties(table.io.properties)
    spec = WriterSpec(
        data_location=f"{table.location().rstrip('/')}/data",
        batch_id=f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}-conv",
        data_schema=position_delete_arrow_schema(),  # unused: no data files are written
        equality_schema=position_delete_arrow_schema(),  # unused
        position_schema=position_delete_arrow_schema(),
        io_properties=io_properties,
    )
    path, candidates, written = _find_and_write(spark, table, plan, spec, local_max_rows)
    rows = sum(w[1] for w in written)
    positions_seconds = time.perf_counter() - started
    added = [
        position_delete_file_from_parquet(table, p, spec_id=spec_id, partition=key)
        for p, _records, spec_id, key in written
    ]
    crash("conversion-files-written")

    added, removed = _commit(table, plan, added, rows)
    crash("conversion-committed")
    head = table.current_snapshot()
    log.info(
        "%s: converted %d equality-delete file(s) into %d position-delete file(s), %d positions, "
        "%.2fs (%.2fs finding and writing them, %s, %d of %d data files read)",
        ".".join(table.name()),
        len(removed),
        len(added),
        rows,
        time.perf_counter() - started,
        positions_seconds,
        path,
        len(candidates) if path == "arrow" else len(plan.data_files),
        len(plan.data_files),
    )
    return ConversionResult(
        equality_delete_files=len(removed),
        position_delete_files=len(added),
        rows=rows,
        snapshot_id=head.snapshot_id if head is not None else None,
        path=path,
    )


def _find_and_write(
    spark: SparkSession, table: Table, plan: _Plan, spec: WriterSpec, local_max_rows: int
) -> tuple[str, list[tuple[DataFile, int]], list[_Written]]:
    """Find the rows the planned equality deletes hit and write their position deletes, per
    home partition: (``arrow`` or ``spark``, the candidate data files, files written)."""
    # The equality deletes' own row counts bound the positions (a key hits about one row):
    # enough to size the output without a counting pass over the table.
    expected = sum(f.record_count for f, _seq in plan.equality_deletes)
    candidates = candidate_data_files(plan.equality_deletes, plan.data_files)
    local = None
    if sum(f.record_count for f, _seq in candidates) <= local_max_rows:
        local = local_positions(table, plan.equality_deletes, candidates)
    # A position delete belongs to the partition (and spec) of the data file it names.
    homes = {f.file_path: (f.spec_id, partition_key(f)) for f, _seq in plan.data_files}
    partitioned = len(set(homes.values())) > 1
    if local is not None:
        path = "arrow"
        written = _write_local(local, spec, homes)
    else:
        path = "spark"
        configure_spark(spark, table.metadata_location, spec.io_properties)
        positions = _positions(spark, table, plan)
        if partitioned:
            # Rows of the deletes' keys only: few enough to group here, by target partition.
            rows_found = positions.collect()
            found = pa.Table.from_pylist(
                [{"file_path": r["file_path"], "pos": r["pos"]} for r in rows_found],
                schema=pa.schema([("file_path", pa.string()), ("pos", pa.int64())]),
            ).sort_by([("file_path", "ascending"), ("pos", "ascending")])
            written = _write_local(found, spec, homes)
        else:  # every data file in one home: the one of them all (maybe not the default spec)
            spec_id, key = next(iter(homes.values()), (None, ()))
            written = [(p, n, spec_id, key) for p, n in _write(positions, spec, expected)]
    return path, candidates, written


def _commit(
    table: Table, plan: _Plan, added: list[DataFile], rows: int
) -> tuple[list[DataFile], list[DataFile]]:
    """One replace snapshot: the equality deletes out, the position deletes (v3: their
    deletion vectors) in; returns (position-delete files committed, equality deletes removed)."""
    # v3: the positions as deletion vectors; the files are not committed
    vectors = position_files_as_vectors(table, [f.file_path for f in added]) if uses_vectors(table) else None
    added = [] if vectors is not None else added
    removed = [f for f, _seq in plan.equality_deletes]
    summary = {
        MAINTENANCE_SUMMARY_KEY: KIND,
        f"{MAINTENANCE_SUMMARY_KEY}.equality-delete-files-removed": str(len(removed)),
        f"{MAINTENANCE_SUMMARY_KEY}.position-delete-files-added": str(len(added)),
        f"{MAINTENANCE_SUMMARY_KEY}.positions": str(rows),
        **({f"{MAINTENANCE_SUMMARY_KEY}.deletion-vectors": str(len(vectors))} if vectors is not None else {}),
    }
    commit_replace(
        table,
        expected_snapshot_id=plan.snapshot_id,
        remove=removed,
        add_deletes=added,
        vectors=vectors,
        summary=summary,
    )
    return added, removed


def _positions(spark: SparkSession, table: Table, plan: _Plan) -> DataFrame:
    """(file_path, pos) of every row the planned equality deletes hit, each once."""
    from pyspark.sql import functions as F

    scan = (
        spark.read.format("iceberg")
        .option("snapshot-id", str(plan.snapshot_id))
        .load(table.metadata_location)
    )
    files = spark.createDataFrame(
        sorted(plan.data_sequence.items()), "_conv_file string, _conv_data_seq long"
    )
    groups: dict[tuple[int, ...], list[tuple[DataFile, int]]] = defaultdict(list)
    for delete_file, seq in plan.equality_deletes:
        groups[tuple(delete_file.equality_ids or ())].append((delete_file, seq))

    hits: list[DataFrame] = []
    schema = table.schema()
    for equality_ids, deletes in groups.items():
        keys = [schema.find_column_name(i) for i in equality_ids]
        if not keys or any(k is None for k in keys):
            raise ValueError(f"equality ids {equality_ids} are not columns of the table")
        names = [k for k in keys if k is not None]
        key_schema = scan.select(*[F.col(_quote(k)) for k in names]).schema
        # Highest sequence number per key: a row is hit iff some converted file holding its
        # key is newer than the row's data file.
        by_seq: dict[int, list[str]] = defaultdict(list)
        for delete_file, seq in deletes:
            by_seq[seq].append(delete_file.file_path)
        parts = [
            spark.read.schema(key_schema).parquet(*paths).withColumn("_conv_eq_seq", F.lit(seq))
            for seq, paths in sorted(by_seq.items())
        ]
        keyed = reduce(lambda a, b: a.unionByName(b), parts)
        delete_keys = keyed.groupBy(*[F.col(_quote(k)) for k in names]).agg(
            F.max("_conv_eq_seq").alias("_conv_eq_seq")
        )
        # Only rows the head deletes can be hit by its equality deletes. Filtering on _deleted
        # also keeps it in the scan: selected, it makes Iceberg return deleted rows (flagged)
        # instead of dropping them, and those are the rows we look for.
        rows = (
            scan.where(F.col("_deleted"))
            .select(*[F.col(_quote(k)) for k in names], "_file", "_pos")
            .join(F.broadcast(files), F.col("_file") == F.col("_conv_file"))
        )
        r, d = rows.alias("r"), delete_keys.alias("d")
        condition = reduce(
            lambda a, b: a & b,
            [F.col(f"r.{_quote(k)}").eqNullSafe(F.col(f"d.{_quote(k)}")) for k in names],
        )
        hit = (
            r.join(d, condition)
            .where(F.col("r._conv_data_seq") < F.col("d._conv_eq_seq"))
            .select(F.col("r._file").alias("file_path"), F.col("r._pos").alias("pos"))
        )
        hits.append(hit)
    union = reduce(lambda a, b: a.unionByName(b), hits)
    return union.distinct() if len(hits) > 1 else union


def _write(positions: DataFrame, spec: WriterSpec, expected: int) -> list[tuple[str, int]]:
    """Write ``positions`` as position-delete files sorted by (file_path, pos), in one Spark
    job when one file is expected; (path, positions) of each file written."""
    partitions = max(1, math.ceil(expected / POSITIONS_PER_FILE))
    if partitions == 1:
        spread = positions.repartition(1)
    else:  # samples the positions first (one more pass), for files of similar size
        spread = positions.repartitionByRange(partitions, "file_path", "pos")
    written = (
        spread.sortWithinPartitions("file_path", "pos")
        .mapInArrow(partial(write_position_delete_partition, spec), WRITTEN_FILE_DDL)
        .collect()
    )
    return sorted((row["path"], row["records"]) for row in written)


_Written = tuple[str, int, int | None, PartitionKey]  # path, positions, spec id, partition


def _write_local(
    positions: pa.Table, spec: WriterSpec, homes: dict[str, tuple[int, PartitionKey]]
) -> list[_Written]:
    """One position-delete file of ``positions`` (sorted) per (spec, partition) of the data
    files they name, or none when there are none."""
    writer = TableFileWriter(spec)
    written = writer.write_position_deletes_by_home(positions, homes)
    writer.close()
    return [(w.path, w.records, spec_id, w.partition) for spec_id, w in written]


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"
