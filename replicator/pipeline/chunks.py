"""Staged chunks of a transaction larger than a batch: what was spilled, where, and how the
apply stage reads it back.

A transaction whose events outgrow ``batch.max_events``/``max_bytes`` is staged to Parquet
chunk files as it arrives (``pipeline.spill``), in the layout ``pipeline.staging`` builds,
with ``__rep_seq`` numbered across the chunks of one table. The files are scratch: the
source is acknowledged only after the transaction's commit, so after a crash they are
re-read from the source; a new run clears what an old one left (``ChunkStore.clear``).

Every chunk of a batch belongs to ONE source transaction (the batcher closes the complete
transactions before it spills), so a table's checkpoint either covers all of a table's
spilled events or none of them (``replicator.commit.rules.spill_needed``).
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

from replicator.events.model import SourcePosition
from replicator.storage.fileio import delete_file, open_input, open_output

UNFILLABLE_IN_CHUNKS = (
    "a transaction larger than the batch (batch.max_events / max_bytes) carries Debezium "
    "unavailable-value placeholders, which are filled from the transaction's earlier images "
    "of the key: raise the batch limits above the transaction's size, or give the source "
    "table REPLICA IDENTITY FULL"
)


@dataclass
class SpilledTable:
    """One table's events of the pending transaction that were staged out of memory.

    Its chunks are ``store.location(prefix, i)`` for i in ``range(first_chunk, chunks)``.
    Nothing here grows per chunk but two counters (a list of per-chunk objects made while
    the events fill memory would pin Python's allocator arenas: measured about 1 MiB of
    RSS per chunk), except the layout list, which grows per schema change."""

    table: str
    first: SourcePosition
    last: SourcePosition
    prefix: str  # the chunk store's name prefix for this table's chunks
    chunks: int = 0  # chunk files written
    first_chunk: int = 0  # the first one that counts (the ones before a TRUNCATE do not)
    # (first chunk index, staged layout) each time the layout changed (a column added)
    layouts: list[tuple[int, pa.Schema]] = field(default_factory=list)
    rows: int = 0  # staged rows so far: the next chunk's first ``__rep_seq``
    live_rows: int = 0  # staged rows from ``first_chunk`` on
    events: int = 0  # events staged (for the table's totals)
    dead_lettered: int = 0
    # A TRUNCATE among the spilled events: the commit removes every file, and only the
    # chunks after it count.
    truncate: bool = False
    # staging.deferred_key_moves carried across chunks: after keys of key-changing updates
    # so far, and those a later u/d moved or deleted again.
    moved_to: set[Hashable] = field(default_factory=set)
    moved_again: set[Hashable] = field(default_factory=set)
    stopped: str | None = None  # why the table cannot take this transaction
    # Events handed over per op (c/r/u/d/t) and the newest source time among them: the
    # committed batch's metrics count them (they are not among its events in memory).
    ops: dict[str, int] = field(default_factory=dict)
    newest_ms: int | None = None

    def added(self, layout: pa.Schema, rows: int) -> None:
        """Count the chunk just written (``rows`` staged rows in ``layout``)."""
        if not self.layouts or not same_layout(self.layouts[-1][1], layout):
            self.layouts.append((self.chunks, layout))
        self.chunks += 1
        self.rows += rows
        self.live_rows += rows

    def truncated(self) -> None:
        """A TRUNCATE: the chunks so far do not count."""
        self.truncate = True
        self.first_chunk = self.chunks
        self.live_rows = 0
        self.moved_to.clear()
        self.moved_again.clear()

    def layout_of(self, chunk: int) -> pa.Schema:
        return next(layout for first, layout in reversed(self.layouts) if first <= chunk)


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
    executor reads, for a cluster). A chunk is named by a prefix (one per table and
    transaction, or per rewrite) and its index; the store counts what it wrote per prefix
    until ``discard``."""

    def __init__(self, root: Path, uri: str | None = None) -> None:
        self.root = root
        self.uri = uri.rstrip("/") if uri is not None else None
        self._written: dict[str, tuple[int, dict[str, str]]] = {}  # prefix -> (files, io)

    def clear(self) -> None:
        """Remove chunks an earlier run left behind (scratch: their transaction was never
        committed, or it was and they are no longer needed). Local storage only; on shared
        storage each file is removed by the run that wrote it."""
        shutil.rmtree(self.root, ignore_errors=True)

    def new_prefix(self) -> str:
        base = self.uri if self.uri is not None else str(self.root)
        return f"{base}/{uuid.uuid4().hex[:16]}-"

    @staticmethod
    def location(prefix: str, index: int) -> str:
        return f"{prefix}{index:06d}.parquet"

    def write(self, table: pa.Table, prefix: str, io_properties: Mapping[str, str]) -> str:
        """Write the next chunk under ``prefix``; returns its location."""
        count, _props = self._written.get(prefix, (0, {}))
        location = self.location(prefix, count)
        if self.uri is not None:
            with open_output(location, io_properties) as out:
                pq.write_table(table, out, compression="lz4")
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            pq.write_table(table, location, compression="lz4")
        self._written[prefix] = (count + 1, _props or dict(io_properties))
        return location

    def read(self, location: str, io_properties: Mapping[str, str]) -> pa.Table:
        if "://" in location:
            with open_input(location, io_properties) as fh:
                return pq.read_table(fh)
        return pq.read_table(location)

    def discard(self) -> None:
        """Remove every chunk written since the last ``discard`` (after the commit, or when
        the run stops with the transaction uncommitted)."""
        written, self._written = self._written, {}
        for prefix, (count, props) in written.items():
            for i in range(count):
                location = self.location(prefix, i)
                with contextlib.suppress(Exception):  # scratch: a leftover is cleared at start
                    if "://" in location:
                        delete_file(location, props)
                    else:
                        Path(location).unlink(missing_ok=True)
