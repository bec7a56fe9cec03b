"""A table's staged batch as the Spark tasks of the apply stage (``spark.apply_stage``).

By default a table's batch is ONE ordered task. With ``spark.table_parallelism: N`` it is split
by a stable hash of the key into up to N tasks (``ops_mapping.split``): each key's events stay
in one task in their order, each task runs its own mapper and writes its own files (under its
own file names), and the driver gathers every task's files into the table's ONE snapshot of
the batch, as before. So one busy table's batch uses several executor cores.

The batch stays ONE task when splitting could break it:
- a key-changing update (a row moves between keys; ``ops_mapping.split``);
- a table without a primary key (rows named by their whole image, mapped as a multiset);
- a transaction staged in chunks before the batch (its chunk files are read by one mapper).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from ops_mapping import MappingPolicy
from ops_mapping.split import split_by_key
from replicator.pipeline.staging import StagedBatch
from replicator.storage.fileio import open_output
from spark.appends import all_reads
from spark.apply_stage import StageResult, StageSpec, StageTask, merge_results


def appends_only(staged: StagedBatch | None, policy: MappingPolicy, chunks: Sequence[str], keyless: bool) -> bool:
    """A table's part of a batch is plain snapshot reads of a table with a key (staged, no
    staged chunks, reads the batch's policy does not upsert): the mapper appends every row
    and deletes nothing, so its stage is a Parquet write of the staged rows, no dearer in
    the driver than staging them for a Spark job (issue 27: snapshot chunks to data files
    without a staged round trip or a job; ``pipeline.apply`` writes such a part there)."""
    if staged is None or chunks or keyless or policy.upsert_reads or not staged.table.num_rows:
        return False
    return all_reads(staged.table)


# A format-v3 table's position deletes come back from a Spark task as rows in its result
# (``StageSpec.writer.position_deletes_in_memory``: no Parquet file written, read back by the
# driver and deleted) for parts up to this many rows: a position delete per row at most, an
# Arrow IPC stream of ~12 bytes each (paths dictionary-encoded). Larger parts write files.
POSITIONS_IN_RESULT_MAX_ROWS = 2_000_000


def positions_in_memory(spec: StageSpec, vectors: bool, rows: int = 0) -> StageSpec:
    """``spec`` whose writer keeps a table's position deletes as rows: a table with deletion
    vectors (``vectors``) and a part of at most ``POSITIONS_IN_RESULT_MAX_ROWS`` rows."""
    keep = vectors and rows <= POSITIONS_IN_RESULT_MAX_ROWS
    if keep == spec.writer.position_deletes_in_memory:
        return spec
    return dataclasses.replace(spec, writer=dataclasses.replace(spec.writer, position_deletes_in_memory=keep))


def write_staged(table: pa.Table, path: str, io_properties: dict[str, str]) -> None:
    """One staged shard as Parquet at ``path`` (a URI on shared storage, or a local path)."""
    if "://" in path:
        with open_output(path, io_properties) as out:
            pq.write_table(table, out, compression="lz4")
    else:
        pq.write_table(table, path, compression="lz4")


@dataclasses.dataclass(frozen=True)
class PartInput:
    """One table's part of a batch as the stage needs it."""

    staged: pa.Table
    spec: StageSpec
    chunk_paths: tuple[str, ...] = ()
    chunk_rows: int = 0
    vectors: bool = False  # the table takes deletion vectors (format v3)


def shards_of(part: PartInput, parallelism: int) -> list[pa.Table]:
    """The staged batch as the tables of its tasks (one unless it may be split)."""
    if parallelism <= 1 or part.chunk_paths or part.spec.keyless:
        return [part.staged]
    return split_by_key(part.staged, part.spec.key_columns, parallelism)


def part_tasks(
    part: PartInput, parallelism: int, io_properties: dict[str, str], prefix: str
) -> list[StageTask]:
    """The tasks of one table's part; shard ``j`` is staged (written here) at
    ``{prefix}-{j}.parquet``. A part with only staged chunks is one task with no staged file."""
    whole = positions_in_memory(part.spec, part.vectors, part.staged.num_rows + part.chunk_rows)
    if not part.staged.num_rows:
        return [StageTask(staged_path="", spec=whole, io_properties=io_properties,
                          rows=part.chunk_rows, chunk_paths=part.chunk_paths)]  # fmt: skip
    shards = shards_of(part, parallelism)
    tasks = []
    for j, shard in enumerate(shards):
        path = f"{prefix}-{j:03d}.parquet"
        write_staged(shard, path, io_properties)
        spec = whole
        if len(shards) > 1:  # its own file names: shards of one batch write side by side
            spec = dataclasses.replace(spec, writer=dataclasses.replace(spec.writer, batch_id=f"{spec.writer.batch_id}-s{j}"))
        tasks.append(StageTask(staged_path=path, spec=spec, io_properties=io_properties,
                               rows=shard.num_rows + (part.chunk_rows if j == 0 else 0),
                               chunk_paths=part.chunk_paths))  # fmt: skip
    return tasks


def gathered(results: Sequence[StageResult], counts: Sequence[int]) -> list[StageResult]:
    """Every part's tasks' results as one (``counts[i]``: part i's tasks, in order)."""
    out, at = [], 0
    for n in counts:
        out.append(merge_results(results[at : at + n]))
        at += n
    return out
