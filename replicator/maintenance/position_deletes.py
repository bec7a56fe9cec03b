"""Position-delete files merged per partition, on their own (what Iceberg's
``rewrite_position_delete_files`` does): a partition that holds many small position-delete
files (a batch or a conversion adds one per partition it touched) gets them replaced by ONE
file, sorted by (file_path, pos), without the entries that name data files no longer live.
Readers then open one delete file per partition instead of one per batch.

This is what keeps reads cheap while compaction leaves big data files alone below their
deleted-rows threshold (``compaction_inputs``): their deletes stay position deletes, merged.

Why the merge keeps every delete exactly where it applied: a position delete names one data
file by path and applies to it when the data file's data sequence number is at most the
delete's. The merged file gets the new snapshot's (higher) sequence number, and every data
file it names was already live, with a lower number, when the entry was first written; paths
are never reused, so no other file can match. One step merges one partition of one spec, so
a commit leaves every other partition's files alone.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table import Table

from replicator.iceberg.files import position_delete_arrow_schema, position_delete_file_from_parquet
from replicator.iceberg.manifests import manifest_entries, read_manifests
from replicator.iceberg.partitions import partition_key
from replicator.iceberg.rewrite import commit_rewrite
from replicator.maintenance import MAINTENANCE_SUMMARY_KEY, Crash, no_crash
from replicator.storage.file_writer import TableFileWriter, WriterSpec
from replicator.storage.fileio import file_io_properties
from replicator.storage.partitioning import PartitionKey

log = logging.getLogger(__name__)

KIND = "position-delete-merge"
# Position-delete files one step merges at most (a bounded step; the rest at the next one).
MAX_FILES_PER_STEP = 256


@dataclass(frozen=True)
class MergePlan:
    snapshot_id: int
    spec_id: int
    partition: PartitionKey
    delete_files: tuple[DataFile, ...]  # merged, all of (spec_id, partition)
    live_data: frozenset[str]  # data files live at snapshot_id


@dataclass(frozen=True)
class MergeResult:
    delete_files_removed: int
    delete_files_added: int  # 0 (every entry named a file no longer live) or 1
    positions: int  # entries kept
    dropped: int  # entries naming data files no longer live (or repeated)
    snapshot_id: int | None  # None: nothing done


NOTHING = MergeResult(0, 0, 0, 0, None)


def plan_merge(table: Table, *, min_files: int) -> MergePlan | None:
    """The partition whose position-delete files one step merges: the first (in spec and
    partition order) holding at least ``min_files`` of them; None when none does."""
    head = table.current_snapshot()
    if head is None or table.metadata.format_version != 2:  # v3: deletion vectors, merged on write
        return None
    data: set[str] = set()
    groups: dict[tuple[int, PartitionKey], list[DataFile]] = defaultdict(list)
    for m in read_manifests(head, table.io):
        for entry in manifest_entries(m, table.io, live_only=True):
            f = entry.data_file
            if f.content == DataFileContent.DATA:
                data.add(f.file_path)
            elif f.content == DataFileContent.POSITION_DELETES and f.file_format == FileFormat.PARQUET:
                groups[(f.spec_id, partition_key(f))].append(f)
    for spec_id, key in sorted(groups, key=repr):
        files = groups[(spec_id, key)]
        if len(files) >= max(min_files, 2):
            chosen = sorted(files, key=lambda f: f.file_path)[:MAX_FILES_PER_STEP]
            return MergePlan(head.snapshot_id, spec_id, key, tuple(chosen), frozenset(data))
    return None


def _merged_rows(table: Table, plan: MergePlan) -> tuple[pa.Table, int]:
    """Every (file_path, pos) of the plan's files naming a live data file, once each, sorted;
    and how many entries were left out."""
    schema = position_delete_arrow_schema()
    parts = []
    for f in plan.delete_files:
        with table.io.new_input(f.file_path).open() as stream:
            parts.append(pq.ParquetFile(stream).read(columns=["file_path", "pos"]).cast(schema))
    rows = pa.concat_tables(parts)
    total = rows.num_rows
    live = pa.array(sorted(plan.live_data), rows.schema.field("file_path").type)
    rows = rows.filter(pc.is_in(rows.column("file_path"), value_set=live))
    rows = rows.group_by(["file_path", "pos"]).aggregate([]).select(["file_path", "pos"])
    rows = rows.sort_by([("file_path", "ascending"), ("pos", "ascending")]).cast(schema)
    return rows, total - rows.num_rows


def merge_position_deletes(
    table: Table, *, min_files: int, crash: Crash = no_crash
) -> tuple[Table, MergeResult]:
    """One bounded merge step; returns the refreshed table and what was done."""
    plan = plan_merge(table, min_files=min_files)
    if plan is None:
        return table, NOTHING
    t0 = time.perf_counter()
    rows, dropped = _merged_rows(table, plan)
    added: list[DataFile] = []
    if rows.num_rows:
        spec = WriterSpec(
            data_location=f"{table.location().rstrip('/')}/data",
            batch_id=f"{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:12]}",
            data_schema=schema_to_pyarrow(table.schema()),
            equality_schema=pa.schema([]),
            position_schema=position_delete_arrow_schema(),
            io_properties=file_io_properties(table.io.properties),
        )
        writer = TableFileWriter(spec)
        writer.write_position_delete_file(0, rows, plan.partition)
        added = [
            position_delete_file_from_parquet(table, w.path, file_size=w.size, spec_id=plan.spec_id,
                                              partition=plan.partition, footer=w.footer)
            for w in writer.close()
        ]  # fmt: skip
    crash("position-delete-merge-files-written")
    summary = {
        MAINTENANCE_SUMMARY_KEY: KIND,
        f"{MAINTENANCE_SUMMARY_KEY}.delete-files-removed": str(len(plan.delete_files)),
        f"{MAINTENANCE_SUMMARY_KEY}.delete-files-added": str(len(added)),
        f"{MAINTENANCE_SUMMARY_KEY}.positions": str(rows.num_rows),
    }
    # Not committed (or unknown): the new file stays for orphan cleanup.
    table = commit_rewrite(
        table, expected_snapshot_id=plan.snapshot_id, remove=plan.delete_files,
        add_deletes=added, summary=summary,
    )  # fmt: skip
    head = table.current_snapshot()
    log.info(
        "%s: merged %d position-delete file(s) of partition %s into %d, %d position(s) kept, %d dropped, %.2fs",
        ".".join(table.name()), len(plan.delete_files), plan.partition, len(added), rows.num_rows,
        dropped, time.perf_counter() - t0,
    )  # fmt: skip
    return table, MergeResult(
        len(plan.delete_files), len(added), rows.num_rows, dropped,
        head.snapshot_id if head is not None else None,
    )  # fmt: skip
