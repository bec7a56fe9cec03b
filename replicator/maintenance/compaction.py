"""Compaction: bin-pack small data files (chosen by size tiers, ``compaction_inputs``), with
the position deletes that apply to them, into files near the target size, committed as ONE
snapshot that removes the old data files and the position-delete files that no longer apply.

Rows are read with pyiceberg's Arrow scan (position deletes applied, old files projected to
the current schema by field id) and written by the engine's own file writer
(``replicator.storage.file_writer``), so compacted files look like any batch's files.

The new files keep the highest data sequence number of the files they replace, so every
delete committed after those still applies to the compacted rows. That would wrongly put rows
of an older file out of reach of an equality delete committed between the old files, so
compaction runs only on a table with NO equality-delete files (right after a conversion, see
``replicator.maintenance.conversion``). A position-delete file is dropped only when every data file it names is
rewritten; one that also names a file that stays is kept (its entries for the rewritten
files then match nothing).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import FileScanTask, Table

from replicator.iceberg.dv_commit import vector_deleted_rows
from replicator.iceberg.files import (
    data_file_from_parquet,
    equality_delete_arrow_schema,
    position_delete_arrow_schema,
)
from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.iceberg.partitions import partition_key, sort_columns
from replicator.iceberg.table_commit import commit_replace, uses_vectors
from replicator.maintenance import MAINTENANCE_SUMMARY_KEY, Crash, no_crash
from replicator.maintenance.compaction_inputs import Candidate, choose_inputs
from replicator.storage.file_writer import CONTENT_DATA, TableFileWriter, WriterSpec, WrittenFile
from replicator.storage.fileio import file_io_properties
from replicator.storage.partitioning import PartitionKey

log = logging.getLogger(__name__)

KIND = "compaction"


@dataclass(frozen=True)
class CompactionPlan:
    snapshot_id: int
    data_files: tuple[DataFile, ...]  # rewritten
    sequence_number: int  # the highest data sequence number among them
    delete_files: tuple[DataFile, ...]  # position deletes that apply to them
    droppable: tuple[DataFile, ...]  # position-delete files naming only rewritten files
    # rewritten data file -> the delete files above naming it (read once, by the plan)
    deletes_of: Mapping[str, frozenset[str]] = field(hash=False, compare=False)


@dataclass(frozen=True)
class CompactionResult:
    data_files_removed: int
    delete_files_removed: int
    data_files_added: int
    rows: int
    snapshot_id: int | None  # None: nothing done


NOTHING = CompactionResult(0, 0, 0, 0, None)


def _current_files(
    table: Table, sequence_numbers: dict[str, int] | None = None
) -> tuple[list[DataFile], list[DataFile], list[DataFile]]:
    """(data, position-delete, equality-delete) files live in the current snapshot; fills
    ``sequence_numbers`` (path -> data sequence number) when given."""
    data: list[DataFile] = []
    pos: list[DataFile] = []
    eq: list[DataFile] = []
    head = table.current_snapshot()
    if head is None:
        return data, pos, eq
    for m in read_manifests(head, table.io):
        for entry in manifest_entries(m, table.io, live_only=True):
            f = entry.data_file
            if sequence_numbers is not None and entry.sequence_number is not None:
                sequence_numbers[f.file_path] = entry.sequence_number
            {DataFileContent.DATA: data, DataFileContent.POSITION_DELETES: pos}.get(f.content, eq).append(f)
    return data, pos, eq


def _deleted_rows(table: Table, delete_file: DataFile, vectors: dict[str, dict[str, int]]) -> dict[str, int]:
    """The data files a position-delete file names, with how many positions it deletes in each
    (a Puffin file: its live deletion vectors', ``vectors`` from ``dv_commit.vector_deleted_rows``)."""
    if delete_file.file_format == FileFormat.PUFFIN:
        return vectors.get(delete_file.file_path, {})
    with table.io.new_input(delete_file.file_path).open() as stream:
        # ParquetFile, not read_table: no dataset set-up for a small file (a plan reads all).
        counts = pq.ParquetFile(stream).read(columns=["file_path"]).column(0).value_counts()
    return {str(c["values"]): int(c["counts"]) for c in counts.to_pylist()}


def plan_compaction(
    table: Table, *, target_file_bytes: int, min_input_files: int, min_deleted_share: float = 0.0,
    small_file_bytes: int = 0,
) -> CompactionPlan | None:
    """What one compaction step would rewrite; None when not due (or not allowed).
    ``min_deleted_share``, ``small_file_bytes``: see ``compaction_inputs``."""
    head = table.current_snapshot()
    seqs: dict[str, int] = {}
    data, pos, eq = _current_files(table, seqs)
    if head is None or eq or not data:
        return None
    vectors = vector_deleted_rows(table) if uses_vectors(table) else {}
    counts = {f.file_path: _deleted_rows(table, f, vectors) for f in pos}
    targets = {path: set(c) for path, c in counts.items()}
    hit: dict[str, list[DataFile]] = defaultdict(list)
    deleted: dict[str, int] = defaultdict(int)
    for f in pos:
        for path in counts[f.file_path]:
            hit[path].append(f)
    for rows in counts.values():  # once per file: a Puffin file is listed once per vector
        for path, n in rows.items():
            deleted[path] += n
    by_path = {f.file_path: f for f in data}
    # Bin-packing stays within one partition of one spec: a step rewrites files of ONE
    # partition (its commit leaves every other partition's files alone).
    groups: dict[tuple[int, PartitionKey], list[DataFile]] = defaultdict(list)
    for f in data:
        groups[(f.spec_id, partition_key(f))].append(f)
    deletes_in: dict[tuple[int, PartitionKey], int] = defaultdict(int)
    for f in pos:
        deletes_in[(f.spec_id, partition_key(f))] += 1
    picked: list[Candidate] = []
    for home in sorted(groups, key=repr):
        picked = choose_inputs(
            [Candidate(f.file_path, f.file_size_in_bytes, f.file_path in hit,
                       min(1.0, deleted[f.file_path] / max(f.record_count, 1))) for f in groups[home]],
            target_file_bytes=target_file_bytes, min_input_files=min_input_files,
            delete_files=deletes_in[home], min_deleted_share=min_deleted_share,
            small_file_bytes=small_file_bytes,
        )  # fmt: skip
        if picked:
            break
    if not picked:
        return None
    chosen = [by_path[c.path] for c in picked]
    names = {f.file_path for f in chosen}
    applying = {d.file_path: d for f in chosen for d in hit.get(f.file_path, [])}
    droppable = [d for d in applying.values() if targets[d.file_path] <= names]
    deletes_of = {f.file_path: frozenset(d.file_path for d in hit.get(f.file_path, [])) for f in chosen}
    return CompactionPlan(
        head.snapshot_id, tuple(chosen), max(seqs.get(f.file_path, 0) for f in chosen),
        tuple(applying.values()), tuple(droppable), deletes_of,
    )  # fmt: skip


def compact(
    table: Table,
    *,
    target_file_bytes: int,
    min_input_files: int,
    min_deleted_share: float = 0.0,
    small_file_bytes: int = 0,
    crash: Crash = no_crash,
) -> tuple[Table, CompactionResult]:
    """One bounded compaction step; returns the refreshed table and what was done."""
    plan = plan_compaction(table, target_file_bytes=target_file_bytes, min_input_files=min_input_files,
                           min_deleted_share=min_deleted_share, small_file_bytes=small_file_bytes)  # fmt: skip
    if plan is None:
        return table, NOTHING
    t0 = time.perf_counter()
    written, rows = _rewrite(table, plan, target_file_bytes)
    crash("compaction-files-written")
    # The rewritten files' partition, under the spec they were written with.
    first = plan.data_files[0]
    added = [
        data_file_from_parquet(table, w.path, file_size=w.size, spec_id=first.spec_id,
                               partition=partition_key(first), footer=w.footer)
        for w in written
    ]
    summary = {
        MAINTENANCE_SUMMARY_KEY: KIND,
        f"{MAINTENANCE_SUMMARY_KEY}.data-files-removed": str(len(plan.data_files)),
        f"{MAINTENANCE_SUMMARY_KEY}.delete-files-removed": str(len(plan.droppable)),
        f"{MAINTENANCE_SUMMARY_KEY}.data-files-added": str(len(added)),
        f"{MAINTENANCE_SUMMARY_KEY}.rows": str(rows),
    }
    # Not committed (or unknown): the new files stay for orphan cleanup, which checks the
    # metadata, rather than risk deleting files a commit references.
    # v3: a rewritten data file's deletion vector is removed with it
    table = commit_replace(
        table, expected_snapshot_id=plan.snapshot_id,
        remove=[*plan.data_files, *plan.droppable], add_data=added,
        data_sequence_number=plan.sequence_number, summary=summary,
    )  # fmt: skip
    crash("compaction-committed")
    head = table.current_snapshot()
    log.info(
        "%s: compacted %d data file(s) + %d position-delete file(s) into %d file(s), %d rows, %.2fs",
        ".".join(table.name()), len(plan.data_files), len(plan.droppable), len(added), rows,
        time.perf_counter() - t0,
    )  # fmt: skip
    return table, CompactionResult(
        len(plan.data_files), len(plan.droppable), len(added), rows,
        head.snapshot_id if head is not None else None,
    )  # fmt: skip


def _rewrite(table: Table, plan: CompactionPlan, target_file_bytes: int) -> tuple[list[WrittenFile], int]:
    """Write the live rows of the plan's files into new files of about the target size."""
    schema = table.schema()
    ids = list(schema.identifier_field_ids)
    spec = WriterSpec(
        data_location=f"{table.location().rstrip('/')}/data",
        batch_id=f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}",
        data_schema=schema_to_pyarrow(schema),
        equality_schema=equality_delete_arrow_schema(schema, ids) if ids else pa.schema([]),
        position_schema=position_delete_arrow_schema(),
        sort_by=sort_columns(table),  # sorted: rolled by size (the stage's fan-out path)
        target_file_bytes=target_file_bytes,
        io_properties=file_io_properties(table.io.properties),
    )
    writer = TableFileWriter(spec)
    delete_file = {d.file_path: d for d in plan.delete_files}
    # Bytes per row of the inputs estimates when a file reaches the target.
    in_rows = sum(f.record_count for f in plan.data_files) or 1
    bytes_per_row = max(1.0, sum(f.file_size_in_bytes for f in plan.data_files) / in_rows)
    rows_per_file = max(1, int(target_file_bytes / bytes_per_row))
    scan = ArrowScan(table.metadata, table.io, schema, AlwaysTrue())
    index, in_file, rows = 0, 0, 0
    tasks = [
        FileScanTask(f, delete_files={delete_file[p] for p in plan.deletes_of.get(f.file_path, ())})
        for f in plan.data_files
    ]
    for group in _scan_groups(tasks):
        # One scan per group: its delete files are read once (not once per data file that
        # they name) and its data files in parallel; a group's rows are held at once.
        for batch in scan.to_record_batches(group):
            part = pa.Table.from_batches([batch])
            while part.num_rows:
                if in_file >= rows_per_file:
                    index, in_file = index + 1, 0
                take = part.slice(0, rows_per_file - in_file)
                writer.write_data(index, take)
                in_file += take.num_rows
                rows += take.num_rows
                part = part.slice(take.num_rows)
    written = [w for w in writer.close() if w.content == CONTENT_DATA]
    return written, rows


# Input bytes one scan of ``_rewrite`` reads at once (it holds their rows): small-file
# compactions, the steady-state case, are one scan.
SCAN_GROUP_BYTES = 64 * 1024 * 1024


def _scan_groups(tasks: list[FileScanTask]) -> list[list[FileScanTask]]:
    """``tasks`` in order, cut into runs of at most ``SCAN_GROUP_BYTES`` input (at least one)."""
    groups: list[list[FileScanTask]] = []
    size = 0
    for t in tasks:
        if not groups or size + t.file.file_size_in_bytes > SCAN_GROUP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.file.file_size_in_bytes
    return groups
