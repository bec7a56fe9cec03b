"""Staged chunks of a transaction larger than a batch: what was spilled, where, and how the
apply stage reads it back.

A transaction whose events outgrow ``batch.max_events``/``max_bytes`` is staged to Parquet
chunk files as it arrives (``pipeline.spill``), in the layout ``pipeline.staging`` builds,
with ``__rep_seq`` numbered across the chunks of one table. The files are scratch: the
source is acknowledged only after the transaction's commit, so after a crash they are
re-read from the source; a new run clears what an old one left (``ChunkStore.clear``).

Every chunk of a batch belongs to ONE source transaction (the batcher closes the complete
transactions before it spills), so a table's checkpoint either covers all of a table's
spilled events or none of them (``spilled_pending``).
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from replicator.errors import TerminalError
from replicator.events.model import SourcePosition
from spark.object_storage import delete_file, open_input, open_output

UNFILLABLE_IN_CHUNKS = (
    "a transaction larger than the batch (batch.max_events / max_bytes) carries Debezium "
    "unavailable-value placeholders, which are filled from the transaction's earlier images "
    "of the key: raise the batch limits above the transaction's size, or give the source "
    "table REPLICA IDENTITY FULL"
)


@dataclass(frozen=True)
class StagedChunk:
    """One staged Parquet file of one table's part of a spilled transaction."""

    location: str  # a local path, or a URI on the shared staging storage
    rows: int
    schema: pa.Schema  # the staged layout when written (the table may have evolved since)


@dataclass
class SpilledTable:
    """One table's events of the pending transaction that were staged out of memory."""

    table: str
    first: SourcePosition
    last: SourcePosition
    chunks: list[StagedChunk] = field(default_factory=list)
    rows: int = 0  # staged rows so far: the next chunk's first ``__rep_seq``
    events: int = 0  # events staged (for the table's totals)
    dead_lettered: int = 0
    # A TRUNCATE among the spilled events: the commit removes every file, and only what
    # followed it is in ``chunks``.
    truncate: bool = False
    # staging.deferred_key_moves carried across chunks: after keys of key-changing updates
    # so far, and those a later u/d moved or deleted again.
    moved_to: set[Hashable] = field(default_factory=set)
    moved_again: set[Hashable] = field(default_factory=set)
    stopped: str | None = None  # why the table cannot take this transaction


def spilled_pending(current: SourcePosition | None, spilled: SpilledTable) -> bool:
    """Whether the table lacks the spilled events (its checkpoint is ``current``). A
    checkpoint inside the spilled range cannot come from a commit of this engine (one
    transaction is one commit): refuse rather than apply part of it twice."""
    if current is None or current.source != spilled.first.source or current < spilled.first:
        return True
    if current >= spilled.last:
        return False
    raise TerminalError(
        f"the table's checkpoint {current} lies inside a transaction ({spilled.first} .. "
        f"{spilled.last}): another writer committed part of it",
        table=spilled.table,
        position=current,
    )


def align(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` in ``schema``'s columns and types: a column added to the Iceberg table
    after a chunk was staged is null in it; a promoted type is cast (int -> long, ...)."""
    arrays = []
    for f in schema:
        if f.name in table.column_names:
            col = table.column(f.name)
            arrays.append(col if col.type == f.type else col.cast(f.type))
        else:
            arrays.append(pa.nulls(table.num_rows, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def same_layout(a: pa.Schema, b: pa.Schema) -> bool:
    return bool(a.names == b.names and a.types == b.types)


class ChunkStore:
    """Where staged chunks live: ``root`` on this machine, or ``uri`` (a location every Spark
    executor reads, for a cluster). Remembers what it wrote until ``discard``."""

    def __init__(self, root: Path, uri: str | None = None) -> None:
        self.root = root
        self.uri = uri.rstrip("/") if uri is not None else None
        self._written: list[tuple[str, dict[str, str]]] = []

    def clear(self) -> None:
        """Remove chunks an earlier run left behind (scratch: their transaction was never
        committed, or it was and they are no longer needed). Local storage only; on shared
        storage each file is removed by the run that wrote it."""
        shutil.rmtree(self.root, ignore_errors=True)

    def write(self, table: pa.Table, io_properties: Mapping[str, str]) -> StagedChunk:
        name = f"{uuid.uuid4().hex}.parquet"
        if self.uri is not None:
            location = f"{self.uri}/{name}"
            with open_output(location, io_properties) as out:
                pq.write_table(table, out, compression="lz4")
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            location = str(self.root / name)
            pq.write_table(table, location, compression="lz4")
        self._written.append((location, dict(io_properties)))
        return StagedChunk(location=location, rows=table.num_rows, schema=table.schema)

    def read(self, chunk: StagedChunk, io_properties: Mapping[str, str]) -> pa.Table:
        with open_input(chunk.location, io_properties) if "://" in chunk.location else open(
            chunk.location, "rb"
        ) as fh:
            return pq.read_table(fh)

    def discard(self) -> None:
        """Remove every chunk written since the last ``discard`` (after the commit, or when
        the run stops with the transaction uncommitted)."""
        written, self._written = self._written, []
        for location, props in written:
            with contextlib.suppress(Exception):  # scratch: a leftover is cleared at start
                if "://" in location:
                    delete_file(location, props)
                else:
                    Path(location).unlink(missing_ok=True)

